package mlflow

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fw-serve/fw/dashboard/registry"
	"github.com/fw-serve/fw/internal/testmodels"
)

// withRegistry gives e's server a real registry over e's store.
func (e *env) withRegistry() *registry.Registry {
	e.t.Helper()
	reg, err := registry.Open(filepath.Join(e.t.TempDir(), "exp"), e.st, nil, "")
	if err != nil {
		e.t.Fatal(err)
	}
	e.srv.SetRegistry(reg)
	return reg
}

func TestModelRegistry(t *testing.T) { forEach(t, Config{}, testModelRegistry) }

// MLflow's registry calls as its client sends them, over fw's registry:
// models, versions (from a run), tags, aliases, stages, search, paging,
// rename and delete; and what fw's registry then holds.
func testModelRegistry(t *testing.T, e *env) {
	reg := e.withRegistry()
	run := e.newRun("0")
	rm := e.ok("POST", api+"registered-models/create", map[string]any{"name": "digits", "description": "d", "tags": []any{map[string]any{"key": "team", "value": "vision"}}})["registered_model"].(map[string]any)
	if rm["name"] != "digits" || rm["description"] != "d" || len(rm["tags"].([]any)) != 1 || len(rm["latest_versions"].([]any)) != 0 {
		t.Fatalf("created %v", rm)
	}
	msg := e.fails(400, codeAlreadyExists, "POST", api+"registered-models/create", map[string]any{"name": "digits"})
	if want := "Registered Model (name=digits) already exists."; len(msg) < len(want) || msg[:len(want)] != want {
		t.Fatalf("message %q", msg)
	}
	e.fails(400, codeInvalidParameter, "POST", api+"registered-models/create", map[string]any{"name": ""})
	for _, bad := range []string{"../x", "a\x00b", "new\nline", "tab\tx", "\u202eevil", strings.Repeat("m", 65)} {
		e.fails(400, codeInvalidParameter, "POST", api+"registered-models/create", map[string]any{"name": bad})
	}

	// Versions from a run's model, numbered 1, 2, 3.
	for i := 1; i <= 3; i++ {
		mv := e.ok("POST", api+"model-versions/create", map[string]any{"name": "digits", "source": "runs:/" + run + "/model", "run_id": run, "tags": []any{map[string]any{"key": "i", "value": fmt.Sprint(i)}}})["model_version"].(map[string]any)
		if mv["version"] != fmt.Sprint(i) || mv["status"] != "READY" || mv["current_stage"] != "None" || mv["run_id"] != run || mv["source"] != "runs:/"+run+"/model" {
			t.Fatalf("version %d: %v", i, mv)
		}
	}
	e.fails(404, codeNotFound, "POST", api+"model-versions/create", map[string]any{"name": "nope", "source": "runs:/" + run + "/model"})
	e.fails(404, codeNotFound, "POST", api+"model-versions/create", map[string]any{"name": "digits", "source": "runs:/x/model", "run_id": "nope"})
	for _, src := range []string{"/etc/passwd", "file:///etc", "../x", "relative/path"} {
		if m := e.fails(400, codeInvalidParameter, "POST", api+"model-versions/create", map[string]any{"name": "digits", "source": src, "run_id": run}); m[:36] != "To use a local path as a model versi" {
			t.Fatalf("%s: %q", src, m)
		}
	}
	e.fails(404, codeNotFound, "GET", api+"model-versions/get?name=digits&version=9", nil)

	// Metadata, tags, aliases, stages.
	e.ok("PATCH", api+"model-versions/update", map[string]any{"name": "digits", "version": "2", "description": "second"})
	e.ok("POST", api+"model-versions/set-tag", map[string]any{"name": "digits", "version": "2", "key": "k", "value": "v"})
	e.ok("DELETE", api+"model-versions/delete-tag", map[string]any{"name": "digits", "version": "2", "key": "i"})
	e.fails(404, codeNotFound, "DELETE", api+"model-versions/delete-tag", map[string]any{"name": "digits", "version": "2", "key": "i"})
	e.ok("POST", api+"registered-models/alias", map[string]any{"name": "digits", "alias": "champion", "version": "2"})
	e.fails(404, codeNotFound, "POST", api+"registered-models/alias", map[string]any{"name": "digits", "alias": "x", "version": "7"})
	mv := e.ok("GET", api+"registered-models/alias?name=digits&alias=champion", nil)["model_version"].(map[string]any)
	if mv["version"] != "2" || mv["description"] != "second" || fmt.Sprint(mv["aliases"]) != "[champion]" || fmt.Sprint(mv["tags"]) != "[map[key:k value:v]]" {
		t.Fatalf("by alias: %v", mv)
	}
	e.ok("POST", api+"model-versions/transition-stage", map[string]any{"name": "digits", "version": "1", "stage": "Production"})
	e.ok("POST", api+"model-versions/transition-stage", map[string]any{"name": "digits", "version": "3", "stage": "production", "archive_existing_versions": true})
	e.fails(400, codeInvalidParameter, "POST", api+"model-versions/transition-stage", map[string]any{"name": "digits", "version": "3", "stage": "Live"})
	latest := e.ok("POST", api+"registered-models/get-latest-versions", map[string]any{"name": "digits"})["model_versions"].([]any)
	stages := map[string]string{}
	for _, x := range latest {
		v := x.(map[string]any)
		stages[v["current_stage"].(string)] = v["version"].(string)
	}
	if fmt.Sprint(stages) != "map[Archived:1 None:2 Production:3]" {
		t.Fatalf("latest versions by stage: %v", stages)
	}
	uri := e.ok("GET", api+"model-versions/get-download-uri?name=digits&version=3", nil)["artifact_uri"]
	if uri != "runs:/"+run+"/model" {
		t.Fatalf("download uri %v", uri)
	}

	// Search with MLflow's filters and paging.
	e.ok("POST", api+"registered-models/create", map[string]any{"name": "other"})
	page := e.ok("GET", api+"registered-models/search?max_results=1", nil)
	if got := page["registered_models"].([]any); len(got) != 1 || got[0].(map[string]any)["name"] != "digits" || page["next_page_token"] == nil {
		t.Fatalf("page 1: %v", page)
	}
	page = e.ok("GET", api+"registered-models/search?max_results=1&page_token="+page["next_page_token"].(string), nil)
	if got := page["registered_models"].([]any); len(got) != 1 || got[0].(map[string]any)["name"] != "other" || page["next_page_token"] != nil {
		t.Fatalf("page 2: %v", page)
	}
	// MLflow's client adds this clause to leave out prompts: a model without the tag passes.
	if got := e.ok("GET", api+"registered-models/search?filter="+q("name LIKE 'dig%' AND tag.`mlflow.prompt.is_prompt` != 'true'"), nil)["registered_models"].([]any); len(got) != 1 {
		t.Fatalf("LIKE: %v", got)
	}
	vs := e.ok("GET", api+"model-versions/search?filter="+q("name = 'digits' AND run_id = '"+run+"'")+"&order_by="+q("version DESC"), nil)["model_versions"].([]any)
	if len(vs) != 3 || vs[0].(map[string]any)["version"] != "3" {
		t.Fatalf("version search: %v", vs)
	}
	e.fails(400, codeInvalidParameter, "GET", api+"model-versions/search?filter="+q("colour = 'red'"), nil)

	// fw's registry holds the same model: MLflow versions are references, not servable.
	m, err := reg.Get(context.Background(), "digits")
	if err != nil || len(m.Versions) != 3 || m.Versions[0].Format != registry.FormatMLflow || m.Versions[0].Servable() || m.Aliases["champion"] != 2 || m.Tags["team"] != "vision" {
		t.Fatalf("fw's registry: %+v %v", m, err)
	}

	// Rename, delete a version, delete the model.
	e.ok("POST", api+"registered-models/rename", map[string]any{"name": "digits", "new_name": "digits2"})
	e.fails(404, codeNotFound, "GET", api+"registered-models/get?name=digits", nil)
	e.fails(400, codeAlreadyExists, "POST", api+"registered-models/rename", map[string]any{"name": "digits2", "new_name": "other"})
	e.ok("DELETE", api+"model-versions/delete", map[string]any{"name": "digits2", "version": "2"})
	got := e.ok("GET", api+"registered-models/get?name=digits2", nil)["registered_model"].(map[string]any)
	if len(got["aliases"].([]any)) != 0 {
		t.Fatalf("the deleted version's alias stayed: %v", got)
	}
	e.ok("DELETE", api+"registered-models/delete-tag", map[string]any{"name": "digits2", "key": "team"})
	e.ok("PATCH", api+"registered-models/update", map[string]any{"name": "digits2", "description": "renamed"})
	e.ok("DELETE", api+"registered-models/delete", map[string]any{"name": "digits2"})
	e.fails(404, codeNotFound, "GET", api+"registered-models/get?name=digits2", nil)
	e.fails(405, codeBadRequest, "PUT", api+"registered-models/alias", nil)
}

