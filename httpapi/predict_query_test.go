package httpapi_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/httpapi"
)

// ?version without ?model picks that version of the one model served: a
// version not served is 404, as with ?model (the document enumerates it).
func TestPredictVersionQuery(t *testing.T) {
	ts := startServer(t, filepath.Join(modelsDir(t), "digits_mlp.onnx"), httpapi.Config{}, batcher.Config{})
	rows, _ := testRows(t, ts.m)
	body := predictBody(rows[:1])
	for target, want := range map[string]int{
		"/predict?version=1": 200, "/predict?version=2": 404, "/predict?version=x": 404,
		"/predict?model=digits_mlp&version=2": 404, "/model?version=7": 404, "/model?version=1": 200,
		"/model?version=": 400, "/predict?model=": 400, "/predict?model=digits_mlp&version=": 400, // empty: schemathesis sent ?version=
	} {
		method, b := "POST", body
		if strings.HasPrefix(target, "/model") {
			method, b = "GET", nil
		}
		r := do(t, method, ts.url+target, "application/json", b)
		if r.status != want {
			t.Errorf("%s %s: %d, want %d: %s", method, target, r.status, want, r.body)
		}
		if want == 404 && r.errCode(t) != "not_found" {
			t.Errorf("%s: code %q", target, r.errCode(t))
		}
	}
}
