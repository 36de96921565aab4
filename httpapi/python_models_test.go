package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/httpapi"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/modelrepo"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// pythonModels: "raises" fails in execute; "noin" takes no inputs.
var pythonModels = map[string][2]string{
	"raises": {`backend: "python"
input [{ name: "IN", data_type: TYPE_STRING, dims: [ 1 ] }]
output [{ name: "OUT", data_type: TYPE_STRING, dims: [ 1 ] }]
`, `
class TritonPythonModel:
    def execute(self, requests):
        lorem_ipsum
`},
	"noin": {`backend: "python"
output [{ name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] }]
`, `
import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([7], np.int32))]) for _ in requests]
`},
}

// startPython serves pythonModels from a repository over a real socket.
func startPython(t *testing.T) string {
	t.Helper()
	py := testmodels.NumpyPython(t)
	root := t.TempDir()
	for name, m := range pythonModels {
		if err := os.MkdirAll(filepath.Join(root, name, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name, "config.pbtxt"), []byte(m[0]), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name, "1", "model.py"), []byte(m[1]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	metrics := httpapi.NewMetrics(reg)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	repo, err := modelrepo.New(modelrepo.Config{Roots: []string{root}, Mode: modelrepo.ModeExplicit, LoadModels: []string{"*"},
		Batcher: batcher.DefaultConfig(), SkipWarmup: true, Python: py}, metrics, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := repo.Shutdown(context.Background(), time.Minute); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	if err := repo.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	base, cancel := context.WithCancel(context.Background())
	srv := httpapi.New(base, httpapi.Config{}, repo, metrics, log, reg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &fasthttp.Server{Handler: srv.Handler, StreamRequestBody: true, DisablePreParseMultipartForm: true}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Shutdown(); cancel() })
	return "http://" + ln.Addr().String()
}

func post(t *testing.T, url, body string) (int, string, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// An exception from a Python model's execute is its answer, in Triton's
// words: a V2 error over infer, an event over generate_stream (the model
// ran). A model without inputs takes a request without "inputs".
func TestPythonAnswersOverHTTP(t *testing.T) {
	url := startPython(t)
	const says = "Failed to process the request(s) for model 'raises', message: NameError: name 'lorem_ipsum' is not defined"
	code, _, body := post(t, url+"/v2/models/raises/infer", `{"inputs":[{"name":"IN","datatype":"BYTES","shape":[1],"data":["a"]}]}`)
	if code != 500 || !strings.Contains(body, says) || !strings.Contains(body, `"model_error"`) {
		t.Fatalf("infer: %d %s", code, body)
	}
	code, ct, body := post(t, url+"/v2/models/raises/generate_stream", `{"IN":"a"}`)
	if code != 500 || !strings.HasPrefix(ct, "text/event-stream") || !strings.HasPrefix(body, `data: {"error":"`+says) {
		t.Fatalf("generate_stream: %d %s %s", code, ct, body)
	}
	for _, req := range []string{`{}`, `{"inputs":[]}`} {
		code, _, body = post(t, url+"/v2/models/noin/infer", req)
		if code != 200 || !strings.Contains(body, `"data":[7]`) {
			t.Fatalf("a model without inputs, %s: %d %s", req, code, body)
		}
	}
}
