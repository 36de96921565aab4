package httpapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/modelrepo"
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
		testmodels.WritePython(t, root, name, m[0], m[1])
	}
	_, url := serveRepository(t, modelrepo.Config{Roots: []string{root}, Mode: modelrepo.ModeExplicit, LoadModels: []string{"*"},
		Batcher: batcher.DefaultConfig(), SkipWarmup: true, Python: py})
	return url
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
