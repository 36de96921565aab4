package main

import (
	"bytes"
	"context"
	"fmt"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// grpcInfer checks a served model over gRPC: health SERVING, and one row of
// zeros through ModelInfer giving one row of outputs.
func grpcInfer(t *testing.T, addr, model string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health at %s: %v %v", addr, h, err)
	}
	c := pb.NewGRPCInferenceServiceClient(conn)
	md, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: model})
	if err != nil {
		t.Fatalf("gRPC ModelMetadata: %v", err)
	}
	in := md.Inputs[0]
	shape := append([]int64{1}, in.Shape[1:]...)
	r, err := c.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: model,
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: in.Name, Datatype: in.Datatype, Shape: shape}},
		RawInputContents: [][]byte{make([]byte, 4*shape[1])}})
	if err != nil || len(r.Outputs) == 0 || r.Outputs[0].Shape[0] != 1 {
		t.Fatalf("gRPC ModelInfer: %v %v", r, err)
	}
}

// upload posts a multipart form with the file as "file".
func upload(t *testing.T, url, path string) (int, map[string]any) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", filepath.Base(path))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fw.Write(b)
	mw.Close()
	return call(t, "POST", url, "", mw.FormDataContentType(), buf.String())
}

func findModel(t *testing.T, url, name string) map[string]any {
	t.Helper()
	code, out := call(t, "GET", url+"/api/models", "", "", "")
	if code != 200 {
		t.Fatalf("GET /api/models: %d %v", code, out)
	}
	for _, m := range out["models"].([]any) {
		if mm := m.(map[string]any); mm["name"] == name {
			return mm
		}
	}
	t.Fatalf("model %s not listed: %v", name, out)
	return nil
}

