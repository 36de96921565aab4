package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// get fetches a URL and returns status, content type and body.
func get(t *testing.T, url string) (int, string, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// TestDashboardServesUI: the web UI at / and at its own routes, open without
// the token, while /api still needs it and a missing asset is a 404 in the
// error shape.
func TestDashboardServesUI(t *testing.T) {
	t.Setenv("FW_SYSTEM_INTERVAL", "0")
	d := startDashboard(t, t.TempDir(), "--token", "s3cret")
	for _, p := range []string{"/", "/experiments", "/runs/abc?tab=logs", "/models/digits"} {
		code, ctype, body := get(t, d.url+p)
		if code != 200 || !strings.HasPrefix(ctype, "text/html") || !strings.Contains(body, "fw dashboard") {
			t.Fatalf("GET %s: %d %s %.200q", p, code, ctype, body)
		}
	}
	if code, out := call(t, "GET", d.url+"/assets/missing-123.js", "", "", ""); code != 404 || errorCode(t, out) != "not_found" {
		t.Fatalf("missing asset: %d %v", code, out)
	}
	if code, out := call(t, "GET", d.url+"/api/runs", "", "", ""); code != 401 || errorCode(t, out) != "unauthorized" {
		t.Fatalf("/api without the token: %d %v", code, out)
	}
	if code, out := call(t, "GET", d.url+"/api/runs", "s3cret", "", ""); code != 200 {
		t.Fatalf("/api with the token: %d %v", code, out)
	}
}

// TestDashboardRunFilesAndActivity: all runs, a run's checkpoints and
// artifacts, and the activity feed, from events ingested like the SDK does.
func TestDashboardRunFilesAndActivity(t *testing.T) {
	t.Setenv("FW_SYSTEM_INTERVAL", "0")
	dir := t.TempDir()
	d := startDashboard(t, dir)
	events := `[{"type":"run_start","run_id":"r1","writer":"w","seq":1,"experiment":"digits","name":"first"},
		{"type":"checkpoint","run_id":"r1","writer":"w","seq":2,"step":10,"path":"step-10.ckpt.pt","values":{"val_acc":0.9}},
		{"type":"checkpoint","run_id":"r1","writer":"w","seq":3,"step":20,"path":"step-20.ckpt.pt","values":{"val_acc":0.95}},
		{"type":"run_end","run_id":"r1","writer":"w","seq":4,"status":"finished"},
		{"type":"run_start","run_id":"r2","writer":"w","seq":1,"experiment":"other","name":"second"},
		{"type":"run_end","run_id":"r2","writer":"w","seq":2,"status":"failed","error":"loss is NaN"}]`
	if code, out := call(t, "POST", d.url+"/api/ingest", "", "application/json", events); code != 200 {
		t.Fatalf("ingest: %d %v", code, out)
	}

	code, out := call(t, "GET", d.url+"/api/runs?sort=name", "", "", "")
	if code != 200 || len(out["runs"].([]any)) != 2 || out["runs"].([]any)[0].(map[string]any)["name"] != "first" {
		t.Fatalf("all runs: %d %v", code, out)
	}
	code, out = call(t, "GET", d.url+`/api/runs?filter=status+%3D+%22failed%22`, "", "", "")
	if code != 200 || len(out["runs"].([]any)) != 1 || out["runs"].([]any)[0].(map[string]any)["id"] != "r2" {
		t.Fatalf("filtered runs: %d %v", code, out)
	}
	code, out = call(t, "GET", d.url+`/api/runs?filter=status+%3D`, "", "", "")
	if code != 400 && code != 422 {
		t.Fatalf("bad filter: %d %v", code, out)
	}
	errorCode(t, out)

	code, out = call(t, "GET", d.url+"/api/runs/r1/checkpoints", "", "", "")
	cks, _ := out["checkpoints"].([]any)
	if code != 200 || len(cks) != 2 || cks[1].(map[string]any)["path"] != "step-20.ckpt.pt" || cks[1].(map[string]any)["metrics"].(map[string]any)["val_acc"] != 0.95 {
		t.Fatalf("checkpoints: %d %v", code, out)
	}
	if code, out := call(t, "GET", d.url+"/api/runs/r1/artifacts", "", "", ""); code != 200 || len(out["artifacts"].([]any)) != 0 {
		t.Fatalf("artifacts: %d %v", code, out)
	}
	for _, p := range []string{"/api/runs/nope/checkpoints", "/api/runs/nope/artifacts"} {
		if code, out := call(t, "GET", d.url+p, "", "", ""); code != 404 {
			t.Fatalf("%s: %d %v", p, code, out)
		}
	}
	if code, out := call(t, "POST", d.url+"/api/runs/r1/checkpoints", "", "", ""); code != 405 || errorCode(t, out) != "method_not_allowed" {
		t.Fatalf("POST checkpoints: %d %v", code, out)
	}

	code, out = call(t, "GET", d.url+"/api/activity?limit=10", "", "", "")
	if code != 200 {
		t.Fatalf("activity: %d %v", code, out)
	}
	kinds := map[string]string{}
	for _, e := range out["events"].([]any) {
		ev := e.(map[string]any)
		kinds[ev["kind"].(string)+":"+ev["run_id"].(string)] = ev["message"].(string)
	}
	if kinds["run_started:r1"] == "" || kinds["run_finished:r1"] == "" || !strings.Contains(kinds["run_failed:r2"], "loss is NaN") {
		t.Fatalf("activity kinds: %v", kinds)
	}
	if code, out := call(t, "GET", d.url+"/api/activity?limit=0", "", "", ""); code != 422 && code != 400 {
		t.Fatalf("activity limit=0: %d %v", code, out)
	}
	if code, out := call(t, "GET", d.url+"/api/models/exports", "", "", ""); code != 200 || out["exports"] == nil {
		t.Fatalf("exports: %d %v", code, out)
	}
}

// TestDashboardDeploymentProxy: the UI's "try it" goes through the
// dashboard to a real deployment: JSON rows, an uploaded PNG, the model's
// description; the proxy forwards nothing else.
func TestDashboardDeploymentProxy(t *testing.T) {
	models := modelsDir(t)
	t.Setenv("FW_SYSTEM_INTERVAL", "0")
	d := startDashboard(t, t.TempDir())
	if code, out := upload(t, d.url+"/api/models?name=cnn", filepath.Join(models, "digits_cnn.onnx")); code != 201 {
		t.Fatalf("upload: %d %v", code, out)
	}
	// The live stream carries the deployment's life: starting, running, stopped.
	ws, _, err := dialStream(t, d.url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	subscribe(t, ws, "*", nil)
	port := freePort(t)
	code, out := call(t, "POST", d.url+"/api/models/cnn/deploy", "", "application/json", fmt.Sprintf(`{"port":%d}`, port))
	if code != 201 {
		t.Fatalf("deploy: %d %v\n%s", code, out, d.stderr.String())
	}
	id, pid := out["id"].(string), int(out["pid"].(float64))
	t.Cleanup(func() { syscall.Kill(-pid, syscall.SIGKILL) })
	base := d.url + "/api/deployments/" + id

	if code, out := call(t, "GET", base+"/model", "", "", ""); code != 200 || out["inputs"] == nil {
		t.Fatalf("proxied /model: %d %v", code, out)
	}
	rows := `{"data": [[[` + strings.TrimSuffix(strings.Repeat("[0,0,0,0,0,0,0,0],", 8), ",") + `]]]}`
	if code, out := call(t, "POST", base+"/predict", "", "application/json", rows); code != 200 || out["predictions"] == nil {
		t.Fatalf("proxied /predict: %d %v", code, out)
	}
	// A request the model server refuses comes back as it answered it.
	if code, out := call(t, "POST", base+"/predict", "", "application/json", `{"data": [[1,2]]}`); code != 422 && code != 400 {
		t.Fatalf("proxied bad rows: %d %v", code, out)
	} else {
		errorCode(t, out)
	}
	png, err := os.ReadFile(filepath.Join(models, "samples", "digit_7_0.png"))
	if err != nil {
		t.Fatal(err)
	}
	code, out = call(t, "POST", base+"/predict/image", "", "image/png", string(png))
	if code != 200 {
		t.Fatalf("proxied /predict/image: %d %v", code, out)
	}
	top := out["predictions"].([]any)[0].(map[string]any)["top_k"].([]any)[0].(map[string]any)
	if top["label"] != "7" {
		t.Fatalf("digit 7 predicted as %v", out)
	}
	if code, out := call(t, "POST", base+"/admin", "", "", ""); code != 404 || errorCode(t, out) != "not_found" {
		t.Fatalf("unlisted route: %d %v", code, out)
	}
	if code, out := call(t, "GET", base+"/predict", "", "", ""); code != 405 || errorCode(t, out) != "method_not_allowed" {
		t.Fatalf("GET predict: %d %v", code, out)
	}
	if code, out := call(t, "POST", d.url+"/api/deployments/nope/predict", "", "application/json", rows); code != 404 || errorCode(t, out) != "not_found" {
		t.Fatalf("unknown deployment: %d %v", code, out)
	}
	if code, out := call(t, "DELETE", base, "", "", ""); code != 200 {
		t.Fatalf("undeploy: %d %v", code, out)
	}
	if code, out := call(t, "POST", base+"/predict", "", "application/json", rows); code != 404 && code != 409 {
		t.Fatalf("predict after undeploy: %d %v", code, out)
	}
	var states []string
	for len(states) < 3 {
		m := readMsg(t, ws)
		if m.Type != "deploy" || m.RunID != id {
			continue
		}
		var data struct{ State, Model string }
		if err := json.Unmarshal(m.Data, &data); err != nil || data.Model != "cnn" {
			t.Fatalf("deploy event %s: %v", m.Data, err)
		}
		states = append(states, data.State)
	}
	if strings.Join(states, ",") != "starting,running,stopped" {
		t.Fatalf("deploy events: %v", states)
	}
	// The activity feed has the deploy and the undeploy.
	code, out = call(t, "GET", d.url+"/api/activity", "", "", "")
	kinds := map[string]bool{}
	for _, e := range out["events"].([]any) {
		ev := e.(map[string]any)
		if ev["deployment_id"] == id {
			kinds[ev["kind"].(string)] = true
		}
	}
	if code != 200 || !kinds["deployed"] || !kinds["undeployed"] {
		t.Fatalf("activity after undeploy: %d %v", code, out)
	}
}

// TestDashboardRunFileDownload: a listed checkpoint or artifact comes back as
// a download; anything else (unlisted, traversal, a symlink out of the run's
// directory) is a 404 in the error shape.
func TestDashboardRunFileDownload(t *testing.T) {
	t.Setenv("FW_SYSTEM_INTERVAL", "0")
	dir := t.TempDir()
	t.Setenv("FW_ARTIFACT_DIR", filepath.Join(dir, "art"))
	d := startDashboard(t, dir)
	ck := filepath.Join(dir, "ckpt", "r1")
	art := filepath.Join(dir, "art", "r1", "plots")
	for _, p := range []string{ck, art} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(ck, "step-1.ckpt.pt"), []byte("weights"), 0o644)
	os.WriteFile(filepath.Join(art, "loss.png"), []byte("png!"), 0o644)
	secret := filepath.Join(dir, "secret.txt")
	os.WriteFile(secret, []byte("do not serve"), 0o644)
	os.Symlink(secret, filepath.Join(ck, "link.pt"))
	events := `[{"type":"run_start","run_id":"r1","writer":"w","seq":1,"experiment":"e"},
		{"type":"checkpoint","run_id":"r1","writer":"w","seq":2,"step":1,"path":"step-1.ckpt.pt"},
		{"type":"checkpoint","run_id":"r1","writer":"w","seq":3,"step":2,"path":"link.pt"},
		{"type":"artifact","run_id":"r1","writer":"w","seq":4,"path":"plots/loss.png","size":4}]`
	if code, out := call(t, "POST", d.url+"/api/ingest", "", "application/json", events); code != 200 || len(out["errors"].([]any)) != 0 {
		t.Fatalf("ingest: %d %v", code, out)
	}
	for p, want := range map[string]string{"/api/runs/r1/download?kind=checkpoint&path=step-1.ckpt.pt": "weights", "/api/runs/r1/download?kind=artifact&path=plots/loss.png": "png!"} {
		resp, err := http.Get(d.url + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != want || !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment") {
			t.Fatalf("GET %s: %d %q %v", p, resp.StatusCode, b, resp.Header)
		}
	}
	for _, p := range []string{
		"/api/runs/r1/download?kind=checkpoint&path=nope.pt",              // not listed
		"/api/runs/r1/download?kind=checkpoint&path=link.pt",              // listed, but a symlink out of the run's directory
		"/api/runs/r1/download?kind=checkpoint&path=..%2F..%2Fsecret.txt", // traversal
		"/api/runs/r1/download?kind=artifact&path=step-1.ckpt.pt",         // a checkpoint is not an artifact
		"/api/runs/r2/download?kind=checkpoint&path=step-1.ckpt.pt",       // no such run
	} {
		code, out := call(t, "GET", d.url+p, "", "", "")
		if code != 404 || errorCode(t, out) != "not_found" {
			t.Fatalf("GET %s: %d %v", p, code, out)
		}
		if strings.Contains(fmt.Sprint(out), "do not serve") {
			t.Fatalf("GET %s served the secret", p)
		}
	}
	for _, p := range []string{"/api/runs/r1/download?kind=model&path=step-1.ckpt.pt", "/api/runs/r1/download?kind=checkpoint"} {
		if code, out := call(t, "GET", d.url+p, "", "", ""); code != 400 || errorCode(t, out) != "bad_request" {
			t.Fatalf("GET %s: %d %v", p, code, out)
		}
	}
	if code, out := call(t, "DELETE", d.url+"/api/runs/r1/download?kind=checkpoint&path=step-1.ckpt.pt", "", "", ""); code != 405 {
		t.Fatalf("DELETE a checkpoint file: %d %v", code, out)
	}
}
