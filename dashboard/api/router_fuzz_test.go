package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fw-serve/fw/internal/testreq"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/dashboard/mlflow"
	"github.com/fw-serve/fw/dashboard/store"
)

// The fuzz targets below go through the dashboard's real router
// (Server.Handler on a fasthttp.RequestCtx) over a real SQLite store: no
// route may panic (the recovery counter must stay 0), no answer may be a
// 5xx, and every error has the documented shape.

// fuzzDash is a dashboard over a temporary store with one experiment and
// run, for the fuzz targets.
type fuzzDash struct {
	srv *Server
	exp string
	dir string // the store's, with checkpoints/ and artifacts/ in it
}

func newFuzzDash(f *testing.F) *fuzzDash {
	f.Helper()
	dir := f.TempDir()
	st, err := store.Open(context.Background(), store.Config{Dir: dir})
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ml := mlflow.New(ctx, st, mlflow.Config{ArtifactDir: filepath.Join(dir, "artifacts"), UploadDir: filepath.Join(dir, "artifacts")}, log)
	srv := New(ctx, st, Config{ArtifactDir: filepath.Join(dir, "artifacts"), CheckpointDir: filepath.Join(dir, "checkpoints"), Mounts: []Mount{ml}}, log)
	srv.SetMetrics(prometheus.NewRegistry())
	f.Cleanup(func() {
		cancel()
		st.Close()
	})
	d := &fuzzDash{srv: srv, dir: dir}
	seed := `[{"type":"run_start","run_id":"r1","seq":1,"experiment":"fuzz","params":{"lr":0.1,"opt":"sgd"},"tags":{"t":"v"}},` +
		`{"type":"metrics","run_id":"r1","seq":2,"step":1,"values":{"loss":0.5,"acc":0.9}}]`
	if code, body := d.serve("POST", "/api/ingest", "application/json", []byte(seed), false); code != 200 {
		f.Fatalf("seed ingest: %d %s", code, body)
	}
	exps, err := st.ListExperiments(context.Background(), store.ListQuery{Limit: 10})
	if err != nil || len(exps.Experiments) != 1 {
		f.Fatalf("seed experiment: %v %+v", err, exps)
	}
	d.exp = exps.Experiments[0].ID
	return d
}

// serve runs one request through Handler (a streamed body when stream) and
// returns the status and the body.
func (d *fuzzDash) serve(method, uri, ctype string, body []byte, stream bool) (int, []byte) {
	ctx := testreq.Serve(d.srv.Handler, method, uri, ctype, body, stream)
	return ctx.Response.StatusCode(), append([]byte(nil), ctx.Response.Body()...)
}

// check fails on a recovered panic, a 5xx, or an error without the shape.
func (d *fuzzDash) check(t *testing.T, code int, body []byte) {
	t.Helper()
	var m dto.Metric
	if err := d.srv.prom.panics.Write(&m); err != nil || m.GetCounter().GetValue() != 0 {
		t.Fatalf("a route panicked (%v recovered): %d %s", m.GetCounter().GetValue(), code, body)
	}
	if code < 300 {
		return
	}
	if code >= 500 {
		t.Fatalf("status %d: %s", code, body)
	}
	var e struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("%d without the error shape: %s", code, body)
	}
}

// FuzzDashboardIngest: POST /api/ingest with any body, JSON array or lines.
func FuzzDashboardIngest(f *testing.F) {
	d := newFuzzDash(f)
	for _, s := range []string{
		`[{"type":"metrics","run_id":"r1","seq":3,"step":2,"values":{"loss":0.4}}]`,
		`[{"type":"run_start","run_id":"r2","seq":1,"experiment":"e2","params":{"a":{"b":[1,2,{"c":null}]}}}]`,
		`[{"type":"log","run_id":"r1","seq":4,"stream":"stdout","lines":["a","b\u0000"]}]`,
		`[{"type":"progress","run_id":"r1","seq":5,"step":9223372036854775807,"total_steps":-1}]`,
		`[{"type":"metrics","run_id":"r1","seq":6,"step":1,"values":{"x":"NaN","y":"-Infinity","z":1e309}}]`,
		`[{"type":"run_end","run_id":"r1","seq":7,"status":"finished","exit_code":-2147483649}]`,
		`[{"type":"tag","run_id":"r1","seq":8,"tags":{"":"x"},"delete_tags":[""]}]`,
		`[{"type":"checkpoint","run_id":"r1","seq":9,"path":"../../etc/passwd","size":-1}]`,
		`{"type":"metric","run_id":"r1","seq":10,"key":"k","value":1}` + "\n\n" + `{"type":"status","run_id":"r1","seq":11,"status":"zzz"}`,
		`[` + string(bytes.Repeat([]byte(`{},`), 100)) + `{}]`, `[]`, `[1,"a",null,[]]`, `{`, ``,
	} {
		f.Add([]byte(s), "application/json", false)
		f.Add([]byte(s), "application/x-ndjson", true)
	}
	f.Fuzz(func(t *testing.T, body []byte, ctype string, stream bool) {
		if len(body) > 256<<10 || len(ctype) > 256 {
			return
		}
		code, out := d.serve("POST", "/api/ingest", ctype, body, stream)
		d.check(t, code, out)
	})
}

