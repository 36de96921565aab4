package httpapi

import (
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/internal/oasdoc"
)

// The facts of models like the reference and Triton sample models, for the
// served document's tests without loading any (the tests with real models
// and servers are in openapi_models_test.go).
var (
	mlpModel = docModel{Name: "digits_mlp", Version: "1",
		Inputs: []engine.TensorSpec{{Name: "input", DType: engine.Float32, Shape: []int64{-1, 64}}}, Batched: true,
		Outputs: []engine.TensorSpec{{Name: "logits", DType: engine.Float32, Shape: []int64{-1, 10}}}, Finite: true, NoNUL: true}
	cnnModel = docModel{Name: "digits_cnn", Version: "2",
		Inputs: []engine.TensorSpec{{Name: "input", DType: engine.Float32, Shape: []int64{-1, 1, 8, 8}}}, Batched: true,
		Outputs: []engine.TensorSpec{{Name: "logits", DType: engine.Float32, Shape: []int64{-1, 10}}}, Finite: true, NoNUL: true}
	simpleInputs = []engine.TensorSpec{{Name: "INPUT0", DType: engine.Int32, Shape: []int64{-1, 16}}, {Name: "INPUT1", DType: engine.Int32, Shape: []int64{-1, 16}}}
	simpleModel  = docModel{Name: "simple", Version: "1", Inputs: simpleInputs, Batched: true,
		Outputs: []engine.TensorSpec{{Name: "OUTPUT0", DType: engine.Int32, Shape: []int64{-1, 16}}, {Name: "OUTPUT1", DType: engine.Int32, Shape: []int64{-1, 16}}}, Finite: true, NoNUL: true}
	nobatchModel = docModel{Name: "nobatch", Version: "1",
		Inputs:  []engine.TensorSpec{{Name: "x", DType: engine.Float32, Shape: []int64{4}}},
		Outputs: []engine.TensorSpec{{Name: "y", DType: engine.Float32, Shape: []int64{2}}}, Finite: true, NoNUL: true}
	sequenceModel = docModel{Name: "simple_sequence", Version: "1", Stateful: true,
		Inputs: []engine.TensorSpec{{Name: "INPUT", DType: engine.Int32, Shape: []int64{-1, 1}}}, Batched: true, // its control inputs are the server's
		Outputs: []engine.TensorSpec{{Name: "OUTPUT", DType: engine.Int32, Shape: []int64{-1, 1}}}, Finite: true, NoNUL: true}
	stringModel = docModel{Name: "simple_string", Version: "3",
		Inputs: []engine.TensorSpec{{Name: "INPUT0", DType: engine.String, Shape: []int64{-1, 16}}}, Batched: true,
		Outputs: []engine.TensorSpec{{Name: "OUTPUT0", DType: engine.String, Shape: []int64{-1, 16}}}, Finite: true, NoNUL: true}
	// A TorchScript file without fw.json: neither dtypes nor shapes known.
	unknownModel = docModel{Name: "opaque", Version: "1",
		Inputs: []engine.TensorSpec{{Name: "input_0"}}, Batched: true,
		Outputs: []engine.TensorSpec{{Name: "output_0"}}, Finite: true}
	mixedModel = docModel{Name: "mixed", Version: "1",
		Inputs: []engine.TensorSpec{{Name: "h", DType: engine.Float16, Shape: []int64{-1, 2, -1}}, {Name: "b", DType: engine.Bool, Shape: []int64{-1}}, {Name: "u", DType: engine.Uint64, Shape: []int64{-1, 3}}}, Batched: true,
		Outputs: []engine.TensorSpec{{Name: "o", DType: engine.BFloat16, Shape: []int64{-1, 2}}}, Finite: true}
)

// servedTestDocuments are the documents served for several sets of models.
func servedTestDocuments(t testing.TB) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for name, c := range map[string]struct {
		models   []docModel
		onDemand bool
	}{
		"served one model":     {models: []docModel{mlpModel}},
		"served repository":    {models: []docModel{cnnModel, mlpModel, mixedModel, nobatchModel, unknownModel, simpleModel, sequenceModel, stringModel}},
		"served on demand":     {models: []docModel{cnnModel, mlpModel}, onDemand: true},
		"served stateful only": {models: []docModel{sequenceModel}},
	} {
		b, err := servedDocument(c.models, c.onDemand, 4096)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = b
	}
	return out
}

// openAPIDocuments are the static document and the served ones.
func openAPIDocuments(t testing.TB) map[string][]byte {
	docs := servedTestDocuments(t)
	docs["static"] = openAPIJSON
	return docs
}

