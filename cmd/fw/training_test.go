package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// trainingPython finds the project venv's Python with torch and scikit-learn,
// or skips (fails with FW_REQUIRE_MODELS=1).
func trainingPython(t *testing.T) string {
	t.Helper()
	py := os.Getenv("FW_PYTHON")
	if py == "" && os.Getenv("FW_VENV") != "" {
		py = filepath.Join(os.Getenv("FW_VENV"), "bin", "python")
	}
	if py == "" {
		py = filepath.Join("..", "..", ".venv", "bin", "python")
	}
	py, _ = filepath.Abs(py)
	if err := exec.Command(py, "-c", "import torch, sklearn, fw.recipes").Run(); err != nil {
		msg := "the fw Python package with torch and scikit-learn is needed (FW_PYTHON, FW_VENV or .venv): " + err.Error()
		if os.Getenv("FW_REQUIRE_MODELS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return py
}

// waitRun polls GET /api/runs/{id} until ok accepts it.
func waitRun(t *testing.T, url, id string, what string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last map[string]any
	for time.Now().Before(deadline) {
		code, out := call(t, "GET", url+"/api/runs/"+id, "", "", "")
		if code == 200 {
			last = out
			if ok(out) {
				return out
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("run %s: never %s; last %v", id, what, last)
	return nil
}

func jobInfo(t *testing.T, url, id string) map[string]any {
	t.Helper()
	code, out := call(t, "GET", url+"/api/training", "", "", "")
	if code != 200 {
		t.Fatalf("GET /api/training: %d %v", code, out)
	}
	for _, j := range out["jobs"].([]any) {
		if jm := j.(map[string]any); jm["run_id"] == id {
			return jm
		}
	}
	t.Fatalf("job %s not listed: %v", id, out)
	return nil
}

func checkpoints(t *testing.T, dir, id string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "ckpt", id, "step-*.ckpt.pt"))
	return m
}

func TestTrainingJobs(t *testing.T) {
	py := trainingPython(t)
	t.Setenv("FW_PYTHON", py)
	t.Setenv("FW_SYSTEM_INTERVAL", "0")
	dir := t.TempDir()
	d := startDashboard(t, dir, "--max-jobs", "1", "--stop-grace", "10s")

	code, out := call(t, "GET", d.url+"/api/training/recipes", "", "", "")
	if code != 200 || !strings.Contains(d.url, "127.0.0.1") {
		t.Fatalf("recipes: %d %v", code, out)
	}
	names := map[string]bool{}
	for _, r := range out["recipes"].([]any) {
		rm := r.(map[string]any)
		names[rm["name"].(string)] = len(rm["params"].([]any)) > 0
	}
	for _, n := range []string{"digits_mlp", "digits_cnn", "diabetes_mlp"} {
		if !names[n] {
			t.Fatalf("recipe %s missing or without params: %v", n, out)
		}
	}

	// Refused before anything starts.
	code, out = call(t, "POST", d.url+"/api/training/start", "", "application/json", `{"recipe":"rm -rf /","experiment":"e"}`)
	if code != 404 || errorCode(t, out) != "not_found" {
		t.Fatalf("unknown recipe: %d %v", code, out)
	}
	code, out = call(t, "POST", d.url+"/api/training/start", "", "application/json", `{"recipe":"digits_mlp","experiment":"e","params":{"epochs":0,"lr":"x"}}`)
	if code != 422 || errorCode(t, out) != "invalid_params" || !strings.Contains(out["error"].(map[string]any)["message"].(string), "epochs") {
		t.Fatalf("out of range: %d %v", code, out)
	}

	// A: slow enough to watch; B waits in the queue (--max-jobs 1).
	slow := `{"recipe":"digits_mlp","experiment":"e","params":{"epochs":50,"batch_size":256,"hidden":16,"step_delay":0.05}}`
	code, out = call(t, "POST", d.url+"/api/training/start", "", "application/json", slow)
	if code != 202 || out["status"] != "running" {
		t.Fatalf("start A: %d %v", code, out)
	}
	a := out["id"].(string)
	code, out = call(t, "POST", d.url+"/api/training/start", "", "application/json", slow)
	if code != 202 || out["status"] != "queued" {
		t.Fatalf("start B: %d %v", code, out)
	}
	b := out["id"].(string)
	if r := waitRun(t, d.url, b, "visible", func(r map[string]any) bool { return true }); r["status"] != "queued" || r["source"].(map[string]any)["recipe"] != "digits_mlp" {
		t.Fatalf("B's run: %v", r)
	}

	waitRun(t, d.url, a, "training with metrics and progress", func(r map[string]any) bool {
		m, _ := r["metrics"].(map[string]any)
		p := r["progress"].(map[string]any)
		return r["status"] == "running" && m["val/accuracy"] != nil && p["step"].(float64) > 6 && p["total_steps"].(float64) == 300
	})
	if len(checkpoints(t, dir, a)) == 0 {
		t.Fatal("no epoch checkpoint")
	}
	if st := jobInfo(t, d.url, b)["state"]; st != "queued" {
		t.Fatalf("B should still be queued, is %v", st)
	}

	// An ID no job can have (schemathesis sent this one) is a 404, not a
	// lease-name error.
	if code, out := call(t, "POST", d.url+"/api/training/%C3%B9c%C2%AD%C2%9E%5C/stop", "", "", ""); code != 404 || errorCode(t, out) != "not_found" {
		t.Fatalf("stop a job with an impossible ID: %d %v", code, out)
	}

	// Stop A: SIGTERM -> final checkpoint -> stopped.
	before := len(checkpoints(t, dir, a))
	code, out = call(t, "POST", d.url+"/api/training/"+a+"/stop", "", "", "")
	if code != 202 {
		t.Fatalf("stop: %d %v", code, out)
	}
	r := waitRun(t, d.url, a, "stopped", func(r map[string]any) bool { return r["status"] == "stopped" })
	if len(checkpoints(t, dir, a)) <= before {
		t.Fatalf("no final checkpoint on stop (%d before): %v", before, r)
	}
	for deadline := time.Now().Add(30 * time.Second); jobInfo(t, d.url, a)["state"] != "exited"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("job A never exited")
		}
	}
	code, out = call(t, "GET", d.url+"/api/runs/"+a+"/logs", "", "", "")
	if code != 200 {
		t.Fatalf("logs: %d %v", code, out)
	}
	var text []string
	for _, l := range out["lines"].([]any) {
		text = append(text, l.(map[string]any)["line"].(string))
	}
	if joined := strings.Join(text, "\n"); !strings.Contains(joined, "final checkpoint") || strings.Count(joined, "epoch 1/50") != 1 {
		t.Fatalf("logs (want captured once, with the final checkpoint line): %q", joined)
	}

	// B starts when A's slot frees; SIGKILL its group -> failed with the exit code.
	waitRun(t, d.url, b, "running", func(r map[string]any) bool { return r["status"] == "running" })
	pid := int(jobInfo(t, d.url, b)["pid"].(float64))
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r = waitRun(t, d.url, b, "failed", func(r map[string]any) bool { return r["status"] == "failed" })
	if ec, _ := r["exit_code"].(float64); ec != 137 || !strings.Contains(r["error"].(string), "137") {
		t.Fatalf("killed job: %v", r)
	}
	if j := jobInfo(t, d.url, b); j["state"] != "exited" || j["exit_code"].(float64) != 137 {
		t.Fatalf("job listing: %v", j)
	}

	// Fork from A's first epoch checkpoint with other params: a new linked run that finishes.
	ck := filepath.Base(checkpoints(t, dir, a)[0])
	code, out = call(t, "POST", d.url+"/api/training/start", "", "application/json",
		`{"experiment":"e","params":{"epochs":2,"lr":0.01,"step_delay":0},"fork_from":{"run_id":"`+a+`","checkpoint":"`+ck+`"}}`)
	if code != 202 {
		t.Fatalf("fork: %d %v", code, out)
	}
	f := out["id"].(string)
	r = waitRun(t, d.url, f, "finished", func(r map[string]any) bool { return r["status"] == "finished" })
	if r["parent_run_id"] != a || r["parent_checkpoint"] != ck || r["params"].(map[string]any)["lr"] != 0.01 {
		t.Fatalf("fork run: %v", r)
	}
	code, out = call(t, "POST", d.url+"/api/training/start", "", "application/json",
		`{"experiment":"e","fork_from":{"run_id":"`+a+`","checkpoint":"nope.pt"}}`)
	if code != 404 {
		t.Fatalf("fork from a missing checkpoint: %d %v", code, out)
	}
	d.stop(t)
}

// ckptStep is the step in a checkpoint's file name (step-N.ckpt.pt).
func ckptStep(t *testing.T, path string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "step-"), ".ckpt.pt"))
	if err != nil {
		t.Fatalf("checkpoint name %s: %v", path, err)
	}
	return n
}