func TestModelRegistry(t *testing.T) {
	models := modelsDir(t)
	py := trainingPython(t)
	t.Setenv("FW_PYTHON", py)
	t.Setenv("FW_SYSTEM_INTERVAL", "0")
	dir := t.TempDir()
	d := startDashboard(t, dir, "--stop-grace", "5s")

	// An uploaded ONNX file: listed with its spec and labels.
	code, out := upload(t, d.url+"/api/models?name=cnn", filepath.Join(models, "digits_cnn.onnx"))
	if code != 201 {
		t.Fatalf("upload: %d %v", code, out)
	}
	m := findModel(t, d.url, "cnn")
	v1 := m["versions"].([]any)[0].(map[string]any)
	if v1["format"] != "onnx" || len(v1["inputs"].([]any)) == 0 || len(v1["outputs"].([]any)) == 0 || len(v1["labels"].([]any)) != 10 || v1["size"].(float64) <= 0 {
		t.Fatalf("uploaded version: %v", v1)
	}
	// A pickle is refused, in the error shape; so is a bad name.
	code, out = upload(t, d.url+"/api/models?name=evil", filepath.Join(models, "bad", "state_dict.pt"))
	if code != 422 || errorCode(t, out) != "pickle_refused" {
		t.Fatalf("pickle: %d %v", code, out)
	}
	code, out = upload(t, d.url+"/api/models?name=../x", filepath.Join(models, "digits_cnn.onnx"))
	if code != 422 || errorCode(t, out) != "invalid_argument" {
		t.Fatalf("bad name: %d %v", code, out)
	}

	// A run with a checkpoint, ingested like the SDK does.
	ckDir := filepath.Join(dir, "ckpt", "r1")
	os.MkdirAll(ckDir, 0o755)
	copyFile(t, filepath.Join(models, "digits_mlp.ckpt.pt"), filepath.Join(ckDir, "step-1.ckpt.pt"))
	if code, out := call(t, "POST", d.url+"/api/ingest", "", "", `[{"type":"run_start","run_id":"r1","writer":"w1","seq":1,"experiment":"digits"},
		{"type":"checkpoint","run_id":"r1","writer":"w1","seq":2,"step":1,"path":"step-1.ckpt.pt","values":{"val_acc":0.97}}]`); code != 200 {
		t.Fatalf("ingest: %d %v", code, out)
	}

	// Errors: bad format 422, unknown model 404, unknown checkpoint 404.
	code, out = call(t, "POST", d.url+"/api/models/export", "", "application/json", `{"run_id":"r1","checkpoint":"step-1.ckpt.pt","format":"pickle","name":"mlp"}`)
	if code != 422 || errorCode(t, out) != "invalid_argument" {
		t.Fatalf("bad format: %d %v", code, out)
	}
	code, out = call(t, "GET", d.url+"/api/models/nope", "", "", "")
	if code != 404 || errorCode(t, out) != "not_found" {
		t.Fatalf("unknown model: %d %v", code, out)
	}
	code, out = call(t, "POST", d.url+"/api/models/export", "", "application/json", `{"run_id":"r1","checkpoint":"../../etc/passwd","format":"onnx","name":"mlp"}`)
	if code != 404 || errorCode(t, out) != "not_found" {
		t.Fatalf("unknown checkpoint: %d %v", code, out)
	}

	// Export to ONNX: a new version with its parity report.
	code, out = call(t, "POST", d.url+"/api/models/export", "", "application/json", `{"run_id":"r1","checkpoint":"step-1.ckpt.pt","format":"onnx","opset_version":17,"name":"mlp"}`)
	if code != 202 {
		t.Fatalf("export: %d %v", code, out)
	}
	waitExport := func(id string) map[string]any {
		t.Helper()
		var job map[string]any
		// aoti compiles C++: give it minutes on a busy 2-core machine.
		for deadline := time.Now().Add(300 * time.Second); ; {
			_, job = call(t, "GET", d.url+"/api/models/exports/"+id, "", "", "")
			if job["state"] == "finished" || job["state"] == "failed" || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if job["state"] != "finished" || job["report"].(map[string]any)["max_abs_error"] == nil {
			t.Fatalf("export job: %v", job)
		}
		return job
	}
	onnxExport := out["id"].(string)
	waitExport(onnxExport)
	m = findModel(t, d.url, "mlp")
	mv := m["versions"].([]any)[0].(map[string]any)
	if mv["format"] != "onnx" || mv["parity"].(map[string]any)["max_abs_error"].(float64) > 1e-3 || mv["source"].(map[string]any)["run_id"] != "r1" || mv["metrics"].(map[string]any)["val_acc"] != 0.97 {
		t.Fatalf("exported version: %v", mv)
	}

	// A method for aoti (always torch.export) is refused before anything runs.
	code, out = call(t, "POST", d.url+"/api/models/export", "", "application/json", `{"run_id":"r1","checkpoint":"step-1.ckpt.pt","format":"aoti","method":"trace","name":"mlp_aoti"}`)
	if code != 422 || errorCode(t, out) != "invalid_argument" || !strings.Contains(out["error"].(map[string]any)["message"].(string), "aoti") {
		t.Fatalf("aoti with a method: %d %v", code, out)
	}

	// The other formats, each as its own model; int8 ONNX with static
	// quantization calibrates on the training rows the checkpoint carries;
	// aoti is an AOTInductor package, registered as model.pt2.
	for _, c := range []struct{ format, extra string }{{"torchscript", ""}, {"quantized", ""}, {"onnx_int8", `,"quantization":"static"`}, {"aoti", ""}} {
		format := c.format
		code, out = call(t, "POST", d.url+"/api/models/export", "", "application/json",
			fmt.Sprintf(`{"run_id":"r1","checkpoint":"step-1.ckpt.pt","format":%q,"name":"mlp_%s"%s}`, format, format, c.extra))
		if code != 202 {
			t.Fatalf("export %s: %d %v", format, code, out)
		}
		waitExport(out["id"].(string))
		v := findModel(t, d.url, "mlp_"+format)["versions"].([]any)[0].(map[string]any)
		if v["format"] != format || v["parity"].(map[string]any)["max_abs_error"] == nil {
			t.Fatalf("exported %s version: %v", format, v)
		}
		if format == "onnx_int8" && (v["parity"].(map[string]any)["quantization"] != "static" || !strings.HasSuffix(v["file"].(string), "model.int8.onnx")) {
			t.Fatalf("int8 ONNX version: %v", v)
		}
		if format == "aoti" {
			if f, _ := v["file"].(string); !strings.HasSuffix(f, "model.pt2") {
				t.Fatalf("aoti version file %q, want .../model.pt2: %v", f, v)
			}
		}
	}
	code, out = call(t, "POST", d.url+"/api/models/export", "", "application/json", `{"run_id":"r1","checkpoint":"step-1.ckpt.pt","format":"onnx","quantization":"static","name":"mlp"}`)
	if code != 422 || errorCode(t, out) != "invalid_argument" || !strings.Contains(out["error"].(map[string]any)["message"].(string), "onnx_int8") {
		t.Fatalf("quantization with format onnx: %d %v", code, out)
	}

	// Alias production.
	code, out = call(t, "PATCH", d.url+"/api/models/mlp", "", "application/json", `{"aliases":{"production":1}}`)
	if code != 200 || out["aliases"].(map[string]any)["production"] != 1.0 {
		t.Fatalf("alias: %d %v", code, out)
	}

	// Deploy production on a free port; predict through it.
	port := freePort(t)
	code, out = call(t, "POST", d.url+"/api/models/mlp/deploy", "", "application/json", fmt.Sprintf(`{"version":"production","port":%d,"max_batch_size":8,"max_delay_ms":1}`, port))
	if code != 201 {
		t.Fatalf("deploy: %d %v\n%s", code, out, d.stderr.String())
	}
	depID, depURL, pid := out["id"].(string), out["url"].(string), int(out["pid"].(float64))
	grpcAddr, _ := out["grpc_address"].(string)
	if grpcAddr == "" || out["grpc_port"] == nil || out["grpc_port"] == float64(port) {
		t.Fatalf("deployment has no gRPC address of its own: %v", out)
	}
	t.Cleanup(func() { syscall.Kill(-pid, syscall.SIGKILL) })
	code, out = call(t, "POST", d.url+"/api/models/mlp/deploy", "", "application/json", fmt.Sprintf(`{"version":1,"port":%d}`, port))
	if code != 409 || errorCode(t, out) != "conflict" || !strings.Contains(out["error"].(map[string]any)["message"].(string), "port") {
		t.Fatalf("port conflict: %d %v", code, out)
	}
	body := `{"data": [[` + strings.TrimSuffix(strings.Repeat("0.5,", 64), ",") + `]]}`
	if code, out := call(t, "POST", depURL+"/predict", "", "application/json", body); code != 200 {
		t.Fatalf("predict: %d %v", code, out)
	}
	// The deployment also answers over gRPC, on a port the dashboard picked.
	grpcInfer(t, grpcAddr, "mlp")
	listed := func() map[string]any {
		t.Helper()
		code, out := call(t, "GET", d.url+"/api/deployments", "", "", "")
		if code != 200 || len(out["deployments"].([]any)) != 1 {
			t.Fatalf("deployments: %d %v", code, out)
		}
		return out["deployments"].([]any)[0].(map[string]any)
	}
	if dep := listed(); dep["healthy"] != true || dep["url"] != depURL || dep["state"] != "running" {
		t.Fatalf("deployment: %v", dep)
	}
	call(t, "POST", depURL+"/predict", "", "application/json", body)
	if dep := listed(); dep["request_rate"] == nil {
		t.Fatalf("no request rate on the second sample: %v", dep)
	}

	// Restart the dashboard on the same dirs: the deployment is re-adopted.
	d.stop(t)
	d = startDashboard(t, dir)
	if dep := listed(); dep["id"] != depID || dep["healthy"] != true || dep["state"] != "running" {
		t.Fatalf("after restart: %v\n%s", dep, d.stderr.String())
	}
	if v := findModel(t, d.url, "mlp")["aliases"].(map[string]any)["production"]; v != 1.0 {
		t.Fatalf("registry after restart: %v", v)
	}
	// Export jobs are records in the store: still answered.
	if code, job := call(t, "GET", d.url+"/api/models/exports/"+onnxExport, "", "", ""); code != 200 || job["state"] != "finished" || job["version"] != 1.0 || job["model"] != "mlp" {
		t.Fatalf("export job after restart: %d %v", code, job)
	}

	// DELETE stops it: the child exits.
	if code, out := call(t, "DELETE", d.url+"/api/deployments/"+depID, "", "", ""); code != 200 {
		t.Fatalf("delete deployment: %d %v", code, out)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("deployment process %d still alive", pid)
	}
	if _, err := http.Get(depURL + "/health"); err == nil {
		t.Fatal("deployment still answers")
	}
	code, out = call(t, "GET", d.url+"/api/deployments", "", "", "")
	if code != 200 || len(out["deployments"].([]any)) != 0 {
		t.Fatalf("after delete: %v", out)
	}

	// Deleting a version and a model.
	if code, out := call(t, "DELETE", d.url+"/api/models/cnn/versions/1", "", "", ""); code != 200 {
		t.Fatalf("delete version: %d %v", code, out)
	}
	if code, out := call(t, "DELETE", d.url+"/api/models/mlp", "", "", ""); code != 200 {
		t.Fatalf("delete model: %d %v", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "models", "mlp")); !os.IsNotExist(err) {
		t.Fatalf("model files left: %v", err)
	}
}