func schemaAt(t *testing.T, doc map[string]any, ptr string) map[string]any {
	t.Helper()
	m, ok := oasdoc.Resolve(t, doc, oasdoc.Pointer(t, doc, ptr)).(map[string]any)
	if !ok {
		t.Fatalf("%s is not an object", ptr)
	}
	return m
}

func asJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// wantJSON fails unless got encodes as want does (both as JSON).
func wantJSON(t *testing.T, what string, got any, want string) {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad want: %v", what, err)
	}
	if asJSON(got) != asJSON(w) {
		t.Errorf("%s:\n got %s\nwant %s", what, asJSON(got), asJSON(w))
	}
}

// One model: the /predict row is the model's exact row, the names are
// enumerated, the V2 request is the model's.
func TestServedDocumentOneModel(t *testing.T) {
	doc := oasdoc.Parse(t, servedTestDocuments(t)["served one model"])
	f32 := `{"type": "number", "minimum": -3.4028235677973362e+38, "maximum": 3.4028235677973362e+38}`
	rows := `{"type": "array", "minItems": 1, "maxItems": 4096, "items": {"type": "array", "minItems": 64, "maxItems": 64, "items": ` + f32 + `}}`
	req := schemaAt(t, doc, "#/components/schemas/PredictRequest")
	props := req["properties"].(map[string]any)
	data := props["data"].(map[string]any)
	delete(data, "description")
	wantJSON(t, "PredictRequest data", data, rows)
	wantJSON(t, "PredictRequest oneOf", req["oneOf"], `[{"required": ["data"]}, {"required": ["inputs"]}]`)
	inputs := props["inputs"].(map[string]any)
	if inputs["additionalProperties"] != false || asJSON(inputs["required"]) != `["input"]` {
		t.Errorf("inputs: %s", asJSON(inputs))
	}
	item := schemaAt(t, doc, "#/components/schemas/BatchItem")
	if _, ok := item["properties"].(map[string]any)["id"]; !ok || asJSON(item["oneOf"]) != asJSON(req["oneOf"]) {
		t.Errorf("BatchItem: %s", asJSON(item))
	}
	for ptr, want := range map[string]string{
		"#/components/parameters/ModelName/schema":    `{"type": "string", "enum": ["digits_mlp"]}`,
		"#/components/parameters/ModelVersion/schema": `{"type": "string", "enum": ["1"]}`,
		"#/components/parameters/ModelQuery/schema":   `{"type": "string", "enum": ["digits_mlp"]}`,
		"#/components/parameters/ModelQuery/required": `false`,
		// Repository loads name any model of the repository.
		"#/components/parameters/RepositoryModelName/schema": `{"type": "string", "minLength": 1}`,
	} {
		wantJSON(t, ptr, oasdoc.Pointer(t, doc, ptr), want)
	}
	v2 := schemaAt(t, doc, "#/components/schemas/V2InferenceRequest")
	in := v2["properties"].(map[string]any)["inputs"].(map[string]any)
	if in["minItems"] != 1.0 || in["maxItems"] != 1.0 {
		t.Errorf("V2 inputs: %s", asJSON(in))
	}
	ip := in["items"].(map[string]any)["properties"].(map[string]any)
	wantJSON(t, "V2 input name", ip["name"], `{"const": "input"}`)
	wantJSON(t, "V2 input datatype", ip["datatype"], `{"const": "FP32"}`)
	shape := ip["shape"].(map[string]any)
	delete(shape, "description")
	delete(shape["prefixItems"].([]any)[0].(map[string]any), "description")
	wantJSON(t, "V2 input shape", shape, `{"type": "array", "minItems": 2, "maxItems": 2, "prefixItems": [{"type": "integer", "minimum": 1, "maximum": 4096}, {"type": "integer", "const": 64}]}`)
	wantJSON(t, "V2 FP32 data", schemaAt(t, doc, "#/components/schemas/V2TensorDataFP32")["items"],
		`{"anyOf": [`+f32+`, {"$ref": "#/components/schemas/V2TensorDataFP32"}]}`)
	out := v2["properties"].(map[string]any)["outputs"].(map[string]any)
	wantJSON(t, "V2 output name", out["items"].(map[string]any)["properties"].(map[string]any)["name"], `{"const": "logits"}`)
	// The binary extension's header is not a parameter of a JSON request.
	for _, p := range []string{"/v2/models/{model_name}/infer", "/v2/models/{model_name}/versions/{model_version}/infer"} {
		op := oasdoc.Pointer(t, doc, "#/paths/"+strings.ReplaceAll(p, "/", "~1")+"/post").(map[string]any)
		if strings.Contains(asJSON(op["parameters"]), "Inference-Header-Content-Length") {
			t.Errorf("%s documents Inference-Header-Content-Length as a parameter", p)
		}
	}
	if desc := oasdoc.Pointer(t, doc, "#/info/description").(string); !strings.HasPrefix(desc, "**Served models.**") || !strings.Contains(desc, "`digits_mlp` version 1") {
		t.Errorf("info.description does not list the model: %.200s", desc)
	}
}

