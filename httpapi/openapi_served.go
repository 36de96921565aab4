package httpapi

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/internal/docsite"
	"github.com/fw-serve/fw/serving"
)

// The document GET /openapi.json answers: openapi.json (generic: it
// describes any model fw can serve) completed with the models served at
// the time of the request, so that what it accepts is what the server
// accepts. It names the served models (enums of the model_name and
// model_version path parameters and of the model query parameter, and a
// list in info.description) and gives each model's request bodies: the
// /predict rows nested to the exact per-row shape with the element type of
// the input's dtype, its named inputs, the /predict/batch items, and the V2
// inference request's inputs (name, datatype, shape, element types) and
// outputs. It is rebuilt when the set of served models changes (a load or
// unload in a repository) and cached until then; with no model loaded it is
// openapi.json itself.

// docModel is what the served document says about one served model
// version: the facts its schemas are built from, and of which the cache
// key is made.
type docModel struct {
	Name, Version string
	// Stateful: the model has sequence batching; /predict refuses it.
	Stateful bool
	// Inputs are the inputs a client sends (Instance.Inputs: /predict and
	// V2 read them alike), Batched whether axis 0 counts rows (bounded by
	// --max-rows).
	Inputs  []engine.TensorSpec
	Batched bool
	// Outputs are the outputs a V2 request may name.
	Outputs []engine.TensorSpec
	// Finite: NaN and Inf inputs are refused (so are numbers beyond a
	// float dtype's range, which become Inf). NoNUL: BYTES elements cannot
	// hold NUL (ONNX Runtime's strings).
	Finite, NoNUL bool
}

// docModelOf reads the facts of inst that the served document uses.
func docModelOf(inst *serving.Instance) docModel {
	m := inst.Model
	return docModel{
		Name: inst.Name(), Version: inst.Version(), Stateful: inst.Sequences != nil,
		Inputs: inst.Inputs(), Batched: m.Batched(), Outputs: inst.Outputs(),
		Finite: !m.AllowsNonFinite(), NoNUL: m.Format.ONNX(),
	}
}

// docKey identifies what the served document is built from.
func docKey(models []docModel, onDemand bool) string {
	b := strconv.AppendBool(nil, onDemand)
	specs := func(ss []engine.TensorSpec) {
		b = strconv.AppendInt(append(b, '['), int64(len(ss)), 10)
		for _, s := range ss {
			b = strconv.AppendQuote(append(b, ' '), s.Name)
			b = strconv.AppendInt(append(b, ' '), int64(s.DType), 10)
			for _, d := range s.Shape {
				b = strconv.AppendInt(append(b, ','), d, 10)
			}
		}
		b = append(b, ']')
	}
	for _, m := range models {
		b = strconv.AppendQuote(append(b, '|'), m.Name)
		b = strconv.AppendQuote(b, m.Version)
		b = fmt.Appendf(b, "%t%t%t%t", m.Stateful, m.Batched, m.Finite, m.NoNUL)
		specs(m.Inputs)
		specs(m.Outputs)
	}
	return string(b)
}

// servedDocs caches the served document for the set of models it was built
// for (its docKey).
type servedDocs struct {
	mu   sync.Mutex
	key  string
	spec *docsite.Spec
}

// openAPISpec is the document to answer now: built for the models served
// now, or the cached one when they have not changed.
func (s *Server) openAPISpec() *docsite.Spec {
	var models []docModel
	for _, inst := range s.models.Loaded() {
		models = append(models, docModelOf(inst))
	}
	od, _ := s.models.(serving.OnDemand)
	onDemand := od != nil && od.LoadsOnDemand()
	if len(models) == 0 {
		return defaultDocs().Spec()
	}
	key := docKey(models, onDemand)
	s.docs.mu.Lock()
	defer s.docs.mu.Unlock()
	if s.docs.spec != nil && s.docs.key == key {
		return s.docs.spec
	}
	doc, err := servedDocument(models, onDemand, s.cfg.MaxRows)
	if err != nil { // cannot happen with the embedded document; still never a 500
		s.log.Error("building the served OpenAPI document; answering the generic one", "err", err)
		return defaultDocs().Spec()
	}
	s.docs.key, s.docs.spec = key, docsite.NewSpec(doc)
	return s.docs.spec
}

