package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/fw-serve/fw/internal/testlog"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startDashboard runs `fw dashboard` on a free port over dir and waits for /health.
func startDashboard(t *testing.T, dir string, args ...string) *proc {
	t.Helper()
	port := freePort(t)
	cmd := fwCmd(append([]string{"dashboard", "--port", strconv.Itoa(port), "--spool-interval", "200ms"}, args...)...)
	cmd.Env = append(cmd.Env, "FW_EXPERIMENT_DIR="+dir, "FW_CHECKPOINT_DIR="+filepath.Join(dir, "ckpt"), "FW_DASHBOARD_TOKEN=", "FW_DATABASE_URL=")
	out := &testlog.Buffer{}
	cmd.Stderr, cmd.Stdout = out, out
	return startProc(t, "fw dashboard", cmd, port, out, 30*time.Second)
}

// stop sends SIGTERM and checks the graceful exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.exitCode(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, p.stderr.String())
	}
}

// call sends a request and decodes the JSON answer.
func call(t *testing.T, method, url, token, ctype, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s: %d, not a JSON object: %q", method, url, resp.StatusCode, b)
	}
	return resp.StatusCode, out
}

// errorCode checks the error shape and returns its code.
func errorCode(t *testing.T, out map[string]any) string {
	t.Helper()
	e, ok := out["error"].(map[string]any)
	if !ok || e["code"] == "" || e["message"] == "" {
		t.Fatalf("not the error shape: %v", out)
	}
	return e["code"].(string)
}