// A repository: one alternative per model (the stateless ones on /predict),
// int, bool, uint64, float16, string and unknown inputs, a model without a
// batch axis, a stateful model's sequence parameters.
func TestServedDocumentRepository(t *testing.T) {
	doc := oasdoc.Parse(t, servedTestDocuments(t)["served repository"])
	wantJSON(t, "ModelName", oasdoc.Pointer(t, doc, "#/components/parameters/ModelName/schema/enum"),
		`["digits_cnn", "digits_mlp", "mixed", "nobatch", "opaque", "simple", "simple_sequence", "simple_string"]`)
	wantJSON(t, "ModelVersion", oasdoc.Pointer(t, doc, "#/components/parameters/ModelVersion/schema/enum"), `["1", "2", "3"]`)
	wantJSON(t, "ModelQuery required", oasdoc.Pointer(t, doc, "#/components/parameters/ModelQuery/required"), `true`)
	// /predict names the stateless models only.
	params := oasdoc.Pointer(t, doc, "#/paths/~1predict/post/parameters").([]any)
	model := params[0].(map[string]any)
	if model["name"] != "model" || model["required"] != true || slices.Contains(model["schema"].(map[string]any)["enum"].([]any), any("simple_sequence")) {
		t.Errorf("/predict model parameter: %s", asJSON(model))
	}
	alts := schemaAt(t, doc, "#/components/schemas/PredictRequest")["anyOf"].([]any)
	byTitle := map[string]map[string]any{}
	for _, a := range alts {
		m := a.(map[string]any)
		byTitle[m["title"].(string)] = m
	}
	if len(alts) != 7 || byTitle["simple_sequence (version 1)"] != nil {
		t.Fatalf("PredictRequest alternatives: %v", slices.Sorted(maps.Keys(byTitle)))
	}
	i32 := `{"type": "integer", "minimum": -2147483648, "maximum": 2147483647}`
	simple := byTitle["simple (version 1)"]
	wantJSON(t, "simple requires", simple["required"], `["inputs"]`)
	sp := simple["properties"].(map[string]any)
	wantJSON(t, "simple data", sp["data"].(map[string]any)["not"], `{}`)
	in0 := sp["inputs"].(map[string]any)["properties"].(map[string]any)["INPUT0"].(map[string]any)
	wantJSON(t, "simple INPUT0 row", in0["items"], `{"type": "array", "minItems": 16, "maxItems": 16, "items": `+i32+`}`)
	wantJSON(t, "simple inputs required", sp["inputs"].(map[string]any)["required"], `["INPUT0", "INPUT1"]`)
	// No batch axis: the whole tensor.
	nb := byTitle["nobatch (version 1)"]["properties"].(map[string]any)["data"].(map[string]any)
	delete(nb, "description")
	wantJSON(t, "nobatch data", nb, `{"type": "array", "minItems": 4, "maxItems": 4, "items": {"type": "number", "minimum": -3.4028235677973362e+38, "maximum": 3.4028235677973362e+38}}`)
	// Rows of a fixed multi-axis shape: nested or flat.
	cnn := byTitle["digits_cnn (version 2)"]["properties"].(map[string]any)["data"].(map[string]any)["anyOf"].([]any)
	if len(cnn) != 2 || cnn[1].(map[string]any)["items"].(map[string]any)["maxItems"] != 64.0 {
		t.Errorf("digits_cnn rows: %s", asJSON(cnn))
	}
	mixed := byTitle["mixed (version 1)"]["properties"].(map[string]any)["inputs"].(map[string]any)["properties"].(map[string]any)
	// [N] rows: a value each, or flat: an array of the one value.
	b := mixed["b"].(map[string]any)["anyOf"].([]any)
	wantJSON(t, "bool rows", b[0].(map[string]any)["items"], `{"type": ["boolean", "integer"], "minimum": 0, "maximum": 1}`)
	wantJSON(t, "bool flat rows", b[1].(map[string]any)["items"], `{"type": "array", "minItems": 1, "maxItems": 1, "items": {"type": ["boolean", "integer"], "minimum": 0, "maximum": 1}}`)
	wantJSON(t, "uint64 row", mixed["u"].(map[string]any)["items"], `{"type": "array", "minItems": 3, "maxItems": 3, "items": {"type": "integer", "minimum": 0, "maximum": 18446744073709551615}}`)
	wantJSON(t, "float16 row (a variable axis: no flat form)", mixed["h"].(map[string]any)["items"],
		`{"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "array", "minItems": 1, "items": {"type": "number", "minimum": -65519.99804687499, "maximum": 65519.99804687499}}}`)
	wantJSON(t, "string row", byTitle["simple_string (version 3)"]["properties"].(map[string]any)["data"].(map[string]any)["items"],
		`{"type": "array", "minItems": 16, "maxItems": 16, "items": {"type": "string", "pattern": "^[^\\u0000]*$"}}`)
	wantJSON(t, "unknown rows", byTitle["opaque (version 1)"]["properties"].(map[string]any)["data"], `{"$ref": "#/components/schemas/Rows"}`)

	// V2: each model's request; the stateful one's requires its sequence.
	v2 := map[string]map[string]any{}
	for _, a := range schemaAt(t, doc, "#/components/schemas/V2InferenceRequest")["anyOf"].([]any) {
		m := a.(map[string]any)
		v2[m["title"].(string)] = m
	}
	if len(v2) != 8 {
		t.Fatalf("V2InferenceRequest alternatives: %v", slices.Sorted(maps.Keys(v2)))
	}
	seq := v2["simple_sequence (version 1)"]
	wantJSON(t, "stateful requires", seq["required"], `["inputs", "parameters"]`)
	sp = seq["properties"].(map[string]any)["parameters"].(map[string]any)
	wantJSON(t, "stateful parameters require", sp["required"], `["sequence_id"]`)
	seqShape := seq["properties"].(map[string]any)["inputs"].(map[string]any)["items"].(map[string]any)["properties"].(map[string]any)["shape"].(map[string]any)
	if max := seqShape["prefixItems"].([]any)[0].(map[string]any)["maximum"]; max != 1.0 {
		t.Errorf("stateful batch axis maximum %v, want 1", max)
	}
	if _, ok := v2["simple (version 1)"]["properties"].(map[string]any)["parameters"].(map[string]any)["properties"].(map[string]any)["sequence_id"].(map[string]any)["not"]; !ok {
		t.Error("a stateless model's request allows sequence_id")
	}
	sin := v2["simple (version 1)"]["properties"].(map[string]any)["inputs"].(map[string]any)
	wantJSON(t, "simple V2 inputs count", []any{sin["minItems"], sin["maxItems"]}, `[2, 2]`)
	if n := len(sin["allOf"].([]any)); n != 2 {
		t.Errorf("simple V2 inputs: %d contains constraints, want 2", n)
	}
	unk := v2["opaque (version 1)"]["properties"].(map[string]any)["inputs"].(map[string]any)["items"].(map[string]any)["properties"].(map[string]any)
	wantJSON(t, "unknown datatype", unk["datatype"], `{"$ref": "#/components/schemas/V2Datatype"}`)
	nbs := v2["nobatch (version 1)"]["properties"].(map[string]any)["inputs"].(map[string]any)["items"].(map[string]any)["properties"].(map[string]any)["shape"].(map[string]any)
	wantJSON(t, "nobatch shape", nbs["prefixItems"], `[{"type": "integer", "const": 4}]`)
	// A variable axis is bounded by what the reader takes (int64; a larger
	// size is Triton's 500, as a negative one: schemathesis sent 3.4e35 as
	// a schema-valid size on a repository serving simple_identity).
	mh := v2["mixed (version 1)"]["properties"].(map[string]any)["inputs"].(map[string]any)["items"].(map[string]any)["anyOf"].([]any)[0].(map[string]any)
	wantJSON(t, "mixed h shape", mh["properties"].(map[string]any)["shape"].(map[string]any)["prefixItems"],
		`[{"type": "integer", "minimum": 1, "maximum": 4096, "description": "The batch size (rows)."}, {"type": "integer", "const": 2}, {"type": "integer", "minimum": 0, "maximum": 9223372036854775807}]`)
	// Classification is refused for a BF16 output.
	mo := v2["mixed (version 1)"]["properties"].(map[string]any)["outputs"].(map[string]any)["items"].(map[string]any)
	wantJSON(t, "bf16 classification", mo["properties"].(map[string]any)["parameters"].(map[string]any)["properties"].(map[string]any)["classification"].(map[string]any)["enum"], `[0, null]`)
}

