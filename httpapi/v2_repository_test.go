package httpapi_test

// The repository extension and readiness with several models, as
// scripts/schemathesis.sh's serve-repo target checks them from outside.

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/httpapi"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/modelrepo"
)

// serveTritonModels serves a copy of the named models of the Triton
// sample repository (build/models/triton), explicit model control, load
// loaded at start.
func serveTritonModels(t *testing.T, models, load []string) string {
	t.Helper()
	src := filepath.Join(modelsDir(t), "triton")
	root := t.TempDir()
	for _, m := range models {
		if _, err := os.Stat(filepath.Join(src, m, "1", "model.onnx")); err != nil {
			testmodels.Require(t, "Triton sample repository missing in "+src+": run `make models`")
		}
		copyFile(t, filepath.Join(src, m, "config.pbtxt"), filepath.Join(root, m, "config.pbtxt"))
		copyFile(t, filepath.Join(src, m, "1", "model.onnx"), filepath.Join(root, m, "1", "model.onnx"))
	}
	_, url := serveRepository(t, modelrepo.Config{Roots: []string{root}, Mode: modelrepo.ModeExplicit, LoadModels: load,
		Engine: engine.Options{Threads: 1}, Batcher: batcher.DefaultConfig(), SkipWarmup: true})
	return url
}

// Load and unload refuse null where the protocol has an object or a typed
// parameter (Triton's JSON reader does; schemathesis found both taken as
// absent): the body, "parameters", "config" and "unload_dependents" are
// 400 invalid_json and nothing is loaded or unloaded; the forms the
// document describes are taken.
func TestV2RepositoryLoadUnloadRefuseNull(t *testing.T) {
	url := serveTritonModels(t, []string{"nobatch"}, []string{"nobatch"})
	load, unload := url+"/v2/repository/models/nobatch/load", url+"/v2/repository/models/nobatch/unload"
	ready := func(want int) {
		t.Helper()
		if r := do(t, "GET", url+"/v2/models/nobatch/ready", "", nil); r.status != want {
			t.Fatalf("nobatch ready: %d, want %d: %s", r.status, want, r.body)
		}
	}
	refused := func(target, body string) {
		t.Helper()
		r := do(t, "POST", target, "application/json", []byte(body))
		var e struct{ Error, Code string }
		if r.status != 400 || json.Unmarshal(r.body, &e) != nil || e.Code != httpapi.CodeInvalidJSON || e.Error == "" {
			t.Fatalf("%s %s: %d %s, want 400 %s", target, body, r.status, r.body, httpapi.CodeInvalidJSON)
		}
	}
	taken := func(target, body string) {
		t.Helper()
		if r := do(t, "POST", target, "application/json", []byte(body)); r.status != 200 || string(r.body) != "{}" {
			t.Fatalf("%s %s: %d %s", target, body, r.status, r.body)
		}
	}
	for _, body := range []string{`null`, ` null `, `{"parameters":null}`, `{"parameters":[]}`, `[]`} {
		refused(unload, body)
		refused(load, body)
	}
	refused(load, `{"parameters":{"config":null}}`)
	refused(unload, `{"parameters":{"unload_dependents":null}}`)
	refused(unload, `{"parameters":{"unload_dependents":"true"}}`)
	ready(200) // none of them unloaded it

	taken(unload, `{"parameters":{"unload_dependents":false}}`)
	ready(404)
	taken(load, ``)
	ready(200)
	for _, body := range []string{`{}`, `{"parameters":{}}`, `{"parameters":{"config":"{}"}}`, `{"parameters":{"config":{}}}`, `{"parameters":{"unload_dependents":null}}`} {
		taken(load, body)
	}
	ready(200)
	for _, body := range []string{``, `{}`, `{"parameters":{}}`, `{"parameters":{"unload_dependents":true}}`, `{"parameters":{"config":null}}`} {
		taken(unload, body) // (unloading an unloaded model is done too, as in Triton)
	}
	ready(404)
}

// With several models loaded, GET /health answers the repository form
// ({"status", "models", "uptime_s"}), which the document's HealthResponse
// describes as one of its forms (it gave only the one-model form).
func TestHealthSeveralModelsDocumented(t *testing.T) {
	url := serveTritonModels(t, []string{"nobatch", "simple"}, []string{"nobatch", "simple"})
	var got map[string]any
	for _, path := range []string{"/health", "/health/ready"} {
		r := do(t, "GET", url+path, "", nil)
		if r.status != 200 || json.Unmarshal(r.body, &got) != nil {
			t.Fatalf("GET %s: %d %s", path, r.status, r.body)
		}
		if got["status"] != "ok" || got["models"] != 2.0 {
			t.Fatalf("GET %s: %s, want status ok and 2 models", path, r.body)
		}
	}
	keys := slices.Sorted(maps.Keys(got))
	d := getOpenAPI(t, url)
	for _, alt := range d.at(t, "/components/schemas/HealthResponse/oneOf").([]any) {
		a := alt.(map[string]any)
		props := slices.Sorted(maps.Keys(a["properties"].(map[string]any)))
		var req []string
		for _, k := range a["required"].([]any) {
			req = append(req, k.(string))
		}
		slices.Sort(req)
		if slices.Equal(props, keys) && slices.Equal(req, keys) && a["additionalProperties"] == false {
			return
		}
	}
	t.Errorf("no form of HealthResponse has exactly the members %v: %s", keys, d.json(t, "/components/schemas/HealthResponse"))
}