// servedDocument is openapi.json completed with models (sorted by name and
// version, at least one). onDemand: a request may name a repository model
// that is not loaded (it is then loaded), so names are not enumerated and
// the generic request schemas stay beside the loaded models' own.
// maxRows is --max-rows.
func servedDocument(models []docModel, onDemand bool, maxRows int) ([]byte, error) {
	v, err := decodeOrdered(openAPIJSON)
	if err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	doc, _ := v.(*object)
	comps := doc.obj("components")
	schemas := comps.obj("schemas")
	params := comps.obj("parameters")
	paths := doc.obj("paths")
	if schemas == nil || params == nil || paths == nil {
		return nil, fmt.Errorf("openapi.json lacks components or paths")
	}
	b := &docBuilder{schemas: schemas, maxRows: maxRows}

	var names, versions, statelessNames, statelessVersions []string
	var stateless []docModel
	for _, m := range models {
		names = appendNew(names, m.Name)
		versions = appendNew(versions, m.Version)
		if !m.Stateful {
			stateless = append(stateless, m)
			statelessNames = appendNew(statelessNames, m.Name)
			statelessVersions = appendNew(statelessVersions, m.Version)
		}
	}
	slices.SortFunc(versions, cmpVersion)
	slices.SortFunc(statelessVersions, cmpVersion)

	// info: the models this document describes.
	if info := doc.obj("info"); info != nil {
		desc, _ := info.get("description").(string)
		info.set("description", servedModelsText(models, onDemand)+"\n\n"+desc)
	}

	// The model names and versions the routes take.
	if !onDemand {
		setParamEnum(params.obj("ModelName"), names, "The name of a model this server serves now (GET /v2/repository/index lists them with their state).")
		setParamEnum(params.obj("ModelVersion"), versions, "A version of the model named, among those this server serves now.")
		setParamEnum(params.obj("ModelQuery"), names, "")
		setParamEnum(params.obj("VersionQuery"), versions, "")
		// Several models: the unprefixed routes need one named (400 without).
		if len(names) > 1 {
			params.obj("ModelQuery").set("required", true)
		}
	}

	// /predict, /predict/image and /predict/batch serve the stateless
	// models only (a stateful one answers 400: its requests name their
	// sequence, over V2).
	if len(stateless) > 0 {
		for _, p := range []string{"/predict", "/predict/image", "/predict/batch"} {
			op := paths.path(p, "post")
			if op == nil {
				continue
			}
			if !onDemand {
				predictModelParams(op, params, statelessNames, statelessVersions, len(names) > 1)
			}
		}
		b.predictSchemas(stateless, onDemand)
		for _, p := range []string{"/predict", "/predict/batch"} {
			if body := paths.path(p, "post", "requestBody"); body != nil {
				b.predictExamples(p, body, stateless[0])
			}
		}
	}

	// V2 inference: each model's request.
	b.v2Schemas(models, onDemand)
	b.generateSchemas(models, onDemand)
	for _, p := range []string{"/v2/models/{model_name}/infer", "/v2/models/{model_name}/versions/{model_version}/infer"} {
		if media := paths.path(p, "post", "requestBody", "content", "application/json"); media != nil {
			media.del("examples")
			media.del("example")
			if ex := v2Example(models[0]); ex != nil {
				media.set("example", ex)
			}
		}
	}
	for _, p := range []string{"/v2/models/{model_name}/generate", "/v2/models/{model_name}/versions/{model_version}/generate",
		"/v2/models/{model_name}/generate_stream", "/v2/models/{model_name}/versions/{model_version}/generate_stream"} {
		if media := paths.path(p, "post", "requestBody", "content", "application/json"); media != nil {
			media.del("example")
			if ex := generateExample(models[0]); ex != nil {
				media.set("example", ex)
			}
		}
	}
	return appendJSON(nil, doc), nil
}

// generateExample is a generate request for m: each input by name, its
// elements zeros filling one row (nil when a tensor is unknown or large).
func generateExample(m docModel) map[string]any {
	v2 := v2Example(m)
	if v2 == nil {
		return nil
	}
	ex := map[string]any{}
	for _, in := range v2["inputs"].([]any) {
		in := in.(map[string]any)
		ex[in["name"].(string)] = in["data"]
	}
	if m.Stateful {
		ex["sequence_id"], ex["sequence_start"], ex["sequence_end"] = 1, true, true
	}
	return ex
}

// appendNew appends s to list unless it is there already.
func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// cmpVersion orders version numbers numerically (others after, by text).
func cmpVersion(a, b string) int {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	switch {
	case errA == nil && errB == nil:
		return cmp.Compare(x, y)
	case errA == nil:
		return -1
	case errB == nil:
		return 1
	}
	return strings.Compare(a, b)
}

// maxListed bounds the models info.description lists one by one.
const maxListed = 20

// servedModelsText is the paragraph of info.description that lists the
// models the document describes.
func servedModelsText(models []docModel, onDemand bool) string {
	var sb strings.Builder
	sb.WriteString("**Served models.** This document describes the models this server serves now (it changes as models load and unload): ")
	for i, m := range models {
		if i == maxListed {
			fmt.Fprintf(&sb, "; and %d more (POST /v2/repository/index lists them)", len(models)-maxListed)
			break
		}
		if i > 0 {
			sb.WriteString("; ")
		}
		fmt.Fprintf(&sb, "`%s` version %s (inputs %s", m.Name, m.Version, describeSpecs(m.Inputs))
		if m.Stateful {
			sb.WriteString("; stateful: V2 inference only, with the sequence parameters")
		}
		sb.WriteString(")")
	}
	sb.WriteString(".")
	if onDemand {
		sb.WriteString(" Any other model of the repository may be named too: it is loaded by the request that names it (--max-resident-models or --max-resident-bytes), so model names are not enumerated and the generic request schemas stay beside these models' own.")
	}
	return sb.String()
}

// describeSpecs writes inputs as `name` DTYPE [N, 1, 8, 8], ...
func describeSpecs(specs []engine.TensorSpec) string {
	parts := make([]string, len(specs))
	for i, s := range specs {
		parts[i] = fmt.Sprintf("`%s` %s %s", s.Name, serving.DatatypeName(s.DType), engine.FormatShape(s.Shape))
	}
	return strings.Join(parts, ", ")
}

