package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/dashboard/registry"
	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/testmodels"
)

// startRegistryServer serves the real router with a model registry on st
// and dir whose deployments run the fw binary bin, and returns its URL.
// Called again on the same st and dir, it is the dashboard restarted.
func startRegistryServer(t *testing.T, st store.Store, dir, bin string) string {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := registry.New(context.Background(), st, registry.Config{ExperimentDir: dir, CheckpointDir: filepath.Join(dir, "checkpoints"),
		Executable: bin, ReadyTimeout: 90 * time.Second, StopGrace: 10 * time.Second}, log)
	if err != nil {
		t.Fatal(err)
	}
	srv := New(context.Background(), st, Config{}, log)
	srv.SetRegistry(svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &fasthttp.Server{Handler: srv.Handler, StreamRequestBody: true}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Shutdown() })
	return "http://" + ln.Addr().String()
}

// call sends a JSON request and decodes the JSON answered (an object or a
// list).
func httpCall(t *testing.T, method, url, body string) (int, any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s: %d, not JSON: %q", method, url, resp.StatusCode, b)
	}
	return resp.StatusCode, out
}

func obj(v any) map[string]any { m, _ := v.(map[string]any); return m }

func uploadModel(t *testing.T, url, name, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url+"/api/models?name="+name, "application/octet-stream", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := decodeBody(t, resp)
	if resp.StatusCode != 201 {
		t.Fatalf("upload %s: %d %v", path, resp.StatusCode, out)
	}
	return int(obj(out["version"])["version"].(float64))
}

// infer sends one zero-filled sample to /v2/models/{m}/versions/{v}/infer
// of the server at base, shaped by the registry version's first input, and
// returns the status and answer.
func infer(t *testing.T, dash, base, model string, version int) (int, map[string]any) {
	t.Helper()
	return inferFilled(t, dash, base, model, version, 0)
}

// inferFilled is infer with every input value fill.
func inferFilled(t *testing.T, dash, base, model string, version int, fill float32) (int, map[string]any) {
	t.Helper()
	_, v := httpCall(t, "GET", fmt.Sprintf("%s/api/models/%s/versions/%d", dash, model, version), "")
	in := obj(v)["inputs"].([]any)[0].(map[string]any)
	shape, n := []int{}, 1
	for _, d := range in["shape"].([]any) {
		x := max(1, int(d.(float64))) // the batch axis: one sample
		shape = append(shape, x)
		n *= x
	}
	data := make([]float32, n)
	for i := range data {
		data[i] = fill
	}
	body, _ := json.Marshal(map[string]any{"inputs": []any{map[string]any{"name": in["name"], "datatype": "FP32", "shape": shape, "data": data}}})
	code, out := httpCall(t, "POST", fmt.Sprintf("%s/v2/models/%s/versions/%d/infer", base, model, version), string(body))
	return code, obj(out)
}

// indexStates is the shared server's own repository index: "model/version"
// to state.
func indexStates(t *testing.T, base string) map[string]string {
	t.Helper()
	code, out := httpCall(t, "POST", base+"/v2/repository/index", "{}")
	if code != 200 {
		t.Fatalf("repository index: %d %v", code, out)
	}
	got := map[string]string{}
	for _, e := range out.([]any) {
		e := e.(map[string]any)
		if v, ok := e["version"].(string); ok {
			got[e["name"].(string)+"/"+v] = e["state"].(string)
		}
	}
	return got
}

// killGroupAtEnd kills the process group of pid when the test ends (the
// shared server runs in its own session and would outlive a failed test).
func killGroupAtEnd(t *testing.T, pid int) {
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
}