// q escapes a query-string value.
func q(s string) string { return url.QueryEscape(s) }

// A version of a logged model: its run comes from the model, and the model's
// tag mlflow.modelVersions lists its versions as MLflow's server writes it.
func TestModelVersionOfALoggedModel(t *testing.T) {
	e := newEnv(t, Config{})
	e.withRegistry()
	run := e.newRun("0")
	lm := e.ok("POST", api+"logged-models", map[string]any{"experiment_id": "0", "name": "net", "source_run_id": run})["model"].(map[string]any)["info"].(map[string]any)
	id := lm["model_id"].(string)
	e.ok("POST", api+"registered-models/create", map[string]any{"name": "model"})
	for i := 1; i <= 2; i++ {
		mv := e.ok("POST", api+"model-versions/create", map[string]any{"name": "model", "source": lm["artifact_uri"], "model_id": id})["model_version"].(map[string]any)
		if mv["run_id"] != run || mv["model_id"] != id {
			t.Fatalf("version %d: %v", i, mv)
		}
	}
	got := e.ok("GET", api+"logged-models/"+id, nil)["model"].(map[string]any)["info"].(map[string]any)
	var tag string
	for _, x := range got["tags"].([]any) {
		if kv := x.(map[string]any); kv["key"] == "mlflow.modelVersions" {
			tag = kv["value"].(string)
		}
	}
	if tag != `[{"name": "model", "version": 1}, {"name": "model", "version": 2}]` {
		t.Fatalf("mlflow.modelVersions = %q", tag)
	}
	e.fails(404, codeNotFound, "POST", api+"model-versions/create", map[string]any{"name": "model", "source": "models:/m-nope", "model_id": "m-00000000000000000000000000000000"})
}

