package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fw-serve/fw/internal/testlog"
	"github.com/fw-serve/fw/internal/testray"
)

// startDashboardAt is startDashboard on a given port (a restart keeps the
// address its jobs send their events to).
func startDashboardAt(t *testing.T, dir string, port int, args ...string) *proc {
	t.Helper()
	cmd := fwCmd(append([]string{"dashboard", "--port", strconv.Itoa(port), "--spool-interval", "200ms"}, args...)...)
	cmd.Env = append(cmd.Env, "FW_EXPERIMENT_DIR="+dir, "FW_CHECKPOINT_DIR="+filepath.Join(dir, "ckpt"), "FW_DASHBOARD_TOKEN=", "FW_DATABASE_URL=")
	out := &testlog.Buffer{}
	cmd.Stderr, cmd.Stdout = out, out
	return startProc(t, "fw dashboard", cmd, port, out, 60*time.Second)
}

func logText(t *testing.T, url, id string) string {
	t.Helper()
	code, out := call(t, "GET", url+"/api/runs/"+id+"/logs?tail=10000", "", "", "")
	if code != 200 {
		t.Fatalf("logs: %d %v", code, out)
	}
	var text []string
	for _, l := range out["lines"].([]any) {
		text = append(text, l.(map[string]any)["line"].(string))
	}
	return strings.Join(text, "\n")
}

// TestRayDashboard: `fw dashboard --executor ray` against a real Ray head,
// through fw's HTTP API: a training job starts on Ray (its job info says
// so), its metrics reach fw through fw.track, the dashboard is killed
// (SIGKILL) and started again, re-attaches to the job by its submission ID,
// stops it (run stopped, with its final checkpoint, each log line once); a
// recipe whose entrypoint fails ends failed with the Python error in its
// logs; SIGTERM leaves the dashboard at once.
func TestRayDashboard(t *testing.T) {
	py := trainingPython(t)
	head := testray.Start(t, testray.Options{CPUs: 2, Env: []string{"FW_SYSTEM_INTERVAL=0"}})
	t.Setenv("FW_PYTHON", py)
	dir := t.TempDir()
	recipes := filepath.Join(dir, "recipes.toml")
	if err := os.WriteFile(recipes, []byte("[recipes.broken]\nmodule = \"fwray_no_such_module.train\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	args := []string{"--executor", "ray", "--ray-address", head.URL, "--stop-grace", "10s", "--recipes", recipes}
	d := startDashboardAt(t, dir, port, args...)

	code, out := call(t, "POST", d.url+"/api/training/start", "", "application/json",
		`{"recipe":"digits_mlp","experiment":"ray","params":{"epochs":50,"batch_size":256,"hidden":16,"step_delay":0.05}}`)
	job, _ := out["job"].(map[string]any)
	if code != 202 || out["status"] != "queued" || job["executor"] != "ray" || job["executor_id"] == nil || job["pid"] != nil {
		t.Fatalf("start on Ray: %d %v", code, out)
	}
	a := out["id"].(string)
	waitRun(t, d.url, a, "training on Ray with metrics from fw.track", func(r map[string]any) bool {
		if r["status"] == "failed" || r["status"] == "stopped" {
			t.Fatalf("run ended: %v\n%s", r, d.stderr.String())
		}
		m, _ := r["metrics"].(map[string]any)
		return r["status"] == "running" && m["train/loss"] != nil
	})
	if j := jobInfo(t, d.url, a); j["state"] != "running" {
		t.Fatalf("job: %v", j)
	}

	// The dashboard dies; the Ray job does not. A new one re-attaches.
	if err := syscall.Kill(d.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d.exitCode(t)
	d = startDashboardAt(t, dir, port, args...)
	// GET /api/training lists the jobs of this dashboard process: the job
	// is there only if it was re-attached.
	if j := jobInfo(t, d.url, a); j["state"] != "running" || j["executor_id"] != job["executor_id"] {
		t.Fatalf("re-attached job: %v", j)
	}
	steps := func() float64 {
		_, r := call(t, "GET", d.url+"/api/runs/"+a, "", "", "")
		return r["progress"].(map[string]any)["step"].(float64)
	}
	s0 := steps()
	waitRun(t, d.url, a, "training on after the restart", func(r map[string]any) bool {
		return r["progress"].(map[string]any)["step"].(float64) > s0+5
	})
	if code, out = call(t, "POST", d.url+"/api/training/"+a+"/stop", "", "", ""); code != 202 {
		t.Fatalf("stop: %d %v", code, out)
	}
	r := waitRun(t, d.url, a, "stopped", func(r map[string]any) bool { return r["status"] == "stopped" })
	if len(checkpoints(t, dir, a)) == 0 {
		t.Fatalf("no checkpoint: %v", r)
	}
	for deadline := time.Now().Add(60 * time.Second); jobInfo(t, d.url, a)["state"] != "exited"; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the job never exited")
		}
	}
	if txt := logText(t, d.url, a); strings.Count(txt, "digits_mlp: run "+a) != 1 || strings.Count(txt, "final checkpoint") != 1 || strings.Count(txt, "epoch 1/50") != 1 {
		t.Fatalf("logs (want the first line, epoch 1 and the final checkpoint once each):\n%s", txt)
	}

	code, out = call(t, "POST", d.url+"/api/training/start", "", "application/json", `{"recipe":"broken","experiment":"ray"}`)
	if code != 202 {
		t.Fatalf("start broken: %d %v", code, out)
	}
	b := out["id"].(string)
	r = waitRun(t, d.url, b, "failed", func(r map[string]any) bool { return r["status"] == "failed" })
	if !strings.Contains(r["error"].(string), "failed") || !strings.Contains(logText(t, d.url, b), "No module named 'fwray_no_such_module'") {
		t.Fatalf("failing entrypoint: %v\nlogs:\n%s", r, logText(t, d.url, b))
	}
	d.stop(t)
}

// TestRayFlags: the executor flags are checked before anything starts.
func TestRayFlags(t *testing.T) {
	f := func(want string, args ...string) {
		t.Helper()
		cmd := fwCmd(append([]string{"dashboard", "--port", "0"}, args...)...)
		cmd.Env = append(cmd.Env, "FW_EXPERIMENT_DIR="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), want) {
			t.Errorf("fw dashboard %v: exit %d (%v), want 2 with %q:\n%s", args, code, err, want, out)
		}
	}
	f("--executor must be local or ray", "--executor", "k8s")
	f("--executor ray needs --ray-address", "--executor", "ray")
	f("must be an http:// or https:// URL", "--executor", "ray", "--ray-address", "ray://head:10001")
	f("must not carry a user", "--executor", "ray", "--ray-address", "http://u:p@head:8265")
	f("--tracking-uri must be", "--tracking-uri", "127.0.0.1:8080")
	f("--ray-lost-after must be at least 1s", "--executor", "ray", "--ray-address", "http://head:8265", "--ray-lost-after", "0s")
}
