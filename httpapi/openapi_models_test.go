package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/httpapi"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/modelrepo"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// openAPIDoc is a served /openapi.json, its numbers kept exact.
type openAPIDoc struct {
	raw  []byte
	etag string
	doc  map[string]any
}

func getOpenAPI(t *testing.T, url string) openAPIDoc {
	t.Helper()
	r := do(t, "GET", url+"/openapi.json", "", nil)
	if r.status != 200 {
		t.Fatalf("GET /openapi.json: %d %s", r.status, r.body)
	}
	d := json.NewDecoder(bytes.NewReader(r.body))
	d.UseNumber()
	var doc map[string]any
	if err := d.Decode(&doc); err != nil {
		t.Fatalf("/openapi.json does not parse: %v", err)
	}
	if v, _ := doc["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		t.Fatalf("openapi %q", v)
	}
	return openAPIDoc{raw: r.body, etag: r.header.Get("ETag"), doc: doc}
}

// at follows a JSON pointer ("/components/schemas/X") in the document,
// following $refs on the way.
func (d openAPIDoc) at(t *testing.T, ptr string) any {
	t.Helper()
	var cur any = d.doc
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		for range 8 { // $ref chain
			m, ok := cur.(map[string]any)
			ref, isRef := m["$ref"].(string)
			if !ok || !isRef {
				break
			}
			cur = d.at(t, strings.TrimPrefix(ref, "#"))
		}
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				t.Fatalf("%s: no %q", ptr, tok)
			}
			cur = v
		case []any:
			var i int
			if err := json.Unmarshal([]byte(tok), &i); err != nil || i >= len(c) {
				t.Fatalf("%s: no index %q", ptr, tok)
			}
			cur = c[i]
		default:
			t.Fatalf("%s: %q is inside a %T", ptr, tok, cur)
		}
	}
	return cur
}

