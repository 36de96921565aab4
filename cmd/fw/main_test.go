package main

import (
	"bytes"
	"fmt"
	"github.com/fw-serve/fw/internal/testlog"
	"github.com/fw-serve/fw/internal/testmodels"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestMain re-runs the test binary as the real fw command when asked, so the
// tests below check exit codes and signals of the real program.
func TestMain(m *testing.M) {
	if os.Getenv("FW_TEST_RUN_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func modelsDir(t testing.TB) string { return testmodels.Dir(t) }

// fwCmd prepares the real program with args.
func fwCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "FW_TEST_RUN_MAIN=1")
	return cmd
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

type proc struct {
	cmd    *exec.Cmd
	url    string
	stderr *testlog.Buffer
	done   chan error
}

// startServe runs `fw serve` and waits for /health to answer 200.
func startServe(t *testing.T, args ...string) *proc {
	t.Helper()
	port := freePort(t)
	cmd := fwCmd(append([]string{"serve", "--port", strconv.Itoa(port), "--threads", "1"}, args...)...)
	stderr := &testlog.Buffer{}
	cmd.Stderr, cmd.Stdout = stderr, io.Discard
	return startProc(t, "fw serve", cmd, port, stderr, 60*time.Second)
}

// startProc starts cmd (a server listening on port, its output in out) in
// its own process group and waits up to ready for its /health. When the test
// ends, passed or failed, it kills the group and then every process that
// inherited the mark startProc adds to cmd's environment: what the server
// started outside its group (a dashboard's training jobs, its fw serve
// deployments, which run in their own sessions) dies with it.
func startProc(t *testing.T, name string, cmd *exec.Cmd, port int, out *testlog.Buffer, ready time.Duration) *proc {
	t.Helper()
	mark := fmt.Sprintf("FW_TEST_PROC=%d.%d", os.Getpid(), procMarks.Add(1))
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, mark)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, url: fmt.Sprintf("http://127.0.0.1:%d", port), stderr: out, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err := <-p.done
		p.done <- err // for a stop() that runs after
		killMarked(t, mark)
	})
	deadline := time.Now().Add(ready)
	for time.Now().Before(deadline) {
		if r, err := http.Get(p.url + "/health"); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return p
			}
		}
		select {
		case err := <-p.done:
			t.Fatalf("%s exited early: %v\n%s", name, err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("%s never became ready:\n%s", name, out.String())
	return nil
}

func (p *proc) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		if err == nil {
			return 0
		}
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		t.Fatal(err)
	case <-time.After(60 * time.Second):
		t.Fatalf("fw serve did not exit:\n%s", p.stderr.String())
	}
	return -1
}

func TestServePortInUse(t *testing.T) {
	dir := modelsDir(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	var stderr bytes.Buffer
	cmd := fwCmd("serve", "--model", filepath.Join(dir, "digits_mlp.onnx"), "--port", strconv.Itoa(port))
	cmd.Stderr = &stderr
	err = cmd.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit %v, want status 1", err)
	}
	msg := strings.TrimSpace(stderr.String())
	if strings.Count(msg, "\n") != 0 || !strings.Contains(msg, fmt.Sprintf("port %d is already in use", port)) {
		t.Fatalf("want one line naming the port, got:\n%s", msg)
	}
}

// expectExit runs fw with args (and env added) to its end and checks its
// exit code and that its output holds wantMsg.
func expectExit(t *testing.T, wantCode int, wantMsg string, env []string, args ...string) {
	t.Helper()
	var out bytes.Buffer
	cmd := fwCmd(args...)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr, cmd.Stdout = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != wantCode || !strings.Contains(out.String(), wantMsg) {
		t.Errorf("fw %v: exit %d, want %d; output lacks %q:\n%s", args, code, wantCode, wantMsg, out.String())
	}
}

