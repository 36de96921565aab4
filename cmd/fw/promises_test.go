package main

import (
	"bufio"
	"errors"
	"fmt"
	"github.com/fw-serve/fw/internal/testlog"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Promises of README.md, docs/serving.md and docs/tracking.md that no other
// test checks, each against the real program.

// waitUntil polls cond every 20ms and fails the test after limit.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
	}
}

// runLogs returns the captured log lines of a run.
func runLogs(t *testing.T, url, id string) string {
	t.Helper()
	code, out := call(t, "GET", url+"/api/runs/"+id+"/logs?tail=1000", "", "", "")
	if code != 200 {
		t.Fatalf("logs: %d %v", code, out)
	}
	var text []string
	for _, l := range out["lines"].([]any) {
		text = append(text, l.(map[string]any)["line"].(string))
	}
	return strings.Join(text, "\n")
}

// docs/tracking.md: POST /api/training/{id}/stop sends SIGTERM, then SIGKILL
// after --stop-grace; the run ends as stopped. The recipe here ignores SIGTERM.
func TestPromiseTrainingStopGraceKills(t *testing.T) {
	py := trainingPython(t)
	mod := t.TempDir()
	// Ignores SIGTERM, says so, then waits; it ends by itself after 2 minutes
	// so that no failure of this test can leave it behind for long.
	script := "import signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('TERM ignored', flush=True)\ntime.sleep(120)\nsys.exit(3)\n"
	if err := os.WriteFile(filepath.Join(mod, "fwtest_ignoreterm.py"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	recipes := filepath.Join(mod, "recipes.toml")
	if err := os.WriteFile(recipes, []byte("[recipes.ignore_term]\nmodule = \"fwtest_ignoreterm\"\ndescription = \"ignores SIGTERM\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FW_PYTHON", py)
	t.Setenv("PYTHONPATH", mod)
	t.Setenv("FW_SYSTEM_INTERVAL", "0")
	const grace = 2 * time.Second
	d := startDashboard(t, t.TempDir(), "--recipes", recipes, "--stop-grace", grace.String())

	code, out := call(t, "POST", d.url+"/api/training/start", "", "application/json", `{"recipe":"ignore_term","experiment":"e"}`)
	if code != 202 || out["status"] != "running" {
		t.Fatalf("start: %d %v\n%s", code, out, d.stderr.String())
	}
	id := out["id"].(string)
	pid := int(jobInfo(t, d.url, id)["pid"].(float64))
	t.Cleanup(func() { syscall.Kill(-pid, syscall.SIGKILL) })
	// The gate: SIGTERM is ignored from here on.
	waitUntil(t, 60*time.Second, "the recipe to ignore SIGTERM", func() bool { return strings.Contains(runLogs(t, d.url, id), "TERM ignored") })

	stopped := time.Now()
	if code, out := call(t, "POST", d.url+"/api/training/"+id+"/stop", "", "", ""); code != 202 {
		t.Fatalf("stop: %d %v", code, out)
	}
	if st := jobInfo(t, d.url, id)["state"]; st != "stopping" {
		t.Fatalf("job state right after stop: %v, want stopping", st)
	}
	r := waitRun(t, d.url, id, "stopped", func(r map[string]any) bool { return r["status"] == "stopped" })
	if took := time.Since(stopped); took < grace {
		t.Fatalf("the job ended %s after the stop, before the %s grace: SIGTERM was not ignored?", took, grace)
	}
	if ec, _ := r["exit_code"].(float64); ec != 137 {
		t.Fatalf("stopped run: exit code %v, want 137 (SIGKILL): %v", r["exit_code"], r)
	}
	if j := jobInfo(t, d.url, id); j["state"] != "exited" || j["exit_code"].(float64) != 137 {
		t.Fatalf("job: %v", j)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the job's process %d is still there: %v", pid, err)
	}
	if !strings.Contains(d.stderr.String(), "SIGKILL") {
		t.Fatalf("the SIGKILL was not logged:\n%s", d.stderr.String())
	}
	d.stop(t)
}

// docs/tracking.md: DELETE /api/deployments/{id} sends SIGTERM to the
// managed fw serve, then SIGKILL after --stop-grace. The deployment inherits
// FW_DRAIN_DELAY=1h from the dashboard's environment, so after SIGTERM it
// keeps serving for an hour unless it is killed.
func TestPromiseUndeployStopGraceKills(t *testing.T) {
	models := modelsDir(t)
	t.Setenv("FW_SYSTEM_INTERVAL", "0")
	t.Setenv("FW_DRAIN_DELAY", "1h")
	dir := t.TempDir()
	const grace = 2 * time.Second
	d := startDashboard(t, dir, "--stop-grace", grace.String())
	if code, out := upload(t, d.url+"/api/models?name=mlp", filepath.Join(models, "digits_mlp.onnx")); code != 201 {
		t.Fatalf("upload: %d %v", code, out)
	}
	code, out := call(t, "POST", d.url+"/api/models/mlp/deploy", "", "application/json", fmt.Sprintf(`{"version":1,"port":%d}`, freePort(t)))
	if code != 201 {
		t.Fatalf("deploy: %d %v\n%s", code, out, d.stderr.String())
	}
	id, depURL, pid := out["id"].(string), out["url"].(string), int(out["pid"].(float64))
	t.Cleanup(func() { syscall.Kill(-pid, syscall.SIGKILL) })
	if code, out := call(t, "GET", depURL+"/health", "", "", ""); code != 200 {
		t.Fatalf("deployment not ready: %d %v", code, out)
	}

	start := time.Now()
	if code, out := call(t, "DELETE", d.url+"/api/deployments/"+id, "", "", ""); code != 200 {
		t.Fatalf("delete: %d %v", code, out)
	}
	if took := time.Since(start); took < grace {
		t.Fatalf("DELETE returned after %s, before the %s grace: the server did not drain?", took, grace)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("deployment process %d still there after DELETE: %v", pid, err)
	}
	log, err := os.ReadFile(filepath.Join(dir, "deployments", id+".log"))
	if err != nil {
		t.Fatal(err)
	}
	// It got SIGTERM (draining) and never reached its graceful end.
	if !strings.Contains(string(log), "Waiting for in-flight requests to complete.") || strings.Contains(string(log), "msg=stopped") {
		t.Fatalf("deployment log (want SIGTERM seen, no graceful stop):\n%s", log)
	}
	d.stop(t)
}

// docs/tracking.md (Reconcile): on start, a live run without an event for
// more than --stale-after is marked failed, whatever host it runs on.
func TestPromiseStaleAfter(t *testing.T) {
	dir := t.TempDir()
	d := startDashboard(t, dir)
	body := `[{"type":"run_start","run_id":"far1","writer":"w","seq":1,"experiment":"e","source":{"host":"another-host.invalid","pid":1}}]`
	if code, out := call(t, "POST", d.url+"/api/ingest", "", "", body); code != 200 || out["applied"].(float64) != 1 {
		t.Fatalf("ingest: %d %v", code, out)
	}
	lastEvent := time.Now()
	d.stop(t)

	// Within the period: left running (its host is not this one, so no pid check).
	d = startDashboard(t, dir, "--stale-after", "1h")
	if _, out := call(t, "GET", d.url+"/api/runs/far1", "", "", ""); out["status"] != "running" {
		t.Fatalf("a run within --stale-after: %v", out)
	}
	d.stop(t)

	// Past the period: failed. The wait is the period under test.
	const stale = 1 * time.Second
	if left := stale + 100*time.Millisecond - time.Since(lastEvent); left > 0 {
		time.Sleep(left)
	}
	d = startDashboard(t, dir, "--stale-after", stale.String())
	_, out := call(t, "GET", d.url+"/api/runs/far1", "", "", "")
	if out["status"] != "failed" || !strings.Contains(fmt.Sprint(out["error"]), "--stale-after") || out["ended"] == nil {
		t.Fatalf("a run past --stale-after: %v", out)
	}
	d.stop(t)
}

// docs/tracking.md (Spool import): refused lines and a torn last line are
// copied to spool/rejected/<name>; the rest is applied and the file removed.
func TestPromiseSpoolRejected(t *testing.T) {
	dir := t.TempDir()
	spool := filepath.Join(dir, "spool")
	if err := os.MkdirAll(spool, 0o755); err != nil {
		t.Fatal(err)
	}
	bogus := `{"type":"bogus","run_id":"rj1","writer":"w","seq":2}`
	notJSON := `this is not an event`
	torn := `{"type":"metrics","run_id":"rj1","writer":"w","seq":5,"step":2,"val`
	content := strings.Join([]string{
		`{"type":"run_start","run_id":"rj1","writer":"w","seq":1,"experiment":"spooled"}`,
		bogus,
		notJSON,
		`{"type":"metrics","run_id":"rj1","writer":"w","seq":3,"step":1,"values":{"loss":0.5}}`,
		`{"type":"run_end","run_id":"rj1","writer":"w","seq":4}`,
		torn,
	}, "\n")
	name := "rj1-w.jsonl"
	if err := os.WriteFile(filepath.Join(spool, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDashboard(t, dir)
	code, out := call(t, "GET", d.url+"/api/runs/rj1", "", "", "")
	if code != 200 || out["status"] != "finished" || out["metrics"].(map[string]any)["loss"].(map[string]any)["count"].(float64) != 1 {
		t.Fatalf("the good lines were not applied: %d %v\n%s", code, out, d.stderr.String())
	}
	if _, err := os.Stat(filepath.Join(spool, name)); !os.IsNotExist(err) {
		t.Fatalf("the imported spool file is still there: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(spool, "rejected", name))
	if err != nil {
		t.Fatalf("no rejected copy: %v\n%s", err, d.stderr.String())
	}
	got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	want := []string{bogus, notJSON, torn}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("spool/rejected/%s holds\n%s\nwant the refused and torn lines:\n%s", name, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, w := range []string{`"unknown event type \"bogus\""`, "code=invalid_json", "half-written last line"} {
		if !strings.Contains(d.stderr.String(), w) {
			t.Errorf("no warning %q:\n%s", w, d.stderr.String())
		}
	}
	d.stop(t)
}

// docs/serving.md (API keys): keys from --api-keys-file (and FW_API_KEYS)
// open the prediction and V2 endpoints; anything else is 401 in the error
// shape; /health*, /metrics, /model and /docs stay open. Also
// --max-body-bytes: a larger body is 413 payload_too_large.
func TestPromiseServeAPIKeysFile(t *testing.T) {
	models := modelsDir(t)
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte("k-one\n\n  k-two  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FW_API_KEYS", "k-env")
	p := startServe(t, "--model", filepath.Join(models, "digits_mlp.onnx"), "--api-keys-file", keys, "--max-body-bytes", "4096")
	row := `{"data": [[` + strings.TrimSuffix(strings.Repeat("0.5,", 64), ",") + `]]}`
	_, info := call(t, "GET", p.url+"/model", "", "", "")
	name, _ := info["name"].(string)
	v2 := `{"inputs":[{"name":"` + info["inputs"].([]any)[0].(map[string]any)["name"].(string) + `","shape":[1,64],"datatype":"FP32","data":[` + strings.TrimSuffix(strings.Repeat("0.5,", 64), ",") + `]}]}`
	for _, ep := range []struct{ path, body string }{{"/predict", row}, {"/v2/models/" + name + "/infer", v2}} {
		for _, key := range []string{"k-one", "k-two", "k-env"} {
			if code, out := call(t, "POST", p.url+ep.path, key, "application/json", ep.body); code != 200 {
				t.Errorf("%s with key %s: %d %v", ep.path, key, code, out)
			}
		}
		for _, key := range []string{"", "k-three", "k-on", "K-ONE", "k-one k-two"} {
			code, out := call(t, "POST", p.url+ep.path, key, "application/json", ep.body)
			if code != 401 {
				t.Errorf("%s with key %q: %d %v, want 401", ep.path, key, code, out)
			} else if ep.path == "/predict" && errorCode(t, out) != "unauthorized" {
				t.Errorf("%s with key %q: %v", ep.path, key, out)
			}
		}
	}
	// The key without "Bearer ".
	req, _ := http.NewRequest("POST", p.url+"/predict", strings.NewReader(row))
	req.Header.Set("Authorization", "k-one")
	if r, err := http.DefaultClient.Do(req); err != nil || r.StatusCode != 401 {
		t.Errorf("a key without Bearer: %v %v", r, err)
	} else {
		r.Body.Close()
	}
	for _, path := range []string{"/health", "/health/live", "/health/ready", "/metrics", "/model", "/docs", "/openapi.json"} {
		r, err := http.Get(p.url + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		if r.StatusCode != 200 {
			t.Errorf("%s without a key: %d, want 200 (open)", path, r.StatusCode)
		}
	}
	// --max-body-bytes 4096: one byte over is 413 in the error shape.
	big := `{"data": [[` + strings.Repeat(" ", 4096) + `]]}`
	if code, out := call(t, "POST", p.url+"/predict", "k-one", "application/json", big); code != 413 || errorCode(t, out) != "payload_too_large" {
		t.Errorf("a body over --max-body-bytes: %d %v", code, out)
	}
	p.stop(t)
}

// docs/tracking.md: a dashboard request body over 64 MiB is 413
// payload_too_large in the error shape; exactly 64 MiB is read (and here
// refused as invalid JSON).
func TestPromiseDashboardBodyLimit(t *testing.T) {
	d := startDashboard(t, t.TempDir())
	const limit = 64 << 20
	at := strings.Repeat(" ", limit)
	if code, out := call(t, "POST", d.url+"/api/ingest", "", "application/json", at); code != 400 || errorCode(t, out) != "invalid_json" {
		t.Errorf("a body of exactly 64 MiB: %d %v, want 400 invalid_json", code, out)
	}
	if code, out := call(t, "POST", d.url+"/api/ingest", "", "application/json", at+" "); code != 413 || errorCode(t, out) != "payload_too_large" {
		t.Errorf("a body of 64 MiB + 1: %d %v, want 413 payload_too_large", code, out)
	}
	// The same without a Content-Length (chunked).
	pr, pw := io.Pipe()
	go func() {
		chunk := []byte(strings.Repeat(" ", 1<<20))
		for i := 0; i < 65; i++ {
			if _, err := pw.Write(chunk); err != nil {
				break
			}
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", d.url+"/api/ingest", pr)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("chunked body over the limit: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	pr.CloseWithError(io.ErrClosedPipe)
	if resp.StatusCode != 413 || !strings.Contains(string(b), `"payload_too_large"`) {
		t.Errorf("a chunked body over 64 MiB: %d %s", resp.StatusCode, b)
	}
	if code, _ := call(t, "GET", d.url+"/health", "", "", ""); code != 200 {
		t.Fatalf("the dashboard after big bodies (the same keep-alive client): /health %d", code)
	}
	// An error answered before the body is read (404 here) leaves the rest
	// of the body on the connection: it must never be parsed as the next
	// request. Both requests are written at once on one connection.
	for _, te := range []string{"content-length", "chunked"} {
		body := strings.Repeat(" ", 256<<10)
		req := "POST /api/nope HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
		if te == "chunked" {
			req += fmt.Sprintf("Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
		} else {
			req += fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body)
		}
		req += "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
		c, err := net.Dial("tcp", strings.TrimPrefix(d.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(30 * time.Second))
		go c.Write([]byte(req))
		br := bufio.NewReader(c)
		for i, want := range []int{404, 200} {
			r, err := http.ReadResponse(br, nil)
			if err != nil {
				if i == 1 && errors.Is(err, io.EOF) {
					break // closed after the error: the rest was not parsed either
				}
				t.Fatalf("%s: response %d: %v", te, i, err)
			}
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode != want {
				t.Errorf("%s: response %d: %d %s, want %d (the unread body was parsed as a request)", te, i, r.StatusCode, b, want)
			}
		}
		c.Close()
	}
	d.stop(t)
}

// docs/serving.md: the server listens before the model is loaded, so
// /health/live answers while /health is 503. The model path is a FIFO: the
// load blocks opening it until the test opens the other end, so the model
// cannot be ready before then, whatever the machine's speed.
func TestPromiseHealthLiveWhileLoading(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "model.onnx")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	port := freePort(t)
	cmd := fwCmd("serve", "--model", fifo, "--port", strconv.Itoa(port), "--threads", "1")
	out := &testlog.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	get := func(path string) (int, string) {
		r, err := http.Get(url + path)
		if err != nil {
			return 0, err.Error()
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	waitUntil(t, 30*time.Second, "/health/live", func() bool { c, _ := get("/health/live"); return c == 200 })
	for _, path := range []string{"/health/live", "/v2/health/live"} {
		if c, b := get(path); c != 200 {
			t.Errorf("%s while loading: %d %s, want 200", path, c, b)
		}
	}
	for _, path := range []string{"/health", "/health/ready", "/v2/health/ready"} {
		if c, b := get(path); c != 503 {
			t.Errorf("%s while loading: %d %s, want 503", path, c, b)
		}
	}
	if c, b := get("/health"); !strings.Contains(b, `"not_ready"`) || !strings.Contains(b, "load") {
		t.Errorf("/health while loading: %d %s, want not_ready with the reason", c, b)
	}
	// Open the other end (it succeeds once the server has the FIFO open for
	// reading) and close it: the server reads an empty file and exits 1.
	var w *os.File
	waitUntil(t, 30*time.Second, "the server to open the model file", func() bool {
		f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err != nil && !errors.Is(err, syscall.ENXIO) {
			t.Fatal(err)
		}
		w = f
		return err == nil
	})
	w.Close()
	select {
	case err := <-done:
		done <- err
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(out.String(), "empty") {
			t.Fatalf("after the model file turned out empty: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("fw serve did not exit on an empty model file:\n%s", out.String())
	}
}

// startDashboardOn runs `fw dashboard --host host --port 0` and returns the
// URL it prints once it listens.
func startDashboardOn(t *testing.T, host string) (*proc, string) {
	t.Helper()
	cmd := fwCmd("dashboard", "--host", host, "--port", "0")
	dir := t.TempDir()
	cmd.Env = append(cmd.Env, "FW_EXPERIMENT_DIR="+dir, "FW_CHECKPOINT_DIR="+filepath.Join(dir, "ckpt"), "FW_DASHBOARD_TOKEN=", "FW_DATABASE_URL=", "FW_SYSTEM_INTERVAL=0")
	out := &testlog.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stderr: out, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		err := <-p.done
		p.done <- err
	})
	ready := regexp.MustCompile(`ready on (http://\S+)`)
	var url string
	waitUntil(t, 30*time.Second, "fw dashboard --host "+host+" to listen", func() bool {
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("fw dashboard --host %s exited: %v\n%s", host, err, out.String())
		default:
		}
		if m := ready.FindStringSubmatch(out.String()); m != nil {
			url = m[1]
		}
		return url != ""
	})
	return p, url
}

// docs/tracking.md and README.md: anything but loopback without a token is
// refused (exit 2) before listening; loopback names and addresses are not.
func TestPromiseDashboardLoopbackRule(t *testing.T) {
	// A listener we hold on 127.0.0.1:port: a dashboard that tried to listen
	// on all interfaces at that port would fail with "in use" (exit 1).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	for _, host := range []string{"::", "0:0:0:0:0:0:0:0", "", "192.0.2.1", "10.0.0.1", "example.invalid", "localhost.example", "::ffff:0.0.0.0"} {
		cmd := fwCmd("dashboard", "--host", host, "--port", port)
		cmd.Env = append(cmd.Env, "FW_EXPERIMENT_DIR="+t.TempDir(), "FW_DASHBOARD_TOKEN=")
		b, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(b), "refusing to listen on "+host+" without a token") {
			t.Errorf("--host %q without a token: %v, want exit 2 and the refusal:\n%s", host, err, b)
		}
	}
	hosts := []string{"localhost", "127.0.0.2"}
	if l6, err := net.Listen("tcp", "[::1]:0"); err == nil {
		l6.Close()
		hosts = append(hosts, "::1")
	} else {
		t.Logf("no IPv6 loopback here, ::1 not checked: %v", err)
	}
	for _, host := range hosts {
		p, url := startDashboardOn(t, host)
		if code, out := call(t, "GET", url+"/health", "", "", ""); code != 200 {
			t.Errorf("--host %s: /health %d %v", host, code, out)
		}
		p.stop(t)
	}
}