// On demand, any repository model may be named: no enums, and the generic
// schemas stay beside the loaded models'.
func TestServedDocumentOnDemand(t *testing.T) {
	doc := oasdoc.Parse(t, servedTestDocuments(t)["served on demand"])
	wantJSON(t, "ModelName", oasdoc.Pointer(t, doc, "#/components/parameters/ModelName/schema"), `{"type": "string"}`)
	alts := schemaAt(t, doc, "#/components/schemas/PredictRequest")["anyOf"].([]any)
	if len(alts) != 3 || asJSON(alts[2]) != `{"$ref":"#/components/schemas/AnyModelPredictRequest"}` {
		t.Errorf("PredictRequest on demand: %s", asJSON(alts))
	}
	if !strings.Contains(oasdoc.Pointer(t, doc, "#/info/description").(string), "loaded by the request that names it") {
		t.Error("info.description does not say models load on demand")
	}
}

// The served document's examples are the served model's (the static ones
// are written for digits_cnn).
func TestServedDocumentExamples(t *testing.T) {
	doc := oasdoc.Parse(t, servedTestDocuments(t)["served one model"])
	ex := oasdoc.Pointer(t, doc, "#/paths/~1predict/post/requestBody/content/application~1json/example").(map[string]any)
	if rows := ex["data"].([]any); len(rows) != 1 || len(rows[0].([]any)) != 64 {
		t.Errorf("/predict example: %s", asJSON(ex))
	}
	line := oasdoc.Pointer(t, doc, "#/paths/~1predict~1batch/post/requestBody/content/application~1x-ndjson/example").(string)
	if !strings.HasPrefix(line, `{"data":[[0,0,`) || !strings.HasSuffix(line, "\n") {
		t.Errorf("NDJSON example %q", line)
	}
	v2 := oasdoc.Pointer(t, doc, "#/paths/~1v2~1models~1{model_name}~1infer/post/requestBody/content/application~1json/example").(map[string]any)
	in := v2["inputs"].([]any)[0].(map[string]any)
	if asJSON(in["shape"]) != "[1,64]" || len(in["data"].([]any)) != 64 || in["datatype"] != "FP32" {
		t.Errorf("V2 example: %s", asJSON(v2))
	}
	if _, ok := oasdoc.Pointer(t, doc, "#/components/schemas/BatchRequest").(map[string]any)["example"]; ok {
		t.Error("BatchRequest keeps digits_cnn's example")
	}
}

