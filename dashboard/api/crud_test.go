package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/dashboard/store"
)

// startCRUDServer serves the real router over a temp SQLite store on
// 127.0.0.1 and returns its URL.
func startCRUDServer(t *testing.T, setup func(*Server)) string {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), store.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	srv := New(context.Background(), st, Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if setup != nil {
		setup(srv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &fasthttp.Server{Handler: srv.Handler, StreamRequestBody: true}
	go hs.Serve(ln)
	t.Cleanup(func() {
		hs.Shutdown()
		st.Close()
	})
	return "http://" + ln.Addr().String()
}

// doJSON sends a request and decodes the JSON object answered.
func doJSON(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	return doRequest(t, method, url, body, nil)
}

// errCode checks the one error shape and returns its code.
func errCode(t *testing.T, out map[string]any) string {
	t.Helper()
	e, ok := out["error"].(map[string]any)
	if !ok || e["code"] == "" || e["message"] == "" {
		t.Fatalf("not the error shape: %v", out)
	}
	return e["code"].(string)
}

// ingest posts events and checks they were all applied.
func ingest(t *testing.T, url, events string) {
	t.Helper()
	code, out := doJSON(t, "POST", url+"/api/ingest", events)
	if code != 200 || out["errors"] != nil && len(out["errors"].([]any)) > 0 {
		t.Fatalf("ingest: %d %v", code, out)
	}
}

func runStart(run, exp, params string) string {
	return fmt.Sprintf(`{"type":"run_start","run_id":%q,"seq":1,"experiment":%q,"params":%s}`, run, exp, params)
}

func TestExperimentCRUD(t *testing.T) {
	url := startCRUDServer(t, nil)
	code, out := doJSON(t, "POST", url+"/api/experiments", `{"name":"digits","tags":{"team":"a","old":"x"}}`)
	if code != 201 {
		t.Fatalf("create: %d %v", code, out)
	}
	id := out["id"].(string)
	ingest(t, url, "["+runStart("r1", "digits", `{"lr":0.1}`)+","+runStart("r2", "digits", `{"lr":0.01}`)+","+runStart("r3", "digits", `{"lr":0.001}`)+"]")

	code, out = doJSON(t, "PATCH", url+"/api/experiments/"+id, `{"name":"digits2","description":"d","archived":true,"tags":{"team":"b","old":null}}`)
	if code != 200 || out["name"] != "digits2" || out["description"] != "d" || out["archived"] != true {
		t.Fatalf("patch: %d %v", code, out)
	}
	if tags := out["tags"].(map[string]any); tags["team"] != "b" || tags["old"] != nil {
		t.Errorf("tags after patch: %v", tags)
	}
	if code, out = doJSON(t, "PATCH", url+"/api/experiments/"+id, `{"nope":1}`); code != 400 {
		t.Errorf("unknown field: %d %v", code, out)
	}
	if code, out = doJSON(t, "PATCH", url+"/api/experiments/missing", `{"name":"x"}`); code != 404 || errCode(t, out) != "not_found" {
		t.Errorf("patch missing: %d %v", code, out)
	}

	// Runs of the experiment, by name after the rename, sorted and paged.
	var got []string
	cursor := ""
	for page := 0; page < 5; page++ {
		code, out = doJSON(t, "GET", url+"/api/experiments/digits2/runs?sort=params.lr&limit=2&cursor="+cursor, "")
		if code != 200 {
			t.Fatalf("runs: %d %v", code, out)
		}
		for _, r := range out["runs"].([]any) {
			got = append(got, r.(map[string]any)["id"].(string))
		}
		next, _ := out["next"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	if strings.Join(got, ",") != "r3,r2,r1" {
		t.Errorf("runs sorted by params.lr: %v", got)
	}
	code, out = doJSON(t, "GET", url+"/api/experiments/"+id+"/runs?filter="+strings.ReplaceAll("params.lr > 0.005", " ", "%20"), "")
	if code != 200 || len(out["runs"].([]any)) != 2 {
		t.Errorf("filtered runs: %d %v", code, out)
	}
	if code, out = doJSON(t, "GET", url+"/api/experiments/"+id+"/runs?limit=0", ""); code != 400 {
		t.Errorf("limit=0: %d %v", code, out)
	}
	code, out = doJSON(t, "GET", url+"/api/experiments?filter=name%20%3D%20%22digits2%22&limit=5", "")
	if code != 200 || len(out["experiments"].([]any)) != 1 {
		t.Errorf("list experiments filtered: %d %v", code, out)
	}

	if code, out = doJSON(t, "DELETE", url+"/api/experiments/"+id, ""); code != 200 || out["deleted"] != true {
		t.Fatalf("delete: %d %v", code, out)
	}
	if code, out = doJSON(t, "GET", url+"/api/experiments/"+id, ""); code != 404 {
		t.Errorf("after delete: %d %v", code, out)
	}
	if code, out = doJSON(t, "GET", url+"/api/runs/r1", ""); code != 404 {
		t.Errorf("run after experiment delete: %d %v", code, out)
	}
	if code, out = doJSON(t, "PUT", url+"/api/experiments/x", ""); code != 405 || errCode(t, out) != CodeMethodNotAllowed {
		t.Errorf("PUT: %d %v", code, out)
	}
}

func TestRunCRUD(t *testing.T) {
	url := startCRUDServer(t, nil)
	ingest(t, url, "["+runStart("r1", "e", `{}`)+"]")
	code, out := doJSON(t, "PATCH", url+"/api/runs/r1", `{"name":"best","tags":{"k":"v"}}`)
	if code != 200 || out["name"] != "best" || out["tags"].(map[string]any)["k"] != "v" {
		t.Fatalf("patch run: %d %v", code, out)
	}
	code, out = doJSON(t, "PATCH", url+"/api/runs/r1", `{"tags":{"k":null}}`)
	if code != 200 || len(out["tags"].(map[string]any)) != 0 {
		t.Errorf("untag: %d %v", code, out)
	}
	if code, out = doJSON(t, "PATCH", url+"/api/runs/nope", `{"name":"x"}`); code != 404 || errCode(t, out) != "not_found" {
		t.Errorf("patch missing run: %d %v", code, out)
	}
	if code, out = doJSON(t, "DELETE", url+"/api/runs/r1", ""); code != 200 {
		t.Fatalf("delete run: %d %v", code, out)
	}
	if code, out = doJSON(t, "GET", url+"/api/runs/r1", ""); code != 404 {
		t.Errorf("after delete: %d %v", code, out)
	}
	if code, out = doJSON(t, "DELETE", url+"/api/runs/r1", ""); code != 404 || errCode(t, out) != "not_found" {
		t.Errorf("delete twice: %d %v", code, out)
	}
}

func TestRoutePattern(t *testing.T) {
	s := New(context.Background(), nil, Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	f := func(path, want string) {
		t.Helper()
		if got := s.patternOf(path); got != want {
			t.Errorf("patternOf(%q) = %q, want %q", path, got, want)
		}
	}
	f("/health", "/health")
	f("/metrics", "/metrics")
	f("/api/runs/abc", "/api/runs/{id}")
	f("/api/runs/abc/metrics", "/api/runs/{id}/metrics")
	f("/api/runs/abc/zzz", "other")
	f("/api/experiments/e1/runs", "/api/experiments/{id}/runs")
	f("/api/system/status", "/api/system/status")
	f("/api/training/start", "/api/training/start")
	f("/api/training/r1/stop", "/api/training/{id}/stop")
	f("/api/nope/1", "other")
	f("/favicon.ico", "other")
	f("/api/models/export", "/api/models/export")
	f("/api/models/m1/versions/3", "/api/models/{name}/versions/{version}")
	f("/api/deployments/d1/predict/image", "/api/deployments/{id}/predict/image")
	f("/api/runs//metrics", "other")
	f("/api/runs/", "/api/runs")
}

func TestMetricsEndpoint(t *testing.T) {
	url := startCRUDServer(t, func(s *Server) { s.SetMetrics(prometheus.NewRegistry()) })
	doJSON(t, "GET", url+"/api/runs/r1", "") // 404, counted under its pattern
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"go_goroutines", "fw_dashboard_uptime_seconds", `fw_dashboard_http_requests_total{code="404",method="GET",route="/api/runs/{id}"} 1`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, b)
		}
	}
	if code, out := doJSON(t, "GET", url+"/api/system/status", ""); code != 503 || errCode(t, out) != CodeUnavailable {
		t.Errorf("status without a sampler: %d %v", code, out)
	}
}

// TestIngestMetrics: POST /api/ingest counts its events by result and
// observes each accepted event's lag from its own time (deploy/'s ingest-lag
// alert reads fw_dashboard_ingest_lag_seconds).
func TestIngestMetrics(t *testing.T) {
	url := startCRUDServer(t, func(s *Server) { s.SetMetrics(prometheus.NewRegistry()) })
	metric := func(name string) float64 {
		t.Helper()
		resp, err := http.Get(url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatal(err)
				}
				return f
			}
		}
		t.Fatalf("/metrics lacks %s:\n%s", name, b)
		return 0
	}
	if n := metric(`fw_dashboard_ingest_events_total{result="applied"}`); n != 0 {
		t.Fatalf("applied before any ingest: %v", n)
	}
	now := time.Now()
	ts := func(ago time.Duration) string { return strconv.Quote(now.Add(-ago).Format(time.RFC3339Nano)) }
	batch := `[{"type":"run_start","run_id":"r1","seq":1,"experiment":"e","time":` + ts(90*time.Second) + `},` +
		`{"type":"metrics","run_id":"r1","seq":2,"step":1,"values":{"loss":1},"time":` + ts(20*time.Millisecond) + `},` +
		`{"type":"metrics","run_id":"r1","seq":3,"step":2,"values":{"loss":0.5}},` + // no time: no lag observed
		`{"type":"nope","run_id":"r1","seq":4}]` // refused
	if code, out := doJSON(t, "POST", url+"/api/ingest", batch); code != 200 || len(out["errors"].([]any)) != 1 {
		t.Fatalf("ingest: %d %v", code, out)
	}
	doJSON(t, "POST", url+"/api/ingest", batch) // again: three duplicates, one refused
	f := func(name string, want float64) {
		t.Helper()
		if got := metric(name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	f(`fw_dashboard_ingest_events_total{result="applied"}`, 3)
	f(`fw_dashboard_ingest_events_total{result="duplicate"}`, 3)
	f(`fw_dashboard_ingest_events_total{result="refused"}`, 2)
	f(`fw_dashboard_ingest_lag_seconds_count`, 4)              // two timed events, twice
	f(`fw_dashboard_ingest_lag_seconds_bucket{le="60"}`, 2)    // the 20 ms ones
	f(`fw_dashboard_ingest_lag_seconds_bucket{le="120"}`, 4)   // and the 90 s ones
	f(`fw_dashboard_ingest_lag_seconds_bucket{le="0.005"}`, 0) // none was observed before it happened
}

// ?columns= narrows each run to the params and metrics named (a key with a
// comma quoted); the experiment lists its param keys; a field that is not
// a param or metric is refused with the reason.
func TestRunColumns(t *testing.T) {
	url := startCRUDServer(t, nil)
	ingest(t, url, "["+runStart("r1", "e", `{"lr":0.1,"a,b":"x","opt":"adam"}`)+`,
		{"type":"metrics","run_id":"r1","seq":2,"step":0,"values":{"loss":1,"acc":0.5}}]`)
	code, out := doJSON(t, "GET", url+`/api/experiments/e/runs?columns=params.lr,params."a,b",metrics.loss.min`, "")
	if code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	r := out["runs"].([]any)[0].(map[string]any)
	params, metrics := r["params"].(map[string]any), r["metrics"].(map[string]any)
	if len(params) != 2 || params["a,b"] != "x" || params["lr"] != 0.1 || len(metrics) != 1 || metrics["loss"] == nil {
		t.Fatalf("projected run: params %v metrics %v", params, metrics)
	}
	if code, out = doJSON(t, "GET", url+`/api/experiments/e/runs`, ""); code != 200 || len(out["runs"].([]any)[0].(map[string]any)["metrics"].(map[string]any)) != 2 {
		t.Fatalf("without columns: %d %v", code, out)
	}
	if code, out = doJSON(t, "GET", url+`/api/experiments/e`, ""); code != 200 || fmt.Sprint(out["param_keys"]) != "[a,b lr opt]" {
		t.Fatalf("param keys: %d %v", code, out["param_keys"])
	}
	for _, bad := range []string{"tags.team", "params.", "status"} {
		if code, out = doJSON(t, "GET", url+"/api/runs?columns="+bad, ""); code != 400 || errCode(t, out) != "invalid_argument" {
			t.Errorf("columns=%s: %d %v", bad, code, out)
		}
	}
}

// FuzzParseColumns: any ?columns= value parses into at most maxColumns
// keys of the three kinds, or is refused with invalid_argument; never a
// panic.
func FuzzParseColumns(f *testing.F) {
	for _, s := range []string{"params.lr,metrics.loss", `params."a,b",system.cpu`, `metrics."x\"y".min`, "tags.x", ",,,", `params."unterminated`, strings.Repeat("params.a,", 3000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		cols, e := parseColumns(v)
		if e != nil {
			if cols != nil || e.Status != 400 || e.Code != string(store.CodeInvalidArgument) || e.Message == "" {
				t.Fatalf("%q: bad refusal %+v", v, e)
			}
			return
		}
		if n := len(cols.Params) + len(cols.Metrics) + len(cols.System); n > maxColumns {
			t.Fatalf("%q: %d columns", v, n)
		}
	})
}