// TestTrainingResume: resume_from reopens the stopped run itself; its
// recipe continues from the checkpoint's step in the same run, with the
// metrics from before kept, and the run ends again.
func TestTrainingResume(t *testing.T) {
	py := trainingPython(t)
	t.Setenv("FW_PYTHON", py)
	t.Setenv("FW_SYSTEM_INTERVAL", "0")
	dir := t.TempDir()
	d := startDashboard(t, dir, "--max-jobs", "2", "--stop-grace", "20s")
	start := func(body string) (int, map[string]any) {
		t.Helper()
		return call(t, "POST", d.url+"/api/training/start", "", "application/json", body)
	}

	// 3 epochs of 6 steps (1,437 examples, batch 256); slow enough to stop in the middle.
	code, out := start(`{"recipe":"digits_mlp","experiment":"e","params":{"epochs":3,"batch_size":256,"hidden":16,"step_delay":0.3}}`)
	if code != 202 {
		t.Fatalf("start: %d %v", code, out)
	}
	a := out["id"].(string)
	waitRun(t, d.url, a, "past its first epoch checkpoint", func(r map[string]any) bool {
		return r["status"] == "running" && len(checkpoints(t, dir, a)) > 0
	})
	ck := filepath.Base(checkpoints(t, dir, a)[0])
	if code, out = start(`{"resume_from":{"run_id":"` + a + `","checkpoint":"` + ck + `"}}`); code != 409 || errorCode(t, out) != "conflict" {
		t.Fatalf("resume of a running run: %d %v", code, out)
	}
	if code, out = call(t, "POST", d.url+"/api/training/"+a+"/stop", "", "", ""); code != 202 {
		t.Fatalf("stop: %d %v", code, out)
	}
	before := waitRun(t, d.url, a, "stopped", func(r map[string]any) bool { return r["status"] == "stopped" })
	for deadline := time.Now().Add(60 * time.Second); jobInfo(t, d.url, a)["state"] != "exited"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("job never exited")
		}
	}
	// Resume from the final checkpoint written on SIGTERM (the highest step).
	var last string
	for _, p := range checkpoints(t, dir, a) {
		if last == "" || ckptStep(t, p) > ckptStep(t, last) {
			last = p
		}
	}
	ck, from := filepath.Base(last), ckptStep(t, last)
	stepsBefore := metricSteps(t, d.url, a, "train/loss")
	if from < 1 || from >= 18 || !stepsBefore[1] || !stepsBefore[from] || before["ended"] == nil || before["error"] == nil {
		t.Fatalf("stopped run (final checkpoint %s): %v, steps %v", ck, before, stepsBefore)
	}

	// Refused: a checkpoint of no run, params (that is a fork), another experiment, an unknown run.
	if code, out = start(`{"resume_from":{"run_id":"` + a + `","checkpoint":"nope.pt"}}`); code != 404 {
		t.Fatalf("resume from a missing checkpoint: %d %v", code, out)
	}
	if code, out = start(`{"params":{"lr":0.1},"resume_from":{"run_id":"` + a + `","checkpoint":"` + ck + `"}}`); code != 422 {
		t.Fatalf("resume with params: %d %v", code, out)
	}
	if code, out = start(`{"experiment":"other","resume_from":{"run_id":"` + a + `","checkpoint":"` + ck + `"}}`); code != 422 {
		t.Fatalf("resume into another experiment: %d %v", code, out)
	}
	if code, out = start(`{"resume_from":{"run_id":"nosuchrun","checkpoint":"` + ck + `"}}`); code != 404 {
		t.Fatalf("resume of an unknown run: %d %v", code, out)
	}

	code, out = start(`{"resume_from":{"run_id":"` + a + `","checkpoint":"` + ck + `"}}`)
	if code != 202 || out["id"] != a {
		t.Fatalf("resume: %d %v (want the same run %s)", code, out, a)
	}
	// The store reopened the run before answering: no end, no error, progress at the checkpoint.
	code, r := call(t, "GET", d.url+"/api/runs/"+a, "", "", "")
	if p := r["progress"].(map[string]any); code != 200 || r["ended"] != nil || r["error"] != nil || r["exit_code"] != nil || p["step"].(float64) != float64(from) ||
		(r["status"] != "queued" && r["status"] != "running") {
		t.Fatalf("reopened run: %d %v", code, r)
	}
	if code, out = start(`{"resume_from":{"run_id":"` + a + `","checkpoint":"` + ck + `"}}`); code != 409 {
		t.Fatalf("a second resume while the first runs: %d %v", code, out)
	}
	waitRun(t, d.url, a, "running again", func(r map[string]any) bool { return r["status"] == "running" })
	r = waitRun(t, d.url, a, "finished", func(r map[string]any) bool { return r["status"] == "finished" })
	if p := r["progress"].(map[string]any); p["step"].(float64) != 18 || p["total_steps"].(float64) != 18 || r["exit_code"] != nil || r["error"] != nil {
		t.Fatalf("finished run: %v", r)
	}
	if r["parent_run_id"] != nil || r["tags"].(map[string]any)["fw.job"] != "resume" || r["tags"].(map[string]any)["fw.resumed_from"] != ck {
		t.Fatalf("a resumed run is the same run, not a fork: %v", r)
	}
	steps := metricSteps(t, d.url, a, "train/loss")
	for s := range stepsBefore {
		if !steps[s] {
			t.Fatalf("step %d of the first process is gone: %v", s, steps)
		}
	}
	for s := from + 1; s <= 18; s++ {
		if !steps[s] {
			t.Fatalf("step %d after the checkpoint (%d) missing: %v", s, from, steps)
		}
	}
	code, out = call(t, "GET", d.url+"/api/runs/"+a+"/logs?tail=1000", "", "", "")
	if code != 200 {
		t.Fatalf("logs: %d %v", code, out)
	}
	var text []string
	for _, l := range out["lines"].([]any) {
		text = append(text, l.(map[string]any)["line"].(string))
	}
	joined := strings.Join(text, "\n")
	if !strings.Contains(joined, "from step 0") || !strings.Contains(joined, fmt.Sprintf("from step %d", from)) || !strings.Contains(joined, "final checkpoint") {
		t.Fatalf("logs of both processes (want the first start, the stop and the resume from step %d): %q", from, joined)
	}
	jobs := 0
	code, out = call(t, "GET", d.url+"/api/training", "", "", "")
	for _, j := range out["jobs"].([]any) {
		if j.(map[string]any)["run_id"] == a {
			jobs++
		}
	}
	if code != 200 || jobs != 1 || jobInfo(t, d.url, a)["resume_from"] == nil {
		t.Fatalf("job listing (want the resumed job once): %v", out)
	}
	d.stop(t)
}