// TestSharedServer: two versions of one model and a second model deployed
// with "target": "shared" run in one `fw serve --model-repository`
// process (the real binary, real model files), each answering on
// /v2/models/{m}/versions/{v}/infer; undeploying one version reloads its
// model with the other and the server's repository index says so; the
// server is adopted by a restarted dashboard, started again (with its
// versions) after its process died, and stopped with DELETE. Hostile
// requests are refused with the reason and leave the repository alone.
func TestSharedServer(t *testing.T) {
	bin := testmodels.FWBinary(t)
	models := testmodels.Dir(t)
	dir := t.TempDir()
	st, err := store.Open(context.Background(), store.Config{Dir: filepath.Join(dir, "db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	url := startRegistryServer(t, st, dir, bin)

	if v := uploadModel(t, url, "mlp", filepath.Join(models, "digits_mlp.onnx")); v != 1 {
		t.Fatalf("mlp v%d", v)
	}
	uploadModel(t, url, "mlp", filepath.Join(models, "digits_mlp.int8-dynamic.onnx")) // v2
	uploadModel(t, url, "mlp", filepath.Join(models, "digits_mlp.int8-static.onnx"))  // v3, never deployed
	uploadModel(t, url, "cnn", filepath.Join(models, "digits_cnn.onnx"))              // v1

	// Nothing is deployed: no shared server.
	if code, out := httpCall(t, "GET", url+"/api/shared-server", ""); code != 200 || obj(out)["state"] != "stopped" {
		t.Fatalf("shared server before any deploy: %d %v", code, out)
	}
	deploy := func(model, body string) (int, map[string]any) {
		t.Helper()
		code, out := httpCall(t, "POST", url+"/api/models/"+model+"/deploy", body)
		return code, obj(out)
	}
	code, d1 := deploy("mlp", `{"version": 1, "target": "shared"}`)
	if code != 201 || d1["target"] != "shared" || d1["healthy"] != true || d1["model_state"] != "READY" {
		t.Fatalf("deploy mlp v1 to the shared server: %d %v", code, d1)
	}
	pid, base := int(d1["pid"].(float64)), d1["url"].(string)
	killGroupAtEnd(t, pid)
	code, d2 := deploy("mlp", `{"version": 2, "target": "shared", "max_batch_size": 0}`)
	if code != 201 || int(d2["pid"].(float64)) != pid || d2["url"] != base {
		t.Fatalf("deploy mlp v2 to the same shared server (pid %d %s): %d %v", pid, base, code, d2)
	}
	code, d3 := deploy("cnn", `{"target": "shared"}`) // the latest version
	if code != 201 || int(d3["pid"].(float64)) != pid || d3["version"] != float64(1) {
		t.Fatalf("deploy cnn to the shared server: %d %v", code, d3)
	}
	for _, mv := range []struct {
		m string
		v int
	}{{"mlp", 1}, {"mlp", 2}, {"cnn", 1}} {
		code, out := infer(t, url, base, mv.m, mv.v)
		if code != 200 || out["model_version"] != fmt.Sprint(mv.v) {
			t.Fatalf("infer %s v%d on the shared server: %d %v", mv.m, mv.v, code, out)
		}
	}
	if got := indexStates(t, base); got["mlp/1"] != "READY" || got["mlp/2"] != "READY" || got["cnn/1"] != "READY" || len(got) != 3 {
		t.Fatalf("index: %v", got)
	}
	// The dashboard's view: the server with its versions, and the deployments.
	code, out := httpCall(t, "GET", url+"/api/shared-server", "")
	srv := obj(out)
	if code != 200 || srv["state"] != "running" || srv["healthy"] != true || len(srv["versions"].([]any)) != 3 {
		t.Fatalf("GET /api/shared-server: %d %v", code, out)
	}
	for _, v := range srv["versions"].([]any) {
		if v := obj(v); v["state"] != "READY" || !strings.HasPrefix(fmt.Sprint(v["deployment"]), "dep-") {
			t.Fatalf("shared server version: %v", v)
		}
	}
	// Through the dashboard's proxy, the shared deployment answers as its
	// own version: v2's scores (int8), not v1's.
	code, out = httpCall(t, "POST", url+"/api/deployments/"+d2["id"].(string)+"/predict", `{"data": [[`+strings.TrimSuffix(strings.Repeat("0.5,", 64), ",")+`]]}`)
	_, v1 := inferFilled(t, url, base, "mlp", 1, 0.5)
	_, v2 := inferFilled(t, url, base, "mlp", 2, 0.5)
	scores := fmt.Sprint(obj(out)["predictions"].([]any)[0])
	if code != 200 || scores != fmt.Sprint(obj(v2["outputs"].([]any)[0])["data"]) || scores == fmt.Sprint(obj(v1["outputs"].([]any)[0])["data"]) {
		t.Fatalf("predict through the proxy: %d %v; v1 answers %v, v2 %v", code, out, v1, v2)
	}
	if code, out := httpCall(t, "GET", url+"/api/deployments/"+d3["id"].(string)+"/health/ready", ""); code != 200 {
		t.Fatalf("health through the proxy: %d %v", code, out)
	}

	// Hostile and conflicting requests.
	repo := filepath.Join(dir, "serving", "shared")
	f := func(path, body string, wantCode int, wantMsg string) {
		t.Helper()
		code, out := httpCall(t, "POST", url+path, body)
		if code != wantCode || !strings.Contains(errMessage(obj(out)), wantMsg) {
			t.Errorf("POST %s %s: %d %v, want %d with %q", path, body, code, out, wantCode, wantMsg)
		}
	}
	f("/api/models/mlp/deploy", `{"version": 9, "target": "shared"}`, 404, "has no version 9")
	f("/api/models/mlp/deploy", `{"version": "staging", "target": "shared"}`, 404, `no version or alias "staging"`)
	f("/api/models/nope/deploy", `{"target": "shared"}`, 404, `no model "nope"`)
	f("/api/models/..%2F..%2Fetc/deploy", `{"target": "shared"}`, 404, "")
	f("/api/models/.hidden/deploy", `{"target": "shared"}`, 404, "no model")
	f("/api/models/mlp/deploy", `{"version": 1, "target": "elsewhere"}`, 422, `target "elsewhere" is not process`)
	f("/api/models/mlp/deploy", `{"version": 1, "target": "shared"}`, 409, "already on the shared server as deployment "+d1["id"].(string))
	f("/api/models/mlp/deploy", `{"version": 3, "target": "shared", "max_batch_size": 4}`, 409, "one configuration serves all its versions")
	f("/api/models/mlp/deploy", fmt.Sprintf(`{"version": 3, "target": "shared", "port": %d}`, int(d1["port"].(float64))+1), 409, "the shared server listens on port")
	f("/api/models/mlp/deploy", fmt.Sprintf(`{"version": 3, "port": %d}`, int(d1["port"].(float64))), 409, "used by the shared server")
	f("/api/models/mlp/deploy", `{"version": 3, "target": "shared", "port": -1}`, 422, "port -1")
	f("/api/models/mlp/deploy", `{"version": 3, "target": "shared", "bogus": 1}`, 400, "unknown field")
	if code, out := httpCall(t, "DELETE", url+"/api/deployments/dep-nope", ""); code != 404 {
		t.Errorf("DELETE an unknown deployment: %d %v", code, out)
	}
	entries, _ := os.ReadDir(repo)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"cnn", "mlp"}) {
		t.Fatalf("the repository holds %v, want [cnn mlp]", names)
	}
	if _, err := os.Stat(filepath.Join(repo, "mlp", "3")); err == nil {
		t.Fatal("a refused deploy left its version in the repository")
	}

	// Undeploy mlp v1: mlp is reloaded with v2 alone.
	code, out = httpCall(t, "DELETE", url+"/api/deployments/"+d1["id"].(string), "")
	if code != 200 || obj(out)["state"] != "stopped" || obj(out)["target"] != "shared" {
		t.Fatalf("undeploy mlp v1: %d %v", code, out)
	}
	if got := indexStates(t, base); got["mlp/1"] == "READY" || got["mlp/2"] != "READY" || got["cnn/1"] != "READY" {
		t.Fatalf("index after undeploying mlp v1: %v", got)
	}
	if code, out := infer(t, url, base, "mlp", 1); code == 200 {
		t.Fatalf("mlp v1 still answers after its undeploy: %v", out)
	}
	if code, out := infer(t, url, base, "mlp", 2); code != 200 {
		t.Fatalf("mlp v2 after undeploying v1: %d %v", code, out)
	}
	if _, err := os.Stat(filepath.Join(repo, "mlp", "1")); err == nil {
		t.Fatal("mlp/1 is still in the repository")
	}
	listDeps := func(u string) []map[string]any {
		t.Helper()
		code, out := httpCall(t, "GET", u+"/api/deployments", "")
		if code != 200 {
			t.Fatalf("GET /api/deployments: %d %v", code, out)
		}
		var list []map[string]any
		for _, d := range obj(out)["deployments"].([]any) {
			list = append(list, obj(d))
		}
		return list
	}
	deps := listDeps(url)
	if len(deps) != 2 || deps[0]["id"] != d2["id"] || deps[1]["id"] != d3["id"] || deps[0]["healthy"] != true || deps[1]["model_state"] != "READY" {
		t.Fatalf("deployments after the undeploy: %v", deps)
	}

	// A restarted dashboard adopts the running server.
	url = startRegistryServer(t, st, dir, bin)
	deps = listDeps(url)
	if len(deps) != 2 || int(deps[0]["pid"].(float64)) != pid || deps[0]["healthy"] != true || deps[1]["healthy"] != true {
		t.Fatalf("deployments after a dashboard restart: %v", deps)
	}

	// Its process dies: the deployments are gone until the server is
	// started again, with the versions deployed there.
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone := time.Now().Add(10 * time.Second)
	for {
		_, out = httpCall(t, "GET", url+"/api/shared-server", "")
		if obj(out)["state"] == "gone" {
			break
		}
		if time.Now().After(waitGone) {
			t.Fatalf("the shared server is not gone after SIGKILL: %v", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if deps := listDeps(url); deps[0]["state"] != "gone" || deps[0]["healthy"] != false {
		t.Fatalf("a deployment of a dead shared server: %v", deps[0])
	}
	code, out = httpCall(t, "POST", url+"/api/shared-server", "")
	srv = obj(out)
	if code != 201 || srv["state"] != "running" || srv["restarts"] != float64(1) || srv["port"] != d1["port"] {
		t.Fatalf("starting the shared server again: %d %v", code, out)
	}
	pid = int(srv["pid"].(float64))
	killGroupAtEnd(t, pid)
	if got := indexStates(t, base); got["mlp/2"] != "READY" || got["cnn/1"] != "READY" || got["mlp/1"] == "READY" {
		t.Fatalf("index of the server started again: %v", got)
	}
	if code, out := infer(t, url, base, "cnn", 1); code != 200 {
		t.Fatalf("cnn on the server started again: %d %v", code, out)
	}
	if code, out := httpCall(t, "POST", url+"/api/shared-server", `{"device": "cuda"}`); code != 409 || !strings.Contains(errMessage(obj(out)), "runs on cpu") {
		t.Fatalf("POST /api/shared-server with another device: %d %v", code, out)
	}

	// DELETE stops it and ends its deployments.
	code, out = httpCall(t, "DELETE", url+"/api/shared-server", "")
	if code != 200 || obj(out)["state"] != "stopped" {
		t.Fatalf("DELETE /api/shared-server: %d %v", code, out)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("the shared server's process %d is still alive", pid)
	}
	if deps := listDeps(url); len(deps) != 0 {
		t.Fatalf("deployments after stopping the shared server: %v", deps)
	}
	if code, out := httpCall(t, "DELETE", url+"/api/shared-server", ""); code != 404 {
		t.Fatalf("DELETE /api/shared-server twice: %d %v", code, out)
	}
	if _, err := os.Stat(repo); err == nil {
		t.Fatal("the repository is left behind")
	}
}