// TestAbsoluteSource: MLflow's refusal of sources that climb (relative
// segments, encoded or not, NUL, a path that is not clean and absolute).
func TestAbsoluteSource(t *testing.T) {
	for src, want := range map[string]bool{
		"mlflow-artifacts:/models":                                true,
		"mlflow-artifacts:/models///":                             true,
		"mlflow-artifacts:/models/foo///bar":                      true,
		"mlflow-artifacts://host:9000/models/artifact/..../":      true,
		"runs:/abc/model":                                         true,
		"models:/m-123":                                           true,
		"s3://bucket/key/model":                                   true,
		"mlflow-artifacts://host:9000/models/../../../":           false,
		"http://host:9000/models/../../../":                       false,
		"mlflow-artifacts://host:9000/models/..%2f..%2fartifacts": false,
		"mlflow-artifacts://host:9000/models/..%252f..%252fx":     false,
		"mlflow-artifacts://host:9000/models/artifact%00":         false,
		"dbfs:/run/artifacts/a%3f/../../..":                       false,
		"s3://bucket":                                             false,
		"s3://bucket/a/./b":                                       false,
		"s3://b/a/%252e%252e/x?%zz":                               false, // an invalid escape does not stop the decoding
		"s3://b/f%zz":                                             true,
	} {
		if got := absoluteSource(src); got != want {
			t.Errorf("absoluteSource(%q) = %v, want %v", src, got, want)
		}
	}
}

// zipOf is a zip archive of files (name: content).
func zipOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	for name, content := range files {
		w, err := z.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, content); err != nil {
			t.Fatal(err)
		}
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// What torch.export.save writes (the markers fw reads), and an
// AOTInductor package, which has the same markers and compiled code.
var (
	program     = map[string]string{"model/archive_format": "pt2", "model/models/model.json": "{}", "model/data/weights/weight_0": "w"}
	aoti        = map[string]string{"model/archive_format": "pt2", "model/models/model.json": "{}", "model/data/aotinductor/model/m.so": ""}
	torchFlavor = "flavors:\n  pytorch:\n    model_data: data\n    pytorch_version: 2.13.0\n"
)