func TestServeUsageErrors(t *testing.T) {
	f := func(wantCode int, wantMsg string, env []string, args ...string) {
		t.Helper()
		expectExit(t, wantCode, wantMsg, env, args...)
	}
	f(2, "--model is required", nil, "serve")
	f(0, "-max-batch-size", nil, "serve", "--help")
	f(0, "[FW_PORT]", nil, "serve", "--help")
	f(2, "FW_PORT=\"abc\"", []string{"FW_PORT=abc"}, "serve", "--model", "x.onnx")
	f(1, "cannot open the model file", nil, "serve", "--model", "/nonexistent/model.onnx", "--port", "0")
	f(2, "unknown command", nil, "bogus")
	f(0, "serve", nil, "--help")
	f(2, "--grpc-port within 0..65535", nil, "serve", "--model", "x.onnx", "--grpc-port", "70000")
	// A directory (KServe's /mnt/models) must hold exactly one model file.
	empty, two := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(empty, "README"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(two, "a.onnx"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(two, "b.pt"), []byte("x"), 0o644)
	f(2, "with no model file in it", nil, "serve", "--model", empty)
	f(2, "with 2 model files (a.onnx, b.pt); pass the one to serve", nil, "serve", "--model", two)
}

// TestServeModelDirectoryAndGRPC: fw serve as KServe runs it: --model names
// the directory the storage initializer filled, and the same model answers
// over gRPC on --grpc-port.
func TestServeModelDirectoryAndGRPC(t *testing.T) {
	dir := t.TempDir()
	copyFile(t, filepath.Join(modelsDir(t), "digits_mlp.onnx"), filepath.Join(dir, "digits_mlp.onnx"))
	os.WriteFile(filepath.Join(dir, ".digits_mlp.onnx.sha256"), []byte("x"), 0o644) // hidden files are not candidates
	gport := freePort(t)
	p := startServe(t, "--model", dir, "--grpc-port", strconv.Itoa(gport))
	grpcInfer(t, "127.0.0.1:"+strconv.Itoa(gport), "digits_mlp")
	if code, out := call(t, "GET", p.url+"/v2/models/digits_mlp/stats", "", "", ""); code != 200 ||
		out["model_stats"].([]any)[0].(map[string]any)["execution_count"].(float64) < 1 {
		t.Fatalf("stats after a gRPC request: %d %v", code, out)
	}
	resp, err := http.Get(p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `fw_grpc_requests_total{code="OK",method="ModelInfer"} 1`) {
		t.Fatalf("fw_grpc_requests_total missing from /metrics")
	}
}

func TestVerifyCommand(t *testing.T) {
	dir := modelsDir(t)
	var out bytes.Buffer
	cmd := fwCmd("verify", filepath.Join(dir, "digits_mlp.onnx"), "--time", "0.05")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || !strings.Contains(out.String(), "PASS") || !strings.Contains(out.String(), "us per call") {
		t.Fatalf("verify good file: %v\n%s", err, out.String())
	}
	out.Reset()
	cmd = fwCmd("verify", filepath.Join(dir, "bad", "state_dict.pt"))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err == nil || !strings.Contains(out.String(), "never unpickles") {
		t.Fatalf("verify pickle: %v\n%s", err, out.String())
	}
	out.Reset()
	cmd = fwCmd("verify", filepath.Join(dir, "digits_cnn.onnx"), "--json", "--time", "0")
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil || !strings.Contains(out.String(), `"passed":true`) {
		t.Fatalf("verify --json: %v\n%s", err, out.String())
	}
}

// load runs clients against /predict until stop is closed; it counts replies
// by status and transport errors. Each request uses a fresh connection, so a
// refused connection after the listener closes is distinguishable from a
// failed request.
type load struct {
	ok, refused atomic.Int64
	mu          sync.Mutex
	failures    []string
	wg          sync.WaitGroup
	stop        chan struct{}
}

func startLoad(url string, clients int) *load {
	l := &load{stop: make(chan struct{})}
	body := []byte(`{"data": [[` + strings.TrimSuffix(strings.Repeat("0.5,", 64), ",") + `]]}`)
	tr := &http.Transport{DisableKeepAlives: true}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	for i := 0; i < clients; i++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				resp, err := client.Post(url+"/predict", "application/json", bytes.NewReader(body))
				if err != nil {
					if errorsIsRefused(err) {
						l.refused.Add(1)
						time.Sleep(5 * time.Millisecond)
						continue
					}
					l.fail(err.Error())
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					l.fail(fmt.Sprintf("%d %s", resp.StatusCode, b))
					continue
				}
				l.ok.Add(1)
			}
		}()
	}
	return l
}

// errorsIsRefused reports a connection the server refused (nothing listens).
func errorsIsRefused(err error) bool {
	return strings.Contains(err.Error(), "connection refused")
}

func (l *load) fail(s string) {
	l.mu.Lock()
	l.failures = append(l.failures, s)
	l.mu.Unlock()
}

func (l *load) finish() []string {
	close(l.stop)
	l.wg.Wait()
	return l.failures
}

// SIGTERM under load: /health turns 503, in-flight and drain-period requests
// succeed, the listener closes, and the process exits 0. No request fails.
func TestServeGracefulShutdownUnderLoad(t *testing.T) {
	dir := modelsDir(t)
	p := startServe(t, "--model", filepath.Join(dir, "digits_mlp.onnx"), "--drain-delay", "1s")
	var hout bytes.Buffer
	hc := fwCmd("health", p.url)
	hc.Stdout = &hout
	if err := hc.Run(); err != nil || !strings.Contains(hout.String(), `"status":"ok"`) {
		t.Fatalf("fw health on a ready server: %v %s", err, hout.String())
	}
	l := startLoad(p.url, 8)
	waitUntil(t, 60*time.Second, "200 requests served", func() bool { return l.ok.Load() >= 200 })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Like a load balancer: keep sending until /health answers 503, then send
	// nothing new. Everything sent until then, and everything in flight, must
	// succeed; the listener closes only after the drain delay.
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, err := http.Get(p.url + "/health")
		if err != nil {
			t.Fatalf("/health unreachable during the drain delay: %v", err)
		}
		r.Body.Close()
		if r.StatusCode == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/health still %d after SIGTERM", r.StatusCode)
		}
		time.Sleep(5 * time.Millisecond)
	}
	sentBeforeDrain := l.ok.Load()
	failures := l.finish()
	code := p.exitCode(t)
	if code != 0 {
		t.Fatalf("exit code %d:\n%s", code, p.stderr.String())
	}
	if len(failures) > 0 {
		t.Fatalf("%d requests failed during shutdown, first: %s", len(failures), failures[0])
	}
	if err := fwCmd("health", p.url).Run(); err == nil {
		t.Error("fw health on a stopped server should fail")
	}
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(p.url, "http://"), time.Second); err == nil {
		c.Close()
		t.Fatal("the listener is still open after exit")
	}
	t.Logf("%d requests succeeded (%d before /health turned 503), none failed", l.ok.Load(), sentBeforeDrain)
}