// setParamEnum narrows a parameter (an object of components.parameters)
// to values, its example the first; desc, when set, replaces its
// description.
func setParamEnum(p *object, values []string, desc string) {
	if p == nil || len(values) == 0 {
		return
	}
	p.set("schema", map[string]any{"type": "string", "enum": values})
	p.set("example", values[0])
	if desc != "" {
		p.set("description", desc)
	}
}

// predictModelParams gives a prediction route its own model and version
// query parameters, narrowed to the stateless models (names, versions).
// required: several models are served, so one must be named.
func predictModelParams(op, params *object, names, versions []string, required bool) {
	list, _ := op.get("parameters").([]any)
	for i, p := range list {
		po, ok := p.(*object)
		if !ok {
			continue
		}
		ref, _ := po.get("$ref").(string)
		var tmpl *object
		var values []string
		switch ref {
		case "#/components/parameters/ModelQuery":
			tmpl, values = params.obj("ModelQuery"), names
		case "#/components/parameters/VersionQuery":
			tmpl, values = params.obj("VersionQuery"), versions
		default:
			continue
		}
		if tmpl == nil {
			continue
		}
		q := newObject()
		for _, k := range tmpl.keys {
			q.set(k, tmpl.get(k))
		}
		desc, _ := q.get("description").(string)
		if ref == "#/components/parameters/ModelQuery" {
			q.set("required", required)
			desc += " Stateful models (sequence batching) are not served here: their requests go to POST /v2/models/{model_name}/infer."
		}
		q.set("description", desc)
		q.set("schema", map[string]any{"type": "string", "enum": values})
		q.set("example", values[0])
		list[i] = q
	}
}

// docBuilder adds the served models' schemas to components.schemas.
type docBuilder struct {
	schemas *object
	maxRows int // --max-rows: the bound on a batch axis
}

// predictSchemas replaces PredictRequest and BatchItem with the schemas of
// the stateless models' bodies: one model's, or one alternative per model
// (anyOf; the body must fit the model the `model` query parameter names).
func (b *docBuilder) predictSchemas(models []docModel, onDemand bool) {
	req, item := b.schemas.obj("PredictRequest"), b.schemas.obj("BatchItem")
	if req == nil || item == nil {
		return
	}
	if onDemand { // the generic schemas stay, for the models not loaded
		b.schemas.set("AnyModelPredictRequest", req)
		b.schemas.set("AnyModelBatchItem", item)
	}
	var reqs, items []any
	for _, m := range models {
		reqs = append(reqs, predictBody(m, b.maxRows, false))
		items = append(items, predictBody(m, b.maxRows, true))
	}
	if onDemand {
		reqs = append(reqs, map[string]any{"$ref": "#/components/schemas/AnyModelPredictRequest"})
		items = append(items, map[string]any{"$ref": "#/components/schemas/AnyModelBatchItem"})
	}
	b.schemas.set("PredictRequest", oneOrAnyOf("PredictRequest", reqs,
		"The body of POST /predict for the model the `model` query parameter names: one alternative per served model, each giving that model's inputs (names, per-row shapes, value types)."))
	b.schemas.set("BatchItem", oneOrAnyOf("BatchItem", items,
		"One item of POST /predict/batch (a /predict body plus an optional `id`) for the model the `model` query parameter names: one alternative per served model. An item that does not fit is answered by its own error entry, the others still run."))
	if br := b.schemas.obj("BatchRequest"); br != nil {
		br.del("example")
	}
}

// oneOrAnyOf is the only schema of alts, titled, or their anyOf.
func oneOrAnyOf(title string, alts []any, desc string) any {
	if len(alts) == 1 {
		if m, ok := alts[0].(map[string]any); ok {
			m["title"] = title
			return m
		}
		return alts[0]
	}
	return map[string]any{"title": title, "description": desc, "anyOf": alts}
}

// predictBody is model m's /predict body (withID: a /predict/batch item,
// with its optional id): {"data": ...} for a single-input model (or
// {"inputs": {name: ...}}), {"inputs": {...}} with every input for several.
// Unknown members are ignored by the server, so they are allowed.
func predictBody(m docModel, maxRows int, withID bool) map[string]any {
	named := map[string]any{}
	var required []string
	for _, s := range m.Inputs {
		named[s.Name] = predictValue(m, s, maxRows)
		required = append(required, s.Name)
	}
	inputs := map[string]any{
		"type": "object", "properties": named, "required": required, "additionalProperties": false,
		"description": "Every input of the model, by name; no other name.",
	}
	props := map[string]any{"inputs": inputs}
	body := map[string]any{"type": "object", "properties": props}
	title := fmt.Sprintf("%s (version %s)", m.Name, m.Version)
	if len(m.Inputs) == 1 {
		props["data"] = named[m.Inputs[0].Name]
		body["oneOf"] = []any{map[string]any{"required": []string{"data"}}, map[string]any{"required": []string{"inputs"}}}
		body["description"] = fmt.Sprintf("Model `%s` version %s: `{\"data\": ...}` or `{\"inputs\": {\"%s\": ...}}`, one of the two.", m.Name, m.Version, m.Inputs[0].Name)
	} else {
		props["data"] = map[string]any{"not": map[string]any{}, "description": "Not for a model of several inputs: send `inputs`."}
		body["required"] = []string{"inputs"}
		body["description"] = fmt.Sprintf("Model `%s` version %s takes %d inputs: `{\"inputs\": {...}}` with each of them.", m.Name, m.Version, len(m.Inputs))
	}
	if withID {
		props["id"] = map[string]any{"type": []string{"string", "number"}, "description": "Echoed in the item's response."}
	}
	body["title"] = title
	return body
}