func (d openAPIDoc) json(t *testing.T, ptr string) string {
	t.Helper()
	b, err := json.Marshal(d.at(t, ptr))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// predictAlternatives are the served models' /predict bodies by title.
func (d openAPIDoc) predictAlternatives(t *testing.T) map[string]map[string]any {
	t.Helper()
	req := d.at(t, "/components/schemas/PredictRequest").(map[string]any)
	alts, ok := req["anyOf"].([]any)
	if !ok {
		alts = []any{req}
	}
	out := map[string]map[string]any{}
	for _, a := range alts {
		m := a.(map[string]any)
		desc, _ := m["description"].(string)
		name := strings.TrimPrefix(desc, "Model `")
		name = name[:strings.IndexByte(name, '`')]
		out[name] = m
	}
	return out
}

const f32Element = `{"maximum":3.4028235677973362e+38,"minimum":-3.4028235677973362e+38,"type":"number"}`

// One model: the served document gives digits_mlp's rows of 64 floats, and
// the body it gives as the example is answered.
func TestServedOpenAPIOneModel(t *testing.T) {
	ts := startServer(t, filepath.Join(modelsDir(t), "digits_mlp.onnx"), httpapi.Config{MaxRows: 100}, batcher.Config{})
	d := getOpenAPI(t, ts.url)
	rows := `{"items":{"items":` + f32Element + `,"maxItems":64,"minItems":64,"type":"array"},"maxItems":100,"minItems":1,"type":"array"}`
	data := d.at(t, "/components/schemas/PredictRequest/properties/data").(map[string]any)
	delete(data, "description")
	if got, _ := json.Marshal(data); string(got) != rows {
		t.Errorf("digits_mlp rows:\n got %s\nwant %s", got, rows)
	}
	for ptr, want := range map[string]string{
		"/components/parameters/ModelName/schema/enum":                                       `["digits_mlp"]`,
		"/components/parameters/ModelVersion/schema/enum":                                    `["1"]`,
		"/components/schemas/PredictRequest/properties/inputs/required":                      `["input"]`,
		"/components/schemas/PredictRequest/properties/inputs/additionalProperties":          `false`,
		"/components/schemas/V2InferenceRequest/properties/inputs/items/properties/name":     `{"const":"input"}`,
		"/components/schemas/V2InferenceRequest/properties/inputs/items/properties/datatype": `{"const":"FP32"}`,
	} {
		if got := d.json(t, ptr); got != want {
			t.Errorf("%s = %s, want %s", ptr, got, want)
		}
	}
	ex, _ := json.Marshal(d.at(t, "/paths/~1predict/post/requestBody/content/application~1json/example"))
	if r := do(t, "POST", ts.url+"/predict", "application/json", ex); r.status != 200 {
		t.Errorf("the document's /predict example: %d %s", r.status, r.body)
	}
	ex, _ = json.Marshal(d.at(t, "/paths/~1v2~1models~1{model_name}~1infer/post/requestBody/content/application~1json/example"))
	if r := do(t, "POST", ts.url+"/v2/models/digits_mlp/infer", "application/json", ex); r.status != 200 {
		t.Errorf("the document's V2 example: %d %s", r.status, r.body)
	}
	// Cached: the same document, and its ETag answers 304.
	if again := getOpenAPI(t, ts.url); !bytes.Equal(again.raw, d.raw) || again.etag != d.etag || d.etag == "" {
		t.Error("a second GET /openapi.json differs")
	}
	if r := do(t, "GET", ts.url+"/openapi.json", "", nil, "If-None-Match", d.etag); r.status != 304 {
		t.Errorf("If-None-Match: %d", r.status)
	}
}

// An int64 input: integers within int64's range, not numbers.
func TestServedOpenAPIIntModel(t *testing.T) {
	ts := startServer(t, filepath.Join(modelsDir(t), "textcls.onnx"), httpapi.Config{}, batcher.Config{})
	d := getOpenAPI(t, ts.url)
	spec := ts.m.Inputs()[0]
	if spec.DType != engine.Int64 {
		t.Fatalf("textcls input is %s, the test expects int64", spec.DType)
	}
	data := d.json(t, "/components/schemas/PredictRequest/properties/data")
	want := `{"maximum":9223372036854775807,"minimum":-9223372036854775808,"type":"integer"}`
	if !strings.Contains(data, `"items":`+want) {
		t.Errorf("textcls rows do not hold int64 integers: %s", data)
	}
	if got := d.json(t, "/components/schemas/V2TensorDataINT64/items/anyOf/0"); got != want {
		t.Errorf("INT64 data elements: %s", got)
	}
}

// copyFile copies src to dst, making dst's directory.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// serveRepository starts the repository cfg describes and serves it over
// HTTP on a real socket; its base URL.
func serveRepository(t *testing.T, cfg modelrepo.Config) (*modelrepo.Repository, string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	metrics := httpapi.NewMetrics(reg)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	repo, err := modelrepo.New(cfg, metrics, log)
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
	return repo, "http://" + ln.Addr().String()
}

// A repository of two models, one loaded and unloaded at run time: the
// served document follows what is served.
func TestServedOpenAPIRepository(t *testing.T) {
	dir := modelsDir(t)
	nobatch := filepath.Join(dir, "triton", "nobatch")
	if _, err := os.Stat(filepath.Join(nobatch, "1", "model.onnx")); err != nil {
		testmodels.Require(t, "Triton sample repository missing in "+filepath.Dir(nobatch)+": run `make models`")
	}
	root := t.TempDir()
	copyFile(t, filepath.Join(dir, "digits_mlp.onnx"), filepath.Join(root, "digits_mlp", "1", "model.onnx"))
	copyFile(t, filepath.Join(dir, "textcls.onnx"), filepath.Join(root, "textcls", "1", "model.onnx"))
	copyFile(t, filepath.Join(nobatch, "config.pbtxt"), filepath.Join(root, "nobatch", "config.pbtxt"))
	copyFile(t, filepath.Join(nobatch, "1", "model.onnx"), filepath.Join(root, "nobatch", "1", "model.onnx"))

	repo, url := serveRepository(t, modelrepo.Config{Roots: []string{root}, Mode: modelrepo.ModeExplicit, LoadModels: []string{"digits_mlp", "textcls"},
		Engine: engine.Options{Threads: 1}, Batcher: batcher.DefaultConfig(), SkipWarmup: true})

	d := getOpenAPI(t, url)
	if got := d.json(t, "/components/parameters/ModelName/schema/enum"); got != `["digits_mlp","textcls"]` {
		t.Errorf("model names %s", got)
	}
	if got := d.json(t, "/components/parameters/ModelQuery/required"); got != "true" {
		t.Errorf("with two models /predict needs ?model: required %s", got)
	}
	alts := d.predictAlternatives(t)
	if len(alts) != 2 || alts["digits_mlp"] == nil || alts["textcls"] == nil {
		t.Fatalf("PredictRequest alternatives %v", slices.Sorted(maps.Keys(alts)))
	}
	mlp, _ := json.Marshal(alts["digits_mlp"]["properties"].(map[string]any)["data"].(map[string]any)["items"])
	if want := `{"items":` + f32Element + `,"maxItems":64,"minItems":64,"type":"array"}`; string(mlp) != want {
		t.Errorf("digits_mlp row %s, want %s", mlp, want)
	}
	if tc, _ := json.Marshal(alts["textcls"]); !strings.Contains(string(tc), `"type":"integer"`) {
		t.Errorf("textcls rows are not integers: %s", tc)
	}
	// Each model answers the body its alternative describes, named by ?model.
	for name := range alts {
		inst, err := repo.Get(name, "")
		if err != nil {
			t.Fatal(err)
		}
		rows, _ := testRows(t, inst.Model)
		if r := do(t, "POST", url+"/predict?model="+name, "application/json", predictBody(rows[:1])); r.status != 200 {
			t.Errorf("/predict?model=%s: %d %s", name, r.status, r.body)
		}
	}

	// Loaded at run time: it appears, with its own input.
	if r := do(t, "POST", url+"/v2/repository/models/nobatch/load", "application/json", []byte(`{}`)); r.status != 200 {
		t.Fatalf("load nobatch: %d %s", r.status, r.body)
	}
	loaded := getOpenAPI(t, url)
	if got := loaded.json(t, "/components/parameters/ModelName/schema/enum"); got != `["digits_mlp","nobatch","textcls"]` {
		t.Errorf("after the load: model names %s", got)
	}
	if loaded.etag == d.etag {
		t.Error("the ETag did not change with the document")
	}
	nb := loaded.predictAlternatives(t)["nobatch"]
	if nb == nil {
		t.Fatal("nobatch is not among the /predict bodies after its load")
	}
	x := nb["properties"].(map[string]any)["data"].(map[string]any)
	delete(x, "description")
	if got, _ := json.Marshal(x); string(got) != `{"items":`+f32Element+`,"maxItems":4,"minItems":4,"type":"array"}` {
		t.Errorf("nobatch (no batch axis) takes its whole [4] tensor: %s", got)
	}
	if !strings.Contains(loaded.at(t, "/info/description").(string), "`nobatch` version 1") {
		t.Error("info.description does not list nobatch")
	}

	// Unloaded: it is gone again.
	if r := do(t, "POST", url+"/v2/repository/models/nobatch/unload", "application/json", []byte(`{}`)); r.status != 200 {
		t.Fatalf("unload nobatch: %d %s", r.status, r.body)
	}
	unloaded := getOpenAPI(t, url)
	if got := unloaded.json(t, "/components/parameters/ModelName/schema/enum"); got != `["digits_mlp","textcls"]` {
		t.Errorf("after the unload: model names %s", got)
	}
	if _, ok := unloaded.predictAlternatives(t)["nobatch"]; ok || strings.Contains(string(unloaded.raw), "`nobatch`") {
		t.Error("nobatch is still described after its unload")
	}
}
