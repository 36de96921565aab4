package ray_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fw-serve/fw/dashboard/api"
	"github.com/fw-serve/fw/dashboard/jobs"
	"github.com/fw-serve/fw/dashboard/jobs/ray"
	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/testleak"
	"github.com/fw-serve/fw/internal/testlog"
	"github.com/fw-serve/fw/internal/testray"
	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { testleak.Main(m) }

// projectPython is the project venv's Python (torch, scikit-learn, fw): the
// jobs' interpreter. Skips without it (fails with FW_REQUIRE_RAY=1).
func projectPython(t *testing.T) string {
	t.Helper()
	py := os.Getenv("FW_PYTHON")
	if py == "" && os.Getenv("FW_VENV") != "" {
		py = filepath.Join(os.Getenv("FW_VENV"), "bin", "python")
	}
	if py == "" {
		py = filepath.Join("..", "..", "..", ".venv", "bin", "python")
	}
	py, _ = filepath.Abs(py)
	if err := exec.Command(py, "-c", "import torch, sklearn, fw.recipes").Run(); err != nil {
		msg := "the jobs need the fw Python package with torch and scikit-learn (FW_PYTHON, FW_VENV or .venv): " + err.Error()
		if os.Getenv("FW_REQUIRE_RAY") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return py
}

// recipesTOML holds the test's own recipes next to the built-in ones: one
// whose module does not exist (the entrypoint fails), one that asks for a
// GPU (the head has none: Ray keeps it PENDING).
const recipesTOML = `
[recipes.missing_module]
module = "fwray_no_such_module.train"
description = "fails at once: python -m of a module that does not exist"

[recipes.needs_gpu]
module = "fw.recipes.digits_mlp"
description = "asks Ray for a GPU through its num_gpus param"
[[recipes.needs_gpu.params]]
name = "num_gpus"
type = "float"
default = 1.0
min = 0.0
description = "GPUs the job reserves on Ray"
`

// env is one manager over a real SQLite store, the dashboard's real API
// (for fw.track's ingest) on loopback, and a Ray executor.
type env struct {
	st      store.Store
	url     string
	recipes []jobs.Recipe
	dir     string
	stopAPI func()
	logs    *testlog.Buffer
}

func newEnv(t *testing.T, py string) *env {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, store.Config{Dir: filepath.Join(dir, "experiments")})
	if err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := api.New(ctx, st, api.Config{}, log)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &fasthttp.Server{Handler: srv.Handler, StreamRequestBody: true}
	go hs.Serve(ln)
	file := filepath.Join(dir, "recipes.toml")
	if err := os.WriteFile(file, []byte(recipesTOML), 0o644); err != nil {
		t.Fatal(err)
	}
	recipes, err := jobs.LoadRecipes(ctx, py, file)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{st: st, url: "http://" + ln.Addr().String(), recipes: recipes, dir: dir, logs: logs}
	var once sync.Once
	e.stopAPI = func() { once.Do(func() { hs.Shutdown(); st.Close() }) }
	t.Cleanup(func() {
		e.stopAPI()
		if t.Failed() {
			t.Logf("dashboard log:\n%s", logs.String())
		}
	})
	return e
}