// floatLimit is the largest value that stays finite in each float dtype as
// the JSON decoders convert it: the next float64 up becomes Inf (refused).
func TestFloatLimit(t *testing.T) {
	for dt, want := range map[engine.DType]float64{
		engine.Float32: 3.4028235677973362e+38, // just below 2^128 - 2^103, which rounds to Inf
		engine.Float16: 65519.99804687499,      // rounds to float32 65519.996, the largest below 65520, which rounds to Inf
		engine.Float64: math.MaxFloat64,
	} {
		if got := floatLimit(dt); got != want {
			t.Errorf("%s: limit %v, want %v", dt, got, want)
		}
	}
	for _, dt := range []engine.DType{engine.Float32, engine.Float16, engine.BFloat16} {
		lim := floatLimit(dt)
		for _, c := range []struct {
			v      float64
			finite bool
		}{{lim, true}, {-lim, true}, {math.Nextafter(lim, math.Inf(1)), false}, {-math.Nextafter(lim, math.Inf(1)), false}} {
			var d [8]byte
			putFloat(d[:], 0, dt, c.v)
			got := engine.Tensor{DType: dt, Shape: []int64{1}, Data: d[:dt.Size()]}.At(0)
			if math.IsInf(got, 0) == c.finite {
				t.Errorf("%s: %v becomes %v", dt, c.v, got)
			}
		}
	}
}

// The cache key changes with every fact the document is built from.
func TestDocKey(t *testing.T) {
	base := docKey([]docModel{mlpModel}, false)
	changed := []docModel{mlpModel, mlpModel, mlpModel, mlpModel, mlpModel}
	changed[0].Version = "2"
	changed[1].Finite = false
	changed[2].Batched = false
	changed[3].Inputs = []engine.TensorSpec{{Name: "input", DType: engine.Float32, Shape: []int64{-1, 65}}}
	changed[4].Outputs = nil
	for i, m := range changed {
		if docKey([]docModel{m}, false) == base {
			t.Errorf("change %d does not change the key", i)
		}
	}
	if docKey([]docModel{mlpModel}, true) == base || docKey([]docModel{mlpModel}, false) != base {
		t.Error("the key does not follow onDemand, or is not stable")
	}
}