// predictValue is the schema of one input's value in a /predict body: for
// a model with a batch axis, its rows (1 to --max-rows of them), each
// nested to the per-row shape or, when that shape is fixed, flat with as
// many values (every row in the same form: the first row's); for a model
// without one, the whole tensor nested to the input's shape.
func predictValue(m docModel, s engine.TensorSpec, maxRows int) map[string]any {
	dt := s.DType
	if dt == engine.Invalid {
		dt = engine.Float32 // what decodeRows reads when the model does not say
	}
	elem := elementSchema(dt, m.Finite, m.NoNUL)
	if !m.Batched {
		v := nested(s.Shape, elem)
		v["description"] = fmt.Sprintf("The whole %s tensor of shape %s (the model has no batch axis), nested to that shape.", serving.DatatypeName(dt), engine.FormatShape(s.Shape))
		return v
	}
	if len(s.Shape) == 0 { // unknown (a TorchScript file without fw.json)
		return map[string]any{"$ref": "#/components/schemas/Rows"}
	}
	row := s.Shape[1:]
	rows := func(items map[string]any) map[string]any {
		r := map[string]any{"type": "array", "minItems": 1, "items": items}
		if maxRows > 0 {
			r["maxItems"] = maxRows
		}
		return r
	}
	desc := fmt.Sprintf("Rows of input `%s` (%s, shape %s): 1 to %d (--max-rows) of them", s.Name, serving.DatatypeName(dt), engine.FormatShape(s.Shape), maxRows)
	nestedRows := rows(nested(row, elem))
	if n, fixed := fixedCount(row); fixed && len(row) != 1 {
		flat := rows(map[string]any{"type": "array", "minItems": n, "maxItems": n, "items": elem})
		nestedRows["title"], flat["title"] = "nested rows", "flat rows"
		return map[string]any{
			"description": desc + fmt.Sprintf(", each nested to the per-row shape %s or flat with its %d values, every row in the first row's form.", engine.FormatShape(row), n),
			"anyOf":       []any{nestedRows, flat},
		}
	}
	desc += fmt.Sprintf(", each nested to the per-row shape %s", engine.FormatShape(row))
	if _, fixed := fixedCount(row); !fixed {
		desc += " (every row with the first row's sizes on the variable axes)"
	}
	nestedRows["description"] = desc + "."
	return nestedRows
}