// A version whose source is an MLflow model with the ONNX flavor (its
// MLmodel's flavors.onnx.data) is registered as that ONNX file, which fw
// serves as it is; MLflow's client still sees the source it gave. Any
// other flavor, or an ONNX file that is not one, stays a reference.
func TestONNXFlavorVersion(t *testing.T) {
	e := newEnv(t, Config{})
	reg := e.withRegistry()
	ctx := context.Background()
	exp := e.ok("POST", api+"experiments/create", map[string]any{"name": "onnx-models"})["experiment_id"].(string)
	model := testmodels.Identity(t, t.TempDir(), "model.onnx", testmodels.ONNXFloat, "batch", 4)
	onnxBytes, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	logged := func(mlmodel string, files map[string][]byte) string {
		id := e.ok("POST", api+"logged-models", map[string]any{"experiment_id": exp, "name": "m"})["model"].(map[string]any)["info"].(map[string]any)["model_id"].(string)
		base := "/api/2.0/mlflow-artifacts/artifacts/" + exp + "/models/" + id + "/artifacts/"
		e.ok("PUT", base+"MLmodel", mlmodel)
		for name, b := range files {
			e.ok("PUT", base+name, b)
		}
		return id
	}
	const onnxFlavor = "flavors:\n  onnx:\n    data: model.onnx\n    onnx_version: 1.17.0\n  python_function:\n    data: model.onnx\n    loader_module: mlflow.onnx\n"
	e.ok("POST", api+"registered-models/create", map[string]any{"name": "onnx-flavor"})
	for i, c := range []struct {
		mlmodel string
		files   map[string][]byte
		format  string
	}{
		{onnxFlavor, map[string][]byte{"model.onnx": onnxBytes}, "onnx"},
		{"flavors:\n  pytorch:\n    model_data: data\n", map[string][]byte{"data/model.pth": []byte("pickle")}, registry.FormatMLflow},
		{onnxFlavor, map[string][]byte{"model.onnx": []byte("not onnx")}, registry.FormatMLflow},
		{"flavors:\n  onnx:\n    data: ../../outside.onnx\n", nil, registry.FormatMLflow},
		{"not: [yaml", nil, registry.FormatMLflow},
		// PyTorch's flavor saved as a torch.export program: stored as that
		// program (exported from the Models page); an AOTInductor package,
		// a file that is no archive and a model_data outside the model stay
		// references.
		{torchFlavor, map[string][]byte{"data/model.pt2": zipOf(t, program)}, registry.FormatProgram},
		{torchFlavor, map[string][]byte{"data/model.pt2": zipOf(t, aoti)}, registry.FormatMLflow},
		{torchFlavor, map[string][]byte{"data/model.pt2": []byte("not a zip")}, registry.FormatMLflow},
		{"flavors:\n  pytorch:\n    model_data: ../data\n", map[string][]byte{"data/model.pt2": zipOf(t, program)}, registry.FormatMLflow},
	} {
		id := logged(c.mlmodel, c.files)
		mv := e.ok("POST", api+"model-versions/create", map[string]any{"name": "onnx-flavor", "source": "models:/" + id, "model_id": id, "description": "d"})["model_version"].(map[string]any)
		if mv["source"] != "models:/"+id || mv["version"] != fmt.Sprint(i+1) || mv["description"] != "d" || mv["model_id"] != id {
			t.Fatalf("case %d: MLflow's answer %v", i, mv)
		}
		m, err := reg.Get(ctx, "onnx-flavor")
		if err != nil {
			t.Fatal(err)
		}
		v := m.Versions[i]
		if v.Format != c.format {
			t.Fatalf("case %d: format %q, want %q", i, v.Format, c.format)
		}
		if c.format == "onnx" && (!v.Servable() || len(v.Inputs) != 1 || v.Inputs[0].Name != "INPUT0" || v.Source.URI != "models:/"+id || v.Description != "d") {
			t.Fatalf("case %d: the version %+v", i, v)
		}
		if c.format == registry.FormatProgram {
			if v.Servable() || !v.Exportable() || v.Source.URI != "models:/"+id || v.Description != "d" || v.Size != int64(len(c.files["data/model.pt2"])) {
				t.Fatalf("case %d: the version %+v", i, v)
			}
			f, err := reg.ModelFile(ctx, v)
			if err != nil || !registry.IsProgram(f) {
				t.Fatalf("case %d: the stored program %s: %v", i, f, err)
			}
		}
	}
	// A version of a model that does not exist is MLflow's 404, ONNX or not.
	id := logged(onnxFlavor, map[string][]byte{"model.onnx": onnxBytes})
	e.fails(404, codeNotFound, "POST", api+"model-versions/create", map[string]any{"name": "nope", "source": "models:/" + id})
}