// FuzzDashboardListParams: the filter language, sort, limit and cursor of
// the run listings (one experiment's and all runs), and the metrics query.
func FuzzDashboardListParams(f *testing.F) {
	d := newFuzzDash(f)
	for _, s := range [][4]string{
		{"metrics.loss < 0.6 and params.opt = 'sgd'", "metrics.loss", "10", ""},
		{"tags.t != 'v' or status = 'running'", "params.lr", "1", "eyJ4IjoxfQ"},
		{"name ~ 'a%' and created > '2020-01-01'", "created", "10000", "!!!"},
		{"((((((((((metrics.x > 1))))))))))", "metrics.", "-1", ""},
		{"metrics.loss > 1e999", "", "99999999999999999999", "AAAA"},
		{"params.lr in (0.1, 0.2)", "nope", "0", ""},
		{"'", "", "", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3], true)
		f.Add(s[0], s[1], s[2], s[3], false)
	}
	f.Fuzz(func(t *testing.T, filter, sort, limit, cursor string, desc bool) {
		if len(filter)+len(sort)+len(limit)+len(cursor) > 4096 {
			return
		}
		q := url.Values{"filter": {filter}, "sort": {sort}, "limit": {limit}, "cursor": {cursor}}
		if desc {
			q.Set("desc", "true")
		}
		for _, path := range []string{"/api/experiments/" + d.exp + "/runs", "/api/runs", "/api/experiments"} {
			start := time.Now()
			code, out := d.serve("GET", path+"?"+q.Encode(), "", nil, false)
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("%s?%s took %s on a store of one run: a query must not wedge the dashboard", path, q.Encode(), took)
			}
			d.check(t, code, out)
		}
		m := url.Values{"keys": {sort}, "max_points": {limit}, "system": {filter}}
		code, out := d.serve("GET", "/api/runs/r1/metrics?"+m.Encode(), "", nil, false)
		d.check(t, code, out)
	})
}

// FuzzMLflowAPI: MLflow's tracking API (/api/2.0/mlflow/...) with any
// endpoint, method, body and query: no panic, no 5xx, every error in
// MLflow's shape ({"error_code", "message"}), and nothing slower than 2 s.
func FuzzMLflowAPI(f *testing.F) {
	d := newFuzzDash(f)
	for _, s := range [][3]string{
		{"POST", "runs/create", `{"experiment_id":"0","start_time":"1700000000000","tags":[{"key":"mlflow.runName","value":"a b #1"}]}`},
		{"POST", "runs/log-batch", `{"run_id":"r1","metrics":[{"key":"loss","value":"NaN","timestamp":"1","step":"9223372036854775807"}],"params":[{"key":"p","value":"v"}]}`},
		{"POST", "runs/log-metric", `{"run_id":"r1","key":"k","value":1e309,"timestamp":-1,"step":-5}`},
		{"POST", "runs/search", `{"experiment_ids":["0","x"],"filter":"metrics.loss > 0.1 and params.opt = 'sgd' and attributes.status IN ('RUNNING')","order_by":["metrics.loss DESC"],"max_results":3,"page_token":"AAAA"}`},
		{"POST", "runs/update", `{"run_id":"r1","status":"KILLED","end_time":1}`},
		{"POST", "runs/delete", `{"run_id":"r1"}`},
		{"POST", "runs/log-inputs", `{"run_id":"r1","datasets":[{"dataset":{"name":"d","digest":"x"}}]}`},
		{"POST", "experiments/create", `{"name":"e/1","tags":[{"key":"mlflow.note.content","value":"n"}]}`},
		{"POST", "experiments/search", `{"filter":"name LIKE 'f%'","view_type":"ALL","order_by":["creation_time DESC"]}`},
		{"GET", "metrics/get-history?run_id=r1&metric_key=loss&max_results=1&page_token=0", ``},
		{"GET", "metrics/get-history-bulk-interval?run_ids=r1&run_ids=r2&metric_key=loss&start_step=0&end_step=5", ``},
		{"GET", "artifacts/list?run_id=r1&path=../..", ``},
		{"GET", "experiments/get-by-name?experiment_name=fuzz", ``},
		{"PUT", "../mlflow-artifacts/artifacts/0/r1/artifacts/a/b.txt", `hello`},
		{"GET", "../mlflow-artifacts/artifacts?path=0/r1/artifacts/a", ``},
		{"POST", "runs/log-batch", `{"run_id":"r1","metrics":[` + string(bytes.Repeat([]byte(`{"key":"k","value":1,"step":1},`), 50)) + `{}]}`},
		{"POST", "logged-models", `{"experiment_id":"0","name":"m (1)","params":[{"key":"p","value":"v"}]}`},
		{"PATCH", "logged-models/m-0/tags", `{"tags":[{"key":"a","value":"b"}]}`},
		{"POST", "logged-models/search", `{"experiment_ids":["0"],"filter":"metrics.a > 1 AND name LIKE 'm%'","order_by":[{"field_name":"name"}],"page_token":"MQ"}`},
		{"POST", "runs/outputs", `{"run_id":"r1","models":[{"model_id":"m-0","step":1}]}`},
		{"PUT", "../mlflow-artifacts/artifacts/free/dir/f.txt", `x`},
		{"POST", "nope", `{`},
	} {
		f.Add(s[0], s[1], []byte(s[2]))
	}
	f.Fuzz(func(t *testing.T, method, route string, body []byte) {
		if len(body) > 64<<10 || len(route) > 512 || len(method) > 16 {
			return
		}
		switch method {
		case "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD":
		default:
			return
		}
		prefix := "/api/2.0/mlflow/"
		if len(route)%2 == 1 {
			prefix = "/ajax-api/2.0/mlflow/"
		}
		uri := prefix + route
		if _, err := url.ParseRequestURI(uri); err != nil {
			return
		}
		start := time.Now()
		ctx := testreq.Serve(d.srv.Handler, method, uri, "application/json", body, len(body)%3 == 0)
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("%s %s took %s", method, uri, took)
		}
		code, out := ctx.Response.StatusCode(), ctx.Response.Body()
		var m dto.Metric
		if err := d.srv.prom.panics.Write(&m); err != nil || m.GetCounter().GetValue() != 0 {
			t.Fatalf("a route panicked: %s %s -> %d %s", method, uri, code, out)
		}
		if code >= 500 {
			t.Fatalf("%s %s: status %d: %s", method, uri, code, out)
		}
		if code < 300 || method == "HEAD" {
			return
		}
		path := string(ctx.Path())
		var e map[string]any
		if err := json.Unmarshal(out, &e); err != nil {
			t.Fatalf("%s %s: %d answer is not JSON: %s", method, uri, code, out)
		}
		if mlflow.Owns(path) {
			if e["error_code"] == nil || e["message"] == nil {
				t.Fatalf("%s %s (%s): %d without MLflow's error shape: %s", method, uri, path, code, out)
			}
		} else if e["error"] == nil {
			t.Fatalf("%s %s (%s): %d without fw's error shape: %s", method, uri, path, code, out)
		}
	})
}