func metricEvents(run string, from, to int) string {
	var b strings.Builder
	b.WriteString("[")
	for s := from; s <= to; s++ {
		if s > from {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"type":"metrics","run_id":%q,"writer":"w1","seq":%d,"step":%d,"values":{"loss":%g}}`, run, s, s, 1/float64(s))
	}
	b.WriteString("]")
	return b.String()
}

// steps returns the steps of a run's raw loss points.
func steps(t *testing.T, url, run string) map[int]bool { return metricSteps(t, url, run, "loss") }

// metricSteps returns the steps of a run's raw points of one metric.
func metricSteps(t *testing.T, url, run, key string) map[int]bool {
	t.Helper()
	code, out := call(t, "GET", url+"/api/runs/"+run+"/metrics?keys="+key+"&max_points=100000", "", "", "")
	if code != 200 {
		t.Fatalf("metrics: %d %v", code, out)
	}
	got := map[int]bool{}
	for _, s := range out["series"].([]any) {
		for _, b := range s.(map[string]any)["buckets"].([]any) {
			bm := b.(map[string]any)
			if bm["count"].(float64) != 1 {
				t.Fatalf("want raw points, got a bucket %v", bm)
			}
			got[int(bm["step_min"].(float64))] = true
		}
	}
	return got
}

func TestDashboardPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	var stderr bytes.Buffer
	cmd := fwCmd("dashboard", "--port", strconv.Itoa(port))
	cmd.Env = append(cmd.Env, "FW_EXPERIMENT_DIR="+t.TempDir(), "FW_CHECKPOINT_DIR="+t.TempDir())
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit %v, want status 1", err)
	}
	msg := strings.TrimSpace(stderr.String())
	if strings.Count(msg, "\n") != 0 || !strings.Contains(msg, fmt.Sprintf("port %d is already in use", port)) {
		t.Fatalf("want one line naming the port, got:\n%s", msg)
	}
}

func TestDashboardRefusesPublicWithoutToken(t *testing.T) {
	var out bytes.Buffer
	cmd := fwCmd("dashboard", "--host", "0.0.0.0", "--port", "0")
	cmd.Env = append(cmd.Env, "FW_EXPERIMENT_DIR="+t.TempDir(), "FW_DASHBOARD_TOKEN=")
	cmd.Stderr, cmd.Stdout = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("exit %v, want status 2:\n%s", err, out.String())
	}
	for _, want := range []string{"refusing to listen on 0.0.0.0 without a token", "can start processes", "--token", "FW_DASHBOARD_TOKEN"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("message lacks %q:\n%s", want, out.String())
		}
	}
}

func TestDashboardToken(t *testing.T) {
	p := startDashboard(t, t.TempDir(), "--token", "s3cret")
	routes := [][2]string{{"POST", "/api/ingest"}, {"GET", "/api/runs/r1"}, {"GET", "/api/runs/r1/metrics"},
		{"GET", "/api/runs/r1/logs"}, {"GET", "/api/experiments"}, {"POST", "/api/experiments"}, {"GET", "/api/experiments/e1"}, {"GET", "/api/nope"}}
	for _, r := range routes {
		for _, tok := range []string{"", "wrong"} {
			code, out := call(t, r[0], p.url+r[1], tok, "", "[]")
			if code != 401 || errorCode(t, out) != "unauthorized" {
				t.Errorf("%s %s with token %q: %d %v, want 401 unauthorized", r[0], r[1], tok, code, out)
			}
		}
	}
	if code, out := call(t, "GET", p.url+"/api/experiments", "s3cret", "", ""); code != 200 {
		t.Errorf("with the token: %d %v", code, out)
	}
	if code, _ := call(t, "GET", p.url+"/health", "", "", ""); code != 200 {
		t.Errorf("/health must stay open: %d", code)
	}
	p.stop(t)
}

func TestDashboardIngestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	p := startDashboard(t, dir)
	body := `[{"type":"run_start","run_id":"r1","writer":"w1","seq":1,"experiment":"digits","params":{"lr":0.01},"tags":{"team":"a"}},
	 {"type":"progress","run_id":"r1","writer":"w1","seq":2,"step":2,"total_steps":10},
	 {"type":"metrics","run_id":"r1","writer":"w1","seq":3,"step":1,"values":{"loss":0.5,"acc":0.8}},
	 {"type":"metrics","run_id":"r1","writer":"w1","seq":4,"step":2,"values":{"loss":"oops"}},
	 {"type":"param","run_id":"r1","writer":"w1","seq":5,"params":{"lr":0.1}},
	 {"type":"bogus","run_id":"r1","writer":"w1","seq":6},
	 {"type":"log","run_id":"r1","writer":"w1","seq":7,"stream":"stdout","lines":["hello"]}]`
	code, out := call(t, "POST", p.url+"/api/ingest", "", "application/json", body)
	if code != 200 || out["applied"].(float64) != 4 {
		t.Fatalf("ingest: %d %v", code, out)
	}
	want := map[int]string{3: "invalid_type", 4: "param_conflict", 5: "invalid_event"}
	errs := out["errors"].([]any)
	if len(errs) != len(want) {
		t.Fatalf("errors %v, want indexes %v", errs, want)
	}
	for _, e := range errs {
		em := e.(map[string]any)
		if want[int(em["index"].(float64))] != em["code"] {
			t.Errorf("error %v, want %v", em, want)
		}
	}
	// The same batch again: all duplicates; NDJSON is the same format.
	nd := `{"type":"metrics","run_id":"r1","writer":"w1","seq":3,"step":1,"values":{"loss":0.5}}` + "\n" +
		`{"type":"metrics","run_id":"r1","writer":"w1","seq":8,"step":3,"values":{"loss":0.25}}` + "\n"
	code, out = call(t, "POST", p.url+"/api/ingest", "", "application/x-ndjson", nd)
	if code != 200 || out["applied"].(float64) != 1 || out["duplicates"].(float64) != 1 {
		t.Fatalf("ndjson ingest: %d %v", code, out)
	}
	code, out = call(t, "GET", p.url+"/api/runs/r1", "", "", "")
	if code != 200 || out["status"] != "running" || out["params"].(map[string]any)["lr"] != 0.01 || out["tags"].(map[string]any)["team"] != "a" {
		t.Fatalf("run: %d %v", code, out)
	}
	if m := out["metrics"].(map[string]any)["loss"].(map[string]any); m["count"].(float64) != 2 || m["last"].(float64) != 0.25 {
		t.Fatalf("loss summary %v", m)
	}
	if got := steps(t, p.url, "r1"); len(got) != 2 || !got[1] || !got[3] {
		t.Fatalf("loss steps %v", got)
	}
	code, out = call(t, "GET", p.url+"/api/runs/r1/logs?tail=5", "", "", "")
	if code != 200 || len(out["lines"].([]any)) != 1 {
		t.Fatalf("logs: %d %v", code, out)
	}
	// Errors: every one in the shape.
	f := func(method, path, ctype, body string, status int, code string) {
		t.Helper()
		got, out := call(t, method, p.url+path, "", ctype, body)
		if got != status || errorCode(t, out) != code {
			t.Errorf("%s %s: %d %v, want %d %s", method, path, got, out, status, code)
		}
	}
	f("POST", "/api/ingest", "application/json", `[{"type":`, 400, "invalid_json")
	f("POST", "/api/ingest", "application/json", `{"type":"metrics"}`, 400, "invalid_json")
	f("POST", "/api/ingest", "", ``, 400, "invalid_json")
	f("POST", "/api/ingest", "application/json", metricEvents("r1", 100, 10100), 413, "batch_too_large")
	f("GET", "/api/ingest", "", "", 405, "method_not_allowed")
	f("GET", "/api/runs/nope", "", "", 404, "not_found")
	f("GET", "/api/runs/r1/metrics?max_points=x", "", "", 400, "invalid_argument")
	f("GET", "/api/experiments?filter=name%20%3D", "", "", 400, "invalid_argument")
	f("GET", "/api/nothing", "", "", 404, "not_found")
	f("POST", "/api/experiments", "", `{"name":"digits"}`, 409, "conflict")
	f("POST", "/api/experiments", "", `{"name":`, 400, "invalid_json")
	if code, out := call(t, "POST", p.url+"/api/experiments", "", "", `{"name":"cifar","description":"d","tags":{"a":"b"}}`); code != 201 || out["name"] != "cifar" {
		t.Fatalf("create: %d %v", code, out)
	}
	if code, out := call(t, "GET", p.url+"/api/experiments?filter="+strings.ReplaceAll(`name = "cifar"`, " ", "%20")+"&limit=5", "", "", ""); code != 200 || len(out["experiments"].([]any)) != 1 {
		t.Fatalf("filtered list: %d %v", code, out)
	}
	if code, out := call(t, "GET", p.url+"/api/experiments/digits", "", "", ""); code != 200 || out["runs"].(float64) != 1 {
		t.Fatalf("experiment: %d %v", code, out)
	}
	p.stop(t)
}

func TestDashboardSpoolImportOnce(t *testing.T) {
	dir := t.TempDir()
	spool := filepath.Join(dir, "spool")
	os.MkdirAll(spool, 0o755)
	var b strings.Builder
	b.WriteString(`{"type":"run_start","run_id":"sp1","writer":"wa","seq":1,"experiment":"offline"}` + "\n")
	for s := 2; s <= 51; s++ {
		fmt.Fprintf(&b, `{"type":"metrics","run_id":"sp1","writer":"wa","seq":%d,"step":%d,"values":{"loss":1}}`+"\n", s, s)
	}
	b.WriteString(`{"type":"run_end","run_id":"sp1","writer":"wa","seq":52}` + "\n")
	b.WriteString(`{"type":"metrics","run_id":"sp1","writer":"wa","seq":53,"step":53,"val`) // torn
	content := b.String()
	name := filepath.Join(spool, "sp1-wa.jsonl")
	os.WriteFile(name, []byte(content), 0o644)
	os.WriteFile(filepath.Join(spool, "..evil.jsonl"), []byte("x\n"), 0o644)

	for round := 0; round < 2; round++ {
		p := startDashboard(t, dir)
		code, out := call(t, "GET", p.url+"/api/runs/sp1", "", "", "")
		if code != 200 || out["status"] != "finished" || out["metrics"].(map[string]any)["loss"].(map[string]any)["count"].(float64) != 50 {
			t.Fatalf("round %d: %d %v\n%s", round, code, out, p.stderr.String())
		}
		if _, err := os.Stat(name); !os.IsNotExist(err) {
			t.Fatalf("round %d: the imported spool file is still there (%v)", round, err)
		}
		if round == 0 && !strings.Contains(p.stderr.String(), "half-written last line") {
			t.Errorf("no warning about the torn line:\n%s", p.stderr.String())
		}
		p.stop(t)
		os.WriteFile(name, []byte(content), 0o644) // the same file again: nothing applies twice
	}
	if _, err := os.Stat(filepath.Join(spool, "..evil.jsonl")); err != nil {
		t.Errorf("a file with a foreign name must be left alone: %v", err)
	}
}

func TestDashboardReconcileVanishedProcess(t *testing.T) {
	dir := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skip("no `true` command")
	}
	host, _ := os.Hostname()
	p := startDashboard(t, dir)
	body := fmt.Sprintf(`[{"type":"run_start","run_id":"gone1","writer":"w","seq":1,"experiment":"e","source":{"host":%q,"pid":%d}},
		{"type":"run_start","run_id":"live1","writer":"w","seq":1,"experiment":"e","source":{"host":%q,"pid":%d}}]`, host, dead.Process.Pid, host, os.Getpid())
	if code, out := call(t, "POST", p.url+"/api/ingest", "", "", body); code != 200 || out["applied"].(float64) != 2 {
		t.Fatalf("ingest: %d %v", code, out)
	}
	p.stop(t)
	p = startDashboard(t, dir)
	_, out := call(t, "GET", p.url+"/api/runs/gone1", "", "", "")
	if out["status"] != "failed" || !strings.Contains(out["error"].(string), "process vanished") {
		t.Fatalf("gone1: %v", out)
	}
	if _, out = call(t, "GET", p.url+"/api/runs/live1", "", "", ""); out["status"] != "running" {
		t.Fatalf("live1: %v", out)
	}
}

// TestDashboardKillDuringIngest kills the dashboard in the middle of a
// stream of ingest requests: every acknowledged event must survive.
func TestDashboardKillDuringIngest(t *testing.T) {
	dir := t.TempDir()
	p := startDashboard(t, dir)
	if code, out := call(t, "POST", p.url+"/api/ingest", "", "", `[{"type":"run_start","run_id":"k1","writer":"w1","seq":1,"experiment":"kill"}]`); code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	const per = 500
	var mu sync.Mutex
	acked := 0 // highest step acknowledged
	done := make(chan struct{})
	go func() {
		defer close(done)
		for from := 2; ; from += per {
			resp, err := http.Post(p.url+"/api/ingest", "application/json", strings.NewReader(metricEvents("k1", from, from+per-1)))
			if err != nil {
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return
			}
			mu.Lock()
			acked = from + per - 1
			mu.Unlock()
		}
	}()
	waitUntil(t, 120*time.Second, "20 acknowledged batches", func() bool {
		select {
		case <-done:
			t.Fatal("the ingest stream stopped before the kill")
		default:
		}
		mu.Lock()
		defer mu.Unlock()
		return acked >= 20*per
	})
	p.cmd.Process.Kill()
	<-done
	mu.Lock()
	last := acked
	mu.Unlock()
	p = startDashboard(t, dir)
	got := steps(t, p.url, "k1")
	for s := 2; s <= last; s++ {
		if !got[s] {
			t.Fatalf("acknowledged step %d lost (acked up to %d, found %d points)", s, last, len(got))
		}
	}
	t.Logf("acked up to step %d; %d points stored", last, len(got))
}

// A long query string (the runs table's filters travel there) reaches the
// handler, which names the bad parameter, instead of a bare 431 from the
// HTTP layer (schemathesis sent a 4.7 KB one).
func TestDashboardLongQueryReachesTheHandler(t *testing.T) {
	p := startDashboard(t, t.TempDir())
	code, out := call(t, "GET", p.url+"/api/runs?limit="+strings.Repeat("x", 4700), "", "", "")
	if code != 400 || errorCode(t, out) == "" {
		t.Fatalf("a 4.7 KB query: %d %v, want 400 naming the parameter", code, out)
	}
	p.stop(t)
}
