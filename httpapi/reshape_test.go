package httpapi

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fw-serve/fw/internal/oasdoc"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/serving"
)

// A model whose configuration reshapes its input (Triton's `reshape`:
// digits_mlp's [64] sent as dims [8, 8]) takes /predict and /predict/batch
// rows in the configured dims, as V2 and GET /model give them, and the
// served document describes those.
func TestPredictReshapedInput(t *testing.T) {
	ts := startModel(t, filepath.Join(testmodels.Dir(t), "digits_mlp.onnx"), Config{}, func(inst *serving.Instance) {
		r, err := serving.NewReshape(inst.Model, true, []serving.ReshapeTensor{{Index: 0, Dims: []int64{8, 8}, Model: []int64{64}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		inst.Reshape = r
	})
	row := make([][]float64, 8)
	for i := range row {
		row[i] = make([]float64, 8)
	}
	flat := make([]float64, 64)
	post := func(path string, body any) (int, string) {
		b, _ := json.Marshal(body)
		resp, err := http.Post(ts.url+path, "application/json", strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp.StatusCode, out.String()
	}
	for name, body := range map[string]any{
		"nested rows": map[string]any{"data": []any{row, row}},
		"flat rows":   map[string]any{"data": []any{flat}},
		"by name":     map[string]any{"inputs": map[string]any{"input": []any{row}}},
	} {
		if code, b := post("/predict", body); code != 200 {
			t.Errorf("/predict %s: %d %s", name, code, b)
		}
	}
	code, b := post("/predict/batch", map[string]any{"requests": []any{map[string]any{"data": []any{row}}}})
	if code != 200 || strings.Contains(b, `"error"`) {
		t.Errorf("/predict/batch: %d %s", code, b)
	}
	if code, b := post("/predict", map[string]any{"data": []any{[]any{flat[:8]}}}); code != 422 {
		t.Errorf("/predict with a row of 8 values: %d %s", code, b)
	}

	resp, err := http.Get(ts.url + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	doc := oasdoc.Parse(t, raw)
	data := oasdoc.Pointer(t, doc, "#/components/schemas/PredictRequest/properties/data").(map[string]any)
	nested := data["anyOf"].([]any)[0].(map[string]any)["items"].(map[string]any) // [nested, flat]
	if nested["minItems"] != 8.0 || nested["items"].(map[string]any)["maxItems"] != 8.0 {
		t.Errorf("the document's row is not [8, 8]: %s", asJSON(nested))
	}
}