// FuzzDashboardUploadRunFile: PUT /api/runs/{id}/files with any run ID,
// kind, path and body. Beyond the shape rules: an upload is stored (200)
// only for run r1, a known kind and a path store.ValidateRelPath accepts,
// and then the file under the run's directory of that kind holds exactly
// the body (nothing is ever written outside it).
func FuzzDashboardUploadRunFile(f *testing.F) {
	d := newFuzzDash(f)
	for _, s := range [][3]string{
		{"r1", "checkpoint", "step_1.pt"}, {"r1", "artifact", "plots/loss.png"}, {"r1", "checkpoint", "../../x"},
		{"r1", "artifact", "/etc/passwd"}, {"r1", "artifact", "a\\b"}, {"r1", "model", "x"}, {"nope", "checkpoint", "x"},
		{"../r1", "checkpoint", "x"}, {"r1", "checkpoint", "a//b"}, {"r1", "artifact", "."}, {"r1", "artifact", "a\x00b"},
	} {
		f.Add(s[0], s[1], s[2], []byte("weights"), false)
		f.Add(s[0], s[1], s[2], []byte(""), true)
	}
	f.Fuzz(func(t *testing.T, run, kind, rel string, body []byte, stream bool) {
		if len(body) > 64<<10 || len(run)+len(kind)+len(rel) > 4096 {
			return
		}
		uri := "/api/runs/" + url.PathEscape(run) + "/files?" + url.Values{"kind": {kind}, "path": {rel}}.Encode()
		code, out := d.serve("PUT", uri, "application/octet-stream", body, stream)
		d.check(t, code, out)
		if code != 200 {
			return
		}
		sub := runFileKind(kind)
		// The run the server saw: fasthttp decodes the path and normalises
		// it (an escaped "/r1" gives /api/runs//r1/files, then
		// /api/runs/r1/files), as it does for every route.
		var u fasthttp.URI
		if err := u.Parse(nil, []byte(uri)); err != nil {
			t.Fatalf("%s: %v", uri, err)
		}
		seen, ok := strings.CutPrefix(string(u.Path()), "/api/runs/")
		if ok {
			seen, ok = strings.CutSuffix(seen, "/files")
		}
		if !ok || seen != "r1" || sub == "" || store.ValidateRelPath(rel) != nil {
			t.Fatalf("stored run %q (path %s) kind %q path %q: %s", run, u.Path(), kind, rel, out)
		}
		got, err := os.ReadFile(filepath.Join(d.dir, sub, seen, filepath.FromSlash(rel)))
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("the stored file of %s %q: %v (%d bytes, sent %d)", kind, rel, err, len(got), len(body))
		}
	})
}