// --watch: replacing the file swaps the model without a failed request; a
// broken replacement is refused and the old model keeps serving.
func TestServeWatchReload(t *testing.T) {
	dir := modelsDir(t)
	if _, err := os.Stat(filepath.Join("..", "..", "build", "lib", "libfwtorch.so")); err != nil && os.Getenv("FW_TORCH_SHIM") == "" {
		if os.Getenv("FW_REQUIRE_MODELS") == "1" {
			t.Fatal("libtorch shim missing")
		}
		t.Skip("libtorch shim missing")
	}
	tmp := t.TempDir()
	live := filepath.Join(tmp, "model.bin")
	copyFile(t, filepath.Join(dir, "digits_mlp.onnx"), live)
	p := startServe(t, "--model", live, "--watch", "--watch-interval", "50ms")
	l := startLoad(p.url, 4)
	format := func() string {
		r, err := http.Get(p.url + "/model")
		if err != nil {
			return err.Error()
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		if i := bytes.Index(b, []byte(`"format":"`)); i >= 0 {
			rest := b[i+10:]
			return string(rest[:bytes.IndexByte(rest, '"')])
		}
		return string(b)
	}
	replace := func(src string, data []byte) {
		next := filepath.Join(tmp, "next.bin")
		if src != "" {
			copyFile(t, src, next)
		} else if err := os.WriteFile(next, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(next, live); err != nil {
			t.Fatal(err)
		}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s:\n%s", what, p.stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if f := format(); f != "onnx" {
		t.Fatalf("format %s", f)
	}
	replace(filepath.Join(dir, "digits_mlp.ts.pt"), nil)
	waitFor("the TorchScript model to be swapped in", func() bool { return format() == "torchscript" })
	before := l.ok.Load()
	waitFor("requests on the new model", func() bool { return l.ok.Load() > before+50 })
	replace("", []byte("this is not a model"))
	waitFor("the broken file to be refused", func() bool {
		r, err := http.Get(p.url + "/metrics")
		if err != nil {
			return false
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return bytes.Contains(b, []byte(`fw_model_reloads_total{result="failed"} 1`))
	})
	before = l.ok.Load()
	waitFor("requests after the refused reload", func() bool { return l.ok.Load() > before+50 })
	if f := format(); f != "torchscript" {
		t.Fatalf("after a broken file the old model should serve, format %s", f)
	}
	if failures := l.finish(); len(failures) > 0 {
		t.Fatalf("%d requests failed across reloads, first: %s", len(failures), failures[0])
	}
	if !strings.Contains(p.stderr.String(), "reload refused") {
		t.Fatalf("the refused reload was not logged:\n%s", p.stderr.String())
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fw export runs python -m fw.export on a checkpoint and the result verifies.
func TestExportCommand(t *testing.T) {
	dir := modelsDir(t)
	abs := trainingPython(t)
	out := filepath.Join(t.TempDir(), "mlp.onnx")
	var stdout, stderr bytes.Buffer
	cmd := fwCmd("export", filepath.Join(dir, "digits_mlp.ckpt.pt"), "--format", "onnx", "--out", out)
	cmd.Env = append(cmd.Env, "FW_PYTHON="+abs)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || !strings.Contains(stdout.String(), `"max_abs_error"`) {
		t.Fatalf("fw export: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	v := fwCmd("verify", out, "--time", "0")
	if b, err := v.CombinedOutput(); err != nil || !strings.Contains(string(b), "PASS") {
		t.Fatalf("verify the export: %v\n%s", err, b)
	}
	bad := fwCmd("export", filepath.Join(dir, "digits_mlp.ckpt.pt"), "--format", "tflite", "--out", out)
	bad.Env = append(bad.Env, "FW_PYTHON="+abs)
	if err := bad.Run(); err == nil {
		t.Fatal("fw export --format tflite should fail")
	}
}

// A long query string reaches fw serve's handler, which names the bad
// parameter with 400, instead of a bare 431 from the HTTP layer
// (schemathesis sent one to /predict/image).
func TestServeLongQueryReachesTheHandler(t *testing.T) {
	p := startServe(t, "--model", filepath.Join(modelsDir(t), "digits_mlp.onnx"))
	code, out := call(t, "POST", p.url+"/predict/image?top_k="+strings.Repeat("x", 4700), "", "image/png", "x")
	if code != 400 || errorCode(t, out) == "" {
		t.Fatalf("a 4.7 KB query: %d %v, want 400 naming the parameter", code, out)
	}
}
