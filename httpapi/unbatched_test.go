package httpapi_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/httpapi"
	"github.com/fw-serve/fw/internal/testmodels"
)

// /predict on a model without a batch axis: "data" (or each "inputs"
// entry) is the whole input tensor, nested as its full shape, one per
// request, and "predictions" the whole first output. Rows the model cannot
// take are a 422 that says so, never a 500 from the engine.
func TestPredictUnbatched(t *testing.T) {
	f := func(ts *testServer, path, body string, status int, want string) {
		t.Helper()
		r := do(t, "POST", ts.url+path, "application/json", []byte(body))
		if r.status != status || !strings.Contains(string(r.body), want) {
			t.Errorf("POST %s %s: %d %s\nwant %d with %s", path, body, r.status, r.body, status, want)
		}
	}
	t.Run("nobatch", func(t *testing.T) {
		ts := startServer(t, testmodels.Triton(t, "nobatch"), httpapi.Config{MaxRows: 2}, batcher.Config{})
		// y = x @ [[1,0],[0,1],[1,1],[2,-1]]; --max-rows counts no rows here.
		f(ts, "/predict", `{"data": [1, 2, 3, 4]}`, 200, `"predictions":[12,1]`)
		f(ts, "/predict", `{"inputs": {"x": [0.5, 0, 0, 1]}}`, 200, `"predictions":[2.5,-1]`)
		f(ts, "/predict", `{"data": [[1, 2, 3, 4]]}`, 422, `input \"x\": this model has no batch axis and takes one whole tensor of shape [4] per request; the data is nested as [1, 4]`)
		f(ts, "/predict", `{"data": [1, 2, 3]}`, 422, `nested as [3]`)
		f(ts, "/predict", `{"data": 4}`, 422, `got a JSON number`)
		f(ts, "/predict/batch", `{"requests": [{"id": "a", "data": [1, 2, 3, 4]}, {"id": "b", "data": [[1, 2, 3, 4]]}, {"id": "c", "data": [0, 0, 0, 1]}]}`,
			200, `{"responses":[{"id":"a","predictions":[12,1]},{"id":"b","error":`)
		f(ts, "/predict/batch", `{"requests": [{"id": "c", "data": [0, 0, 0, 1]}]}`, 200, `{"responses":[{"id":"c","predictions":[2,-1]}]}`)
	})
	t.Run("fixed_batch1", func(t *testing.T) {
		ts := startServer(t, testmodels.Triton(t, "fixed_batch1"), httpapi.Config{}, batcher.Config{})
		row := make([]string, 16)
		twice := make([]string, 16)
		for i := range row {
			row[i] = fmt.Sprint(i)
			twice[i] = fmt.Sprint(2 * i)
		}
		one := "[" + strings.Join(row, ",") + "]"
		f(ts, "/predict", `{"data": [`+one+`]}`, 200, `"predictions":[[`+strings.Join(twice, ",")+`]]`)
		f(ts, "/predict", `{"data": [`+one+`,`+one+`]}`, 422, `takes one whole tensor of shape [1, 16] per request; the data is nested as [2, 16] (send each tensor as its own request, or as an item of /predict/batch)`)
		f(ts, "/predict", `{"data": `+one+`}`, 422, `nested as [16]`)
		items := make([]string, 5)
		for i := range items {
			items[i] = fmt.Sprintf(`{"id": %d, "data": [%s]}`, i, one)
		}
		r := do(t, "POST", ts.url+"/predict/batch", "application/json", []byte(`{"requests": [`+strings.Join(items, ",")+`]}`))
		if r.status != 200 || strings.Count(string(r.body), `"predictions":[[`+strings.Join(twice, ",")+`]]`) != 5 {
			t.Errorf("/predict/batch of 5 items: %d %s", r.status, r.body)
		}
	})
	t.Run("densenet_onnx image", func(t *testing.T) {
		ts := startServer(t, testmodels.Triton(t, "densenet_onnx"), httpapi.Config{}, batcher.Config{})
		jpg, err := os.ReadFile(filepath.Join(modelsDir(t), "samples", "rgb_224.jpg"))
		if err != nil {
			t.Fatal(err)
		}
		const q = "/predict/image?height=224&width=224&channels=3&top_k=2"
		r := do(t, "POST", ts.url+q, "image/jpeg", jpg)
		if v := r.json(t); r.status != 200 || len(v["predictions"].([]any)) != 1 {
			t.Fatalf("one image: %d %s", r.status, r.body)
		}
		body, ct := multipartBody(t, map[string][]byte{"a.jpg": jpg, "b.jpg": jpg})
		r = do(t, "POST", ts.url+q, ct, body)
		if r.status != 422 || !strings.Contains(string(r.body), `this model has no batch axis: its input \"data_0\" has shape [1, 3, 224, 224], so it takes exactly 1 image(s) per request; this request has 2`) {
			t.Fatalf("two images: %d %s", r.status, r.body)
		}
	})
}