func (e *env) manager(t *testing.T, head *testray.Head, py string, lostAfter time.Duration) *jobs.Manager {
	t.Helper()
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ex, err := ray.New(ray.Config{Address: head.URL, Python: py, StopGrace: 10 * time.Second,
		PollInterval: 200 * time.Millisecond, LostAfter: lostAfter, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	return jobs.New(e.st, e.recipes, jobs.Config{TrackingURI: e.url, ExperimentDir: filepath.Join(e.dir, "experiments"),
		CheckpointDir: filepath.Join(e.dir, "ckpt"), Executor: ex}, log)
}

// waitFor polls ok until it holds (or fails the test after timeout).
func waitFor(t *testing.T, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *env) run(t *testing.T, id string) store.Run {
	t.Helper()
	r, err := e.st.GetRun(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// alive is the run, which must not have ended.
func (e *env) alive(t *testing.T, id string) store.Run {
	t.Helper()
	r := e.run(t, id)
	if r.Status.Terminal() {
		t.Fatalf("run %s ended %s: %s\nlogs:\n%s", id, r.Status, r.Error, strings.Join(e.logLines(t, id), "\n"))
	}
	return r
}

func (e *env) logLines(t *testing.T, id string) []string {
	t.Helper()
	ls, err := e.st.Logs(context.Background(), id, store.LogQuery{Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Line
	}
	return out
}

// rayJob reads a job from the head directly (GET /api/jobs/{id}).
func rayJob(t *testing.T, head *testray.Head, id string) ray.JobInfo {
	t.Helper()
	c, err := ray.NewClient(head.URL, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := c.Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// rayLogLines is the job's log as Ray's GET /api/jobs/{id}/logs gives it.
func rayLogLines(t *testing.T, head *testray.Head, id string) []string {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer c.CloseIdleConnections()
	resp, err := c.Get(head.URL + "/api/jobs/" + id + "/logs")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Logs string `json:"logs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(out.Logs, "\n"), "\n")
}

func count(lines []string, sub string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

// TestRayJobs runs jobs on a real Ray head through the Manager: a training
// run with live metrics through fw.track, stopped (SIGTERM, final
// checkpoint, run stopped, Ray's job STOPPED); a failing entrypoint (run
// failed, Ray's reason in its error, the Python error in its logs); a job
// Ray keeps PENDING for want of a GPU (queued, then stopped); and a
// dashboard that shuts down while a job runs: the job is left running, a
// new Manager re-attaches to it by its submission ID, and the run ends
// finished with every line of Ray's log exactly once.
func TestRayJobs(t *testing.T) {
	py := projectPython(t)
	head := testray.Start(t, testray.Options{CPUs: 2, Env: []string{"FW_SYSTEM_INTERVAL=0"}})
	e := newEnv(t, py)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	m := e.manager(t, head, py, 20*time.Second)

	// 1. Train, watch metrics arrive, stop.
	info, err := m.Start(ctx, jobs.StartRequest{Recipe: "digits_mlp", Experiment: "ray",
		Params: map[string]any{"epochs": 50.0, "batch_size": 256.0, "hidden": 16.0, "step_delay": 0.05}})
	if err != nil {
		t.Fatal(err)
	}
	if info.Executor != "ray" || !strings.HasPrefix(info.ExecutorID, "fw-"+info.RunID+"-") || info.PID != 0 {
		t.Fatalf("job info: %+v", info)
	}
	a := info.RunID
	waitFor(t, 3*time.Minute, "metrics from fw.track in the Ray job", func() bool {
		r := e.alive(t, a)
		_, ok := r.Metrics["train/loss"]
		return r.Status == store.StatusRunning && ok && r.Progress.Step > 5
	})
	if j, _ := m.Get(a); j.State != jobs.StateRunning {
		t.Fatalf("job state %s, want running", j.State)
	}
	if st := rayJob(t, head, info.ExecutorID).Status; st != ray.StatusRunning {
		t.Fatalf("Ray's status %s, want RUNNING", st)
	}
	r := e.run(t, a)
	if r.Tags[jobs.TagExecutor] != "ray" || r.Tags[jobs.TagExecutorJob] != info.ExecutorID || r.Tags[jobs.TagExecutorAddress] != head.URL || r.Source.PID != 0 {
		t.Fatalf("run tags and source: %v %+v", r.Tags, r.Source)
	}
	if _, err := m.Stop(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := m.Wait(ctx, a); err != nil {
		t.Fatal(err)
	}
	if r := e.run(t, a); r.Status != store.StatusStopped {
		t.Fatalf("stopped run: %s %q", r.Status, r.Error)
	}
	if st := rayJob(t, head, info.ExecutorID).Status; st != ray.StatusStopped {
		t.Fatalf("Ray's status %s after the stop, want STOPPED", st)
	}
	lines := e.logLines(t, a)
	if count(lines, "digits_mlp: run "+a) != 1 || count(lines, "final checkpoint") != 1 {
		t.Fatalf("logs (want the recipe's first line and its final checkpoint once each):\n%s", strings.Join(lines, "\n"))
	}

	// 2. A failing entrypoint.
	info, err = m.Start(ctx, jobs.StartRequest{Recipe: "missing_module", Experiment: "ray"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Wait(ctx, info.RunID); err != nil {
		t.Fatal(err)
	}
	r = e.run(t, info.RunID)
	lines = e.logLines(t, info.RunID)
	if r.Status != store.StatusFailed || !strings.Contains(r.Error, "the Ray job "+info.ExecutorID+" failed") ||
		r.ExitCode == nil || *r.ExitCode != 1 || count(lines, "No module named 'fwray_no_such_module'") != 1 {
		t.Fatalf("failing entrypoint: %s %v %q\nlogs:\n%s", r.Status, r.ExitCode, r.Error, strings.Join(lines, "\n"))
	}

	// 3. A GPU the head does not have: Ray keeps the job PENDING, fw queued;
	// Ray cannot stop it before it gets one, fw gives it up as stopped.
	info, err = m.Start(ctx, jobs.StartRequest{Recipe: "needs_gpu", Experiment: "ray"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if j, _ := m.Get(info.RunID); j.State != jobs.StateQueued || e.run(t, info.RunID).Status != store.StatusQueued ||
		rayJob(t, head, info.ExecutorID).Status != ray.StatusPending {
		t.Fatalf("job waiting for a GPU: %+v, run %s", j, e.run(t, info.RunID).Status)
	}
	if _, err := m.Stop(ctx, info.RunID); err != nil {
		t.Fatal(err)
	}
	if err := m.Wait(ctx, info.RunID); err != nil {
		t.Fatal(err)
	}
	if r := e.run(t, info.RunID); r.Status != store.StatusStopped || r.Started != nil || !strings.Contains(r.Error, "PENDING") {
		t.Fatalf("a pending job stopped: %s, started %v: %q", r.Status, r.Started, r.Error)
	}

	// 4. The dashboard goes; the job stays; a new Manager re-attaches.
	info, err = m.Start(ctx, jobs.StartRequest{Recipe: "digits_mlp", Experiment: "ray",
		Params: map[string]any{"epochs": 3.0, "batch_size": 256.0, "hidden": 16.0, "step_delay": 0.4}})
	if err != nil {
		t.Fatal(err)
	}
	b := info.RunID
	waitFor(t, 3*time.Minute, "the second training job to log", func() bool {
		return e.alive(t, b).Status == store.StatusRunning && count(e.logLines(t, b), "digits_mlp: run") == 1
	})
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	m.Shutdown(sctx)
	scancel()
	if err := m.Wait(ctx, b); err != nil {
		t.Fatal(err)
	}
	if r := e.run(t, b); r.Status != store.StatusRunning || rayJob(t, head, info.ExecutorID).Status != ray.StatusRunning {
		t.Fatalf("after the shutdown the run is %s and Ray's job %s; want both running", r.Status, rayJob(t, head, info.ExecutorID).Status)
	}
	m2 := e.manager(t, head, py, 20*time.Second)
	adopted, err := m2.AdoptAll(ctx, nil, nil)
	if err != nil || len(adopted) != 1 || adopted[0] != b {
		t.Fatalf("AdoptAll: %v %v", adopted, err)
	}
	if _, err := m2.Adopt(ctx, b); err == nil {
		t.Fatal("a second Adopt of a job being watched was accepted")
	}
	if err := m2.Wait(ctx, b); err != nil {
		t.Fatal(err)
	}
	r = e.run(t, b)
	lines = e.logLines(t, b)
	want := rayLogLines(t, head, info.ExecutorID)
	if r.Status != store.StatusFinished || strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("re-attached run: %s %q\nfw's logs (%d lines):\n%s\nRay's log (%d lines):\n%s", r.Status, r.Error,
			len(lines), strings.Join(lines, "\n"), len(want), strings.Join(want, "\n"))
	}
	m2.Shutdown(ctx)
}

// TestRayHeadGoesAway: the head is killed while a job runs. The Manager
// gives the job up after LostAfter, fails its run with a message that says
// so, frees it (Wait returns), and leaves no goroutine behind.
func TestRayHeadGoesAway(t *testing.T) {
	py := projectPython(t)
	head := testray.Start(t, testray.Options{CPUs: 2, Env: []string{"FW_SYSTEM_INTERVAL=0"}})
	e := newEnv(t, py)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	m := e.manager(t, head, py, 3*time.Second)
	info, err := m.Start(ctx, jobs.StartRequest{Recipe: "digits_mlp", Experiment: "ray",
		Params: map[string]any{"epochs": 50.0, "batch_size": 256.0, "hidden": 16.0, "step_delay": 0.1}})
	if err != nil {
		t.Fatal(err)
	}
	selfEnded := false // Ray ended the head before the test killed it
	waitFor(t, 3*time.Minute, "the job to train", func() bool {
		r := e.run(t, info.RunID)
		if r.Status.Terminal() {
			// Ray may end the node on its own (with --block, when one of
			// its processes dies): the head went away all the same, which
			// is what this test is about; say why it did.
			select {
			case <-head.Exited():
			case <-time.After(10 * time.Second):
			}
			if head.ExitedByItself() {
				t.Logf("the Ray head ended before the test killed it:\n%s", head.Diagnose())
				selfEnded = true
				return true
			}
		}
		r = e.alive(t, info.RunID)
		_, ok := r.Metrics["train/loss"]
		return r.Status == store.StatusRunning && ok
	})
	head.Kill()
	killed := time.Now()
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if err := m.Wait(wctx, info.RunID); err != nil {
		t.Fatalf("the job was not given up after its head went away: %v", err)
	}
	r := e.run(t, info.RunID)
	switch {
	case selfEnded && r.Status == store.StatusFailed:
		// Ray may have reported the job failed before its head went.
		t.Logf("the run of a head Ray ended failed: %s", r.Error)
	case r.Status != store.StatusFailed || !strings.Contains(r.Error, "lost contact with the Ray head at "+head.URL):
		t.Fatalf("run after the head went away: %s %q", r.Status, r.Error)
	default:
		t.Logf("given up %.1fs after the head was killed: %s", time.Since(killed).Seconds(), r.Error)
	}
	if j, _ := m.Get(info.RunID); j.State != jobs.StateExited {
		t.Fatalf("job state %s, want exited", j.State)
	}
	m.Shutdown(ctx)
	e.stopAPI()
	goleak.VerifyNone(t, testleak.Options()...)
}