// fixedCount is the number of values of shape, and whether every axis is
// fixed.
func fixedCount(shape []int64) (int64, bool) {
	n := int64(1)
	for _, d := range shape {
		if d <= 0 || n > math.MaxInt32/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// nested is the schema of a value nested to shape (a fixed axis: exactly
// that many entries; a variable one: at least one) with elements elem.
func nested(shape []int64, elem map[string]any) map[string]any {
	if len(shape) == 0 {
		return clone(elem)
	}
	s := map[string]any{"type": "array", "items": nested(shape[1:], elem)}
	if d := shape[0]; d > 0 {
		s["minItems"], s["maxItems"] = d, d
	} else {
		s["minItems"] = 1
	}
	return s
}

func clone(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// elementSchema is the schema of one element of dt as the JSON decoders
// read it (rowWriter.put, v2Writer.put): a number within the dtype's range
// (finite: beyond a float type's range is Inf, refused), an integer within
// an integer type's, a boolean or 0/1 for BOOL, a string for BYTES (no NUL
// for ONNX Runtime: noNUL).
func elementSchema(dt engine.DType, finite, noNUL bool) map[string]any {
	switch {
	case dt == engine.String:
		s := map[string]any{"type": "string"}
		if noNUL {
			s["pattern"] = `^[^\u0000]*$`
		}
		return s
	case dt == engine.Bool:
		return map[string]any{"type": []string{"boolean", "integer"}, "minimum": 0, "maximum": 1}
	case dt.IsFloat():
		s := map[string]any{"type": "number"}
		if finite {
			lim := floatLimit(dt)
			s["minimum"], s["maximum"] = -lim, lim
		}
		return s
	}
	lo, hi := intRange(dt)
	return map[string]any{"type": "integer", "minimum": lo, "maximum": hi}
}

// intRange is the range of an integer dtype, as JSON numbers.
func intRange(dt engine.DType) (any, any) {
	switch dt {
	case engine.Int8:
		return math.MinInt8, math.MaxInt8
	case engine.Int16:
		return math.MinInt16, math.MaxInt16
	case engine.Int32:
		return math.MinInt32, math.MaxInt32
	case engine.Uint8:
		return 0, math.MaxUint8
	case engine.Uint16:
		return 0, math.MaxUint16
	case engine.Uint32:
		return 0, math.MaxUint32
	case engine.Uint64:
		return 0, uint64(math.MaxUint64)
	}
	return int64(math.MinInt64), int64(math.MaxInt64)
}

// floatLimit is the largest float64 that stays finite in dt as the JSON
// decoders convert it (putFloat: Go's float32 conversion, then fw's
// rounding to float16 or bfloat16), found by bisection over the float64
// bit patterns, which order positive floats.
func floatLimit(dt engine.DType) float64 {
	if dt == engine.Float64 {
		return math.MaxFloat64
	}
	finite := func(f float64) bool {
		var d [8]byte
		putFloat(d[:], 0, dt, f)
		switch dt {
		case engine.Float32:
			return uint32(d[0])|uint32(d[1])<<8|uint32(d[2])<<16|uint32(d[3]&0x7f)<<24 < 0x7f800000
		case engine.BFloat16:
			return uint16(d[0])|uint16(d[1]&0x7f)<<8 < 0x7f80
		}
		return uint16(d[0])|uint16(d[1]&0x7f)<<8 < 0x7c00 // float16
	}
	lo, hi := uint64(0), math.Float64bits(math.MaxFloat64) // finite(lo); hi may not be
	if finite(math.Float64frombits(hi)) {
		return math.MaxFloat64
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if finite(math.Float64frombits(mid)) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return math.Float64frombits(lo)
}

// v2Schemas replaces V2InferenceRequest with the served models' requests:
// one model's, or one alternative per model (anyOf; the request must fit
// the model the path names).
func (b *docBuilder) v2Schemas(models []docModel, onDemand bool) {
	req := b.schemas.obj("V2InferenceRequest")
	if req == nil {
		return
	}
	req.del("example")
	var alts []any
	for _, m := range models {
		alts = append(alts, b.v2Request(m))
	}
	if onDemand {
		b.schemas.set("AnyModelV2InferenceRequest", req)
		alts = append(alts, map[string]any{"$ref": "#/components/schemas/AnyModelV2InferenceRequest"})
	}
	b.schemas.set("V2InferenceRequest", oneOrAnyOf("V2InferenceRequest", alts,
		"The JSON inference request for the model the path names: one alternative per served model, each giving that model's inputs and outputs."))
}

// generateSchemas replaces V2GenerateRequest with the served models'
// generate requests: each model's inputs by name, every one required,
// beside id, parameters and request parameters.
func (b *docBuilder) generateSchemas(models []docModel, onDemand bool) {
	if b.schemas.obj("V2GenerateRequest") == nil || onDemand {
		return // a model loaded on demand may take any inputs: the generic schema stays
	}
	var alts []any
	for _, m := range models {
		props := map[string]any{
			"id":         map[string]any{"type": "string", "description": "Answered in the response when not empty."},
			"parameters": map[string]any{"type": "object", "description": "Request parameters (strings, numbers, booleans), handed to the model (a Python model's `request.parameters()`); a key naming an input is that input.", "additionalProperties": map[string]any{"type": []string{"string", "number", "boolean"}}, "propertyNames": noTritonPrefix()},
		}
		var names []string
		for _, in := range m.Inputs {
			if in.Name == "id" || in.Name == "parameters" {
				continue
			}
			names = append(names, in.Name)
			if in.DType == engine.Invalid {
				props[in.Name] = map[string]any{}
				continue
			}
			props[in.Name] = map[string]any{
				"description": fmt.Sprintf("Input `%s`: %s %s, one element or a list (flat or nested) of elements filling the shape.", in.Name, serving.DatatypeName(in.DType), engine.FormatShape(in.Shape)),
				"anyOf":       []any{elementSchema(in.DType, m.Finite, m.NoNUL), b.v2Data(in.DType, m.Finite, m.NoNUL)},
			}
		}
		alts = append(alts, map[string]any{
			"title": fmt.Sprintf("%s (version %s)", m.Name, m.Version), "type": "object", "required": names,
			"description":          fmt.Sprintf("A generate request for model `%s` version %s: %s by name.", m.Name, m.Version, describeSpecs(m.Inputs)),
			"properties":           props,
			"additionalProperties": map[string]any{"type": []string{"string", "number", "boolean"}, "description": "A request parameter, handed to the model."},
			"propertyNames":        noTritonPrefix(),
		})
	}
	b.schemas.set("V2GenerateRequest", oneOrAnyOf("V2GenerateRequest", alts,
		"The generate request for the model the path names: one alternative per served model, each giving that model's inputs by name."))
}

// v2Request is model m's JSON inference request: each of its inputs once
// (name, datatype, shape, data or a shared memory region), any of its
// outputs at most once, and the request parameters it takes.
func (b *docBuilder) v2Request(m docModel) map[string]any {
	var ins []any
	for _, s := range m.Inputs {
		ins = append(ins, b.v2InputSchema(m, s))
	}
	inputs := map[string]any{"type": "array", "minItems": len(ins), "maxItems": len(ins),
		"description": fmt.Sprintf("Each input of the model once, in any order: %s.", describeSpecs(m.Inputs))}
	once := func(specs []engine.TensorSpec, min int) []any {
		var all []any
		for _, s := range specs {
			all = append(all, map[string]any{
				"contains":    map[string]any{"type": "object", "required": []string{"name"}, "properties": map[string]any{"name": map[string]any{"const": s.Name}}},
				"minContains": min, "maxContains": 1,
			})
		}
		return all
	}
	switch len(ins) {
	case 0:
	case 1:
		inputs["items"] = ins[0]
	default:
		inputs["items"] = map[string]any{"anyOf": ins}
		inputs["allOf"] = once(m.Inputs, 1)
	}
	var outs []any
	var names []string
	for _, s := range m.Outputs {
		outs = append(outs, v2OutputSchema(s))
		names = append(names, s.Name)
	}
	outputs := map[string]any{"type": []string{"array", "null"}, "maxItems": len(outs),
		"description": fmt.Sprintf("The outputs to return, each at most once (default, or null: all): %s.", strings.Join(quoted(names), ", "))}
	switch len(outs) {
	case 0:
	case 1:
		outputs["items"] = outs[0]
	default:
		outputs["items"] = map[string]any{"anyOf": outs}
		outputs["allOf"] = once(m.Outputs, 0)
	}
	req := map[string]any{
		"title": fmt.Sprintf("%s (version %s)", m.Name, m.Version), "type": "object", "required": []string{"inputs"},
		"description": fmt.Sprintf("An inference request for model `%s` version %s.", m.Name, m.Version),
		"properties": map[string]any{
			"id":         map[string]any{"type": []string{"string", "null"}, "description": "Echoed in the response (null: none)."},
			"parameters": v2RequestParams(m.Stateful),
			"inputs":     inputs,
			"outputs":    outputs,
		},
	}
	if m.Stateful {
		req["required"] = []string{"inputs", "parameters"}
		req["description"] = fmt.Sprintf("An inference request for model `%s` version %s, a stateful model (sequence batching): every request names its sequence in `parameters`, and the first of a sequence has `sequence_start` true.", m.Name, m.Version)
	}
	return req
}

func quoted(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "`" + n + "`"
	}
	return out
}

// v2InputSchema is the schema of input s of m in a JSON inference request.
func (b *docBuilder) v2InputSchema(m docModel, s engine.TensorSpec) map[string]any {
	props := map[string]any{
		"name":       map[string]any{"const": s.Name},
		"parameters": v2InputParams(),
	}
	if s.DType == engine.Invalid { // the model does not say: any datatype
		props["datatype"] = map[string]any{"$ref": "#/components/schemas/V2Datatype"}
		props["data"] = map[string]any{"$ref": "#/components/schemas/V2TensorData"}
	} else {
		props["datatype"] = map[string]any{"const": serving.DatatypeName(s.DType)}
		props["data"] = b.v2Data(s.DType, m.Finite, m.NoNUL)
	}
	if len(s.Shape) == 0 && s.DType == engine.Invalid { // unknown rank
		props["shape"] = map[string]any{"type": "array", "items": map[string]any{"type": "integer", "minimum": 0, "maximum": maxShapeDim}}
	} else {
		props["shape"] = v2ShapeSchema(m, s, b.maxRows)
	}
	return map[string]any{
		"type": "object", "required": []string{"name", "shape", "datatype"}, "properties": props,
		"description": fmt.Sprintf("Input `%s`: %s %s. `data` holds as many elements as `shape` counts, flat or nested, in row-major order; or `parameters` name a registered shared memory region that holds them.",
			s.Name, serving.DatatypeName(s.DType), engine.FormatShape(s.Shape)),
		"oneOf": []any{
			map[string]any{"required": []string{"data"}},
			map[string]any{"required": []string{"parameters"}, "properties": map[string]any{"parameters": map[string]any{"type": "object", "required": []string{"shared_memory_region"}}}},
		},
	}
}

// maxShapeDim is the largest size of an axis a V2 request's shape may
// state: the reader takes shape elements as int64 (v2Int); a larger one is
// Triton's 500 "Unable to parse 'shape'", as for a negative one.
const maxShapeDim = int64(math.MaxInt64)

// v2ShapeSchema is the schema of input s's shape: its rank, its fixed axes'
// sizes, 1 to maxRows on a batch axis (1 for a stateful model), at
// least 1 on another variable axis of a model without a batch axis (an
// empty tensor is refused) and at least 0 on one of a batched model; at
// most maxShapeDim on any.
func v2ShapeSchema(m docModel, s engine.TensorSpec, maxRows int) map[string]any {
	if len(s.Shape) == 0 {
		return map[string]any{"type": "array", "maxItems": 0, "description": "A scalar: `[]`."}
	}
	items := make([]any, len(s.Shape))
	for i, d := range s.Shape {
		switch {
		case d > 0:
			items[i] = map[string]any{"type": "integer", "const": d}
		case i == 0 && m.Batched:
			ax := map[string]any{"type": "integer", "minimum": 1, "maximum": maxShapeDim, "description": "The batch size (rows)."}
			if m.Stateful {
				ax["maximum"] = 1
			} else if maxRows > 0 {
				ax["maximum"] = maxRows
			}
			items[i] = ax
		case m.Batched:
			items[i] = map[string]any{"type": "integer", "minimum": 0, "maximum": maxShapeDim}
		default:
			items[i] = map[string]any{"type": "integer", "minimum": 1, "maximum": maxShapeDim}
		}
	}
	return map[string]any{"type": "array", "minItems": len(items), "maxItems": len(items), "prefixItems": items,
		"description": fmt.Sprintf("The shape %s: N is the batch size, ? a variable size.", engine.FormatShape(s.Shape))}
}

// v2Data is a reference to the schema of a V2 "data" array of dt, nested
// to any depth, which it adds to the components once.
func (b *docBuilder) v2Data(dt engine.DType, finite, noNUL bool) map[string]any {
	name := "V2TensorData" + serving.DatatypeName(dt)
	if dt.IsFloat() && !finite {
		name += "NonFinite"
	}
	if dt == engine.String && !noNUL {
		name += "WithNUL"
	}
	ref := map[string]any{"$ref": "#/components/schemas/" + name}
	if b.schemas.get(name) == nil {
		b.schemas.set(name, map[string]any{
			"description": fmt.Sprintf("The elements of a %s tensor in row-major order, flat or nested.", serving.DatatypeName(dt)),
			"type":        "array",
			"items":       map[string]any{"anyOf": []any{elementSchema(dt, finite, noNUL), ref}},
		})
	}
	return ref
}

// v2Params are the typed members of a V2 "parameters" object: any other
// member is one the server does not read. null is read as no parameters,
// and a member that is null as absent (typed members are nullable).
func v2Params(desc string, props map[string]any) map[string]any {
	return map[string]any{"type": []string{"object", "null"}, "description": desc, "properties": props,
		"additionalProperties": map[string]any{"description": "A parameter fw does not read (the protocol's are strings, numbers and booleans)."}}
}

// shmParams adds the shared memory parameters of an input or output to p
// (a v2Params): shared_memory_region, and with it (only then are they read)
// shared_memory_byte_size and shared_memory_offset.
func shmParams(p map[string]any) {
	props := p["properties"].(map[string]any)
	props["shared_memory_region"] = map[string]any{"type": []string{"string", "null"}, "description": "A region registered with POST /v2/systemsharedmemory/region/{region_name}/register (400 otherwise), with `shared_memory_byte_size` (and `shared_memory_offset`)."}
	props["shared_memory_byte_size"] = map[string]any{"description": "The bytes of the region used: an integer >= 0, with `shared_memory_region` (read only with it)."}
	props["shared_memory_offset"] = map[string]any{"description": "Where in the region they begin: an integer >= 0 (default 0), with `shared_memory_region` (read only with it)."}
	p["if"] = map[string]any{"required": []string{"shared_memory_region"}, "properties": map[string]any{"shared_memory_region": map[string]any{"type": "string"}}}
	p["then"] = map[string]any{"required": []string{"shared_memory_byte_size"}, "properties": map[string]any{
		"shared_memory_byte_size": map[string]any{"type": "integer", "minimum": 0},
		"shared_memory_offset":    map[string]any{"type": []string{"integer", "null"}, "minimum": 0},
	}}
}

func v2InputParams() map[string]any {
	p := v2Params("Shared memory: `shared_memory_region` with `shared_memory_byte_size` (and `shared_memory_offset`) instead of `data`.", map[string]any{
		"binary_data_size": map[string]any{"type": "null", "description": "Only in the JSON part of an application/octet-stream body (the binary tensor data extension); a JSON body carries the data in `data`."},
	})
	shmParams(p)
	return p
}

func v2OutputSchema(s engine.TensorSpec) map[string]any {
	cls := map[string]any{"type": []string{"integer", "null"}, "minimum": 0, "description": "Return the N largest classes of each row instead of the tensor (0: the tensor)."}
	switch s.DType {
	case engine.Float16, engine.BFloat16, engine.Bool, engine.String:
		cls = map[string]any{"enum": []any{0, nil}, "description": fmt.Sprintf("%s outputs are not classified (400); 0 returns the tensor.", serving.DatatypeName(s.DType))}
	}
	params := v2Params("", map[string]any{
		"binary_data":    map[string]any{"type": []string{"boolean", "null"}, "description": "Return this output as binary data after the JSON."},
		"classification": cls,
	})
	shmParams(params)
	return map[string]any{"type": "object", "required": []string{"name"},
		"properties": map[string]any{"name": map[string]any{"const": s.Name}, "parameters": params}}
}

// v2RequestParams are the request's parameters: the sequence parameters
// (required for a stateful model, refused by any other), the queue's
// priority and timeout, and binary_data_output.
func v2RequestParams(stateful bool) map[string]any {
	props := map[string]any{
		"binary_data_output": map[string]any{"type": []string{"boolean", "null"}, "description": "Return every output as binary data after the JSON."},
		"priority": map[string]any{"type": "integer", "minimum": 0, "maximum": uint64(math.MaxUint64),
			"description": "The request's priority level, 1 the highest, for a model with dynamic_batching priority_levels; 0, or a level the model lacks, takes its default level. Other models ignore it."},
		"timeout": map[string]any{"type": "integer", "minimum": 0, "maximum": uint64(math.MaxUint64),
			"description": "Microseconds the request may wait in the queue, for a model whose queue policy has allow_timeout_override (it only shortens the policy's timeout); 0 none."},
	}
	if !stateful {
		for _, k := range []string{"sequence_id", "sequence_start", "sequence_end"} {
			props[k] = map[string]any{"not": map[string]any{}, "description": "Only for a stateful model (sequence batching); this model refuses it with 400."}
		}
		return modelParams(v2Params("", props))
	}
	props["sequence_id"] = map[string]any{"description": "The request's sequence: a number (1 and up) or a string (up to 128 characters), as the model's configuration takes.",
		"oneOf": []any{
			map[string]any{"type": "integer", "minimum": 1, "maximum": uint64(math.MaxUint64)},
			map[string]any{"type": "string", "minLength": 1, "maxLength": 128},
		}}
	props["sequence_start"] = map[string]any{"type": "boolean", "description": "The request begins its sequence."}
	props["sequence_end"] = map[string]any{"type": "boolean", "description": "The request ends its sequence."}
	p := modelParams(v2Params("", props))
	p["required"] = []string{"sequence_id"}
	return p
}

// modelParams makes p (a request's parameters) say what the server takes
// beside the parameters it reads: strings, numbers and booleans, handed to
// the model, under any name not starting with "triton_" (Triton's).
func modelParams(p map[string]any) map[string]any {
	p["additionalProperties"] = map[string]any{"type": []string{"string", "number", "boolean"},
		"description": "A request parameter, handed to the model (a Python model's `request.parameters()`)."}
	p["propertyNames"] = noTritonPrefix()
	return p
}

// noTritonPrefix refuses the names Triton reserves for itself.
func noTritonPrefix() map[string]any {
	return map[string]any{"not": map[string]any{"pattern": "^triton_"}}
}

// maxExampleElements bounds the tensors the served document gives as
// examples (a 3x224x224 image row would make it megabytes).
const maxExampleElements = 1024

// zeros is a value nested to shape (a variable axis: size 1) of zero
// elements of dt; ok is false beyond maxExampleElements.
func zeros(shape []int64, dt engine.DType) (any, bool) {
	n := int64(1)
	for _, d := range shape {
		n *= max(d, 1)
		if n > maxExampleElements {
			return nil, false
		}
	}
	var zero any = 0
	switch dt {
	case engine.String:
		zero = ""
	case engine.Bool:
		zero = false
	}
	var build func(shape []int64) any
	build = func(shape []int64) any {
		if len(shape) == 0 {
			return zero
		}
		out := make([]any, max(shape[0], 1))
		for i := range out {
			out[i] = build(shape[1:])
		}
		return out
	}
	return build(shape), true
}

// predictExample is m's /predict body with one row (or its whole tensors)
// of zeros; nil when a tensor is too large or its shape unknown.
func predictExample(m docModel) map[string]any {
	named := map[string]any{}
	for _, s := range m.Inputs {
		if len(s.Shape) == 0 && m.Batched {
			return nil
		}
		shape := s.Shape
		if m.Batched {
			shape = append([]int64{1}, s.Shape[1:]...)
		}
		v, ok := zeros(shape, s.DType)
		if !ok {
			return nil
		}
		named[s.Name] = v
	}
	if len(m.Inputs) == 1 {
		return map[string]any{"data": named[m.Inputs[0].Name]}
	}
	return map[string]any{"inputs": named}
}

// predictExamples replaces the examples of /predict's or /predict/batch's
// request body (written for digits_cnn) with one for model m.
func (b *docBuilder) predictExamples(path string, body *object, m docModel) {
	content := body.obj("content")
	if content == nil {
		return
	}
	ex := predictExample(m)
	for _, ct := range content.keys {
		media := content.obj(ct)
		if media == nil {
			continue
		}
		media.del("examples")
		media.del("example")
		if ex == nil {
			continue
		}
		switch {
		case path == "/predict":
			media.set("example", ex)
		case ct == "application/json":
			item := clone(ex)
			item["id"] = "a"
			media.set("example", map[string]any{"requests": []any{item}})
		default: // NDJSON: one item per line
			item := clone(ex)
			item["id"] = "a"
			media.set("example", string(appendJSON(nil, item))+"\n")
		}
	}
}

// v2Example is an inference request for m with zeros; nil when a tensor
// is too large or its shape or datatype unknown.
func v2Example(m docModel) map[string]any {
	var inputs []any
	for _, s := range m.Inputs {
		if s.DType == engine.Invalid {
			return nil
		}
		shape := make([]int64, len(s.Shape))
		n := int64(1)
		for i, d := range s.Shape {
			shape[i] = max(d, 1)
			n *= shape[i]
		}
		if n > maxExampleElements {
			return nil
		}
		flat, _ := zeros([]int64{n}, s.DType)
		inputs = append(inputs, map[string]any{"name": s.Name, "shape": shape, "datatype": serving.DatatypeName(s.DType), "data": flat})
	}
	ex := map[string]any{"inputs": inputs}
	if m.Stateful {
		ex["parameters"] = map[string]any{"sequence_id": 1, "sequence_start": true, "sequence_end": true}
	}
	return ex
}
