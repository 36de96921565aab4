package httpapi

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/fw-serve/fw/engine"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// v2HeaderLength is the binary extension's header: the JSON part's length.
const v2HeaderLength = "Inference-Header-Content-Length"

// v2MaxDepth bounds the nesting of an input's "data" array.
const v2MaxDepth = 32

// v2Request is a parsed inference request: the inputs in the model's order
// and the outputs to return, in the order the response lists them.
type v2Request struct {
	id      []byte // the request's "id", JSON-encoded, or nil
	inputs  []engine.Tensor
	outputs []v2Output
}

type v2Output struct {
	index  int // into the model's outputs
	binary bool
}

// v2Get is v.Get(key) with JSON null read as absent.
func v2Get(v *fastjson.Value, key string) *fastjson.Value {
	x := v.Get(key)
	if x == nil || x.Type() == fastjson.TypeNull {
		return nil
	}
	return x
}

func badV2(msg string, args ...any) *APIError {
	return newError(400, CodeBadRequest, fmt.Sprintf(msg, args...), nil)
}

func invalidV2(details map[string]any, msg string, args ...any) *APIError {
	return newError(422, CodeInvalidInput, fmt.Sprintf(msg, args...), details)
}

func v2Names(specs []engine.TensorSpec) []string { return inputNames(specs) }

// parseV2Request reads an inference request: body is the whole request
// body; hdrLen is the Inference-Header-Content-Length header's value (nil
// when absent), the length of the JSON part, the binary tensor data
// following it. ins and outs are the model's input and output specs. p
// parses the JSON; the returned request does not alias it or body.
func parseV2Request(p *fastjson.Parser, body, hdrLen []byte, ins, outs []engine.TensorSpec) (*v2Request, *APIError) {
	jsonPart, bin := body, []byte(nil)
	if hdrLen != nil {
		n, err := strconv.ParseInt(strings.TrimSpace(string(hdrLen)), 10, 64)
		if err != nil || n <= 0 || n > int64(len(body)) {
			return nil, badV2("the %s header is %q; it must be the length in bytes of the JSON part of the body, between 1 and the body's %d bytes", v2HeaderLength, hdrLen, len(body))
		}
		jsonPart, bin = body[:n], body[n:]
	}
	v, err := p.ParseBytes(jsonPart)
	if err != nil {
		msg := "the inference request is not valid JSON: " + err.Error()
		if hdrLen == nil && len(body) > 0 {
			msg += fmt.Sprintf("; when the body carries binary tensor data, send the %s header with the JSON part's length", v2HeaderLength)
		}
		return nil, newError(400, CodeInvalidJSON, msg, nil)
	}
	if v.Type() != fastjson.TypeObject {
		return nil, badV2(`the inference request must be a JSON object such as {"inputs": [{"name": ..., "shape": [...], "datatype": "FP32", "data": [...]}]}`)
	}
	req := &v2Request{}
	if id := v2Get(v, "id"); id != nil {
		if id.Type() != fastjson.TypeString {
			return nil, badV2(`"id" must be a string, got %s`, id.Type())
		}
		req.id = id.MarshalTo(nil)
	}
	binaryDefault := false
	if params := v2Get(v, "parameters"); params != nil {
		if params.Type() != fastjson.TypeObject {
			return nil, badV2(`"parameters" must be an object, got %s`, params.Type())
		}
		if b := v2Get(params, "binary_data_output"); b != nil {
			if binaryDefault, err = b.Bool(); err != nil {
				return nil, badV2(`parameter "binary_data_output" must be true or false, got %s`, b.Type())
			}
		}
	}

	// Inputs.
	inArr := v2Get(v, "inputs")
	if inArr == nil {
		return nil, invalidV2(map[string]any{"expected_inputs": v2Names(ins)}, `the request has no "inputs"; this model takes %s`, v2Describe(ins))
	}
	items, err := inArr.Array()
	if err != nil {
		return nil, badV2(`"inputs" must be an array of tensors, got %s`, inArr.Type())
	}
	req.inputs = make([]engine.Tensor, len(ins))
	seen := make([]bool, len(ins))
	for k, it := range items {
		if it.Type() != fastjson.TypeObject {
			return nil, badV2(`inputs[%d] must be an object with "name", "shape", "datatype" and "data", got %s`, k, it.Type())
		}
		nameV := v2Get(it, "name")
		if nameV == nil || nameV.Type() != fastjson.TypeString {
			return nil, badV2(`inputs[%d] needs a "name" string`, k)
		}
		nameB, _ := nameV.StringBytes()
		idx := -1
		for i := range ins {
			if ins[i].Name == string(nameB) {
				idx = i
				break
			}
		}
		name := string(nameB)
		if idx < 0 {
			return nil, invalidV2(map[string]any{"input": name, "expected_inputs": v2Names(ins)}, "unknown input %q; this model takes %s", name, v2Describe(ins))
		}
		if seen[idx] {
			return nil, badV2("input %q is given twice", name)
		}
		seen[idx] = true
		spec := ins[idx]
		dtV := v2Get(it, "datatype")
		if dtV == nil || dtV.Type() != fastjson.TypeString {
			return nil, badV2(`input %q needs a "datatype" string such as %q`, name, v2DTypeName(v2SpecDType(spec)))
		}
		dtB, _ := dtV.StringBytes()
		dt := v2ParseDType(dtB)
		if dt == engine.Invalid {
			return nil, invalidV2(map[string]any{"input": name, "expected_datatype": v2DTypeName(spec.DType), "received_datatype": string(dtB)},
				"input %q: datatype %q is not supported; fw takes FP32, FP64, FP16, INT64, INT32, INT8, UINT8 and BOOL, and this input is %s", name, dtB, v2DTypeName(spec.DType))
		}
		if spec.DType != engine.Invalid && dt != spec.DType {
			return nil, invalidV2(map[string]any{"input": name, "expected_datatype": v2DTypeName(spec.DType), "received_datatype": string(dtB)},
				"input %q has datatype %s but this model takes %s; convert the data (for example numpy .astype(np.%s))", name, dtB, v2DTypeName(spec.DType), spec.DType)
		}
		shapeV := v2Get(it, "shape")
		if shapeV == nil {
			return nil, badV2(`input %q needs a "shape" array such as %s`, name, v2ShapeJSON(spec.Shape))
		}
		shapeA, err := shapeV.Array()
		if err != nil {
			return nil, badV2(`input %q: "shape" must be an array of non-negative integers, got %s`, name, shapeV.Type())
		}
		if len(shapeA) > v2MaxDepth {
			return nil, badV2("input %q: shape has %d axes; at most %d are accepted", name, len(shapeA), v2MaxDepth)
		}
		shape := make([]int64, len(shapeA))
		count, overflow, empty := int64(1), false, false
		for i, d := range shapeA {
			n, err := d.Int64()
			if err != nil || n < 0 {
				return nil, badV2(`input %q: "shape" must be an array of non-negative integers, got %s`, name, shapeV)
			}
			shape[i] = n
			switch {
			case n == 0:
				empty = true
			case !overflow && count > math.MaxInt64/8/n: // leaves room for 8-byte elements
				overflow = true
			default:
				count *= n
			}
		}
		if empty {
			count = 0
		} else if overflow {
			return nil, invalidV2(map[string]any{"input": name}, "input %q: shape %s is too large", name, v2ShapeJSON(shape))
		}
		var params *fastjson.Value
		if pv := v2Get(it, "parameters"); pv != nil {
			if pv.Type() != fastjson.TypeObject {
				return nil, badV2(`input %q: "parameters" must be an object, got %s`, name, pv.Type())
			}
			if v2Get(pv, "shared_memory_region") != nil {
				return nil, badV2("input %q: shared memory is not supported; send the data in the body", name)
			}
			params = v2Get(pv, "binary_data_size")
		}
		data := v2Get(it, "data")
		nbytes := count * int64(dt.Size())
		switch {
		case params != nil && data != nil:
			return nil, badV2(`input %q has both "data" and parameter "binary_data_size"; send one`, name)
		case params != nil:
			size, err := params.Int64()
			if err != nil || size < 0 {
				return nil, badV2(`input %q: parameter "binary_data_size" must be a non-negative integer, got %s`, name, params)
			}
			if hdrLen == nil {
				return nil, badV2("input %q declares binary_data_size %d but the request has no %s header saying where the JSON ends and the binary data begins", name, size, v2HeaderLength)
			}
			if size > int64(len(bin)) {
				return nil, badV2("input %q declares binary_data_size %d but only %d bytes of binary data remain after the JSON header and the inputs before it", name, size, len(bin))
			}
			if size != nbytes {
				return nil, invalidV2(map[string]any{"input": name, "expected_bytes": nbytes, "received_bytes": size},
					"input %q: shape %s of %s needs %d bytes of binary data, binary_data_size is %d", name, v2ShapeJSON(shape), dtB, nbytes, size)
			}
			t, err := engine.NewTensor(dt, shape)
			if err != nil {
				return nil, badV2("input %q: %v", name, err)
			}
			copy(t.Data, bin[:size])
			bin = bin[size:]
			req.inputs[idx] = t
		case data != nil:
			if data.Type() != fastjson.TypeArray {
				return nil, badV2(`input %q: "data" must be an array (flat or nested, in row-major order), got %s`, name, data.Type())
			}
			// Every element takes at least one byte of JSON: a larger shape
			// cannot match, and must not be allocated.
			if count > int64(len(jsonPart)) {
				n, _ := v2CountJSON(data, 0)
				return nil, invalidV2(map[string]any{"input": name, "expected_elements": count, "received_elements": n},
					"input %q: shape %s needs %d elements, \"data\" holds %d", name, v2ShapeJSON(shape), count, n)
			}
			t, err := engine.NewTensor(dt, shape)
			if err != nil {
				return nil, badV2("input %q: %v", name, err)
			}
			w := v2Writer{t: t, name: name}
			if aerr := w.walk(data, 0); aerr != nil {
				return nil, aerr
			}
			if int64(w.n) != count {
				return nil, invalidV2(map[string]any{"input": name, "expected_elements": count, "received_elements": w.n},
					"input %q: shape %s needs %d elements, \"data\" holds %d", name, v2ShapeJSON(shape), count, w.n)
			}
			req.inputs[idx] = t
		default:
			return nil, badV2(`input %q has neither "data" nor parameter "binary_data_size"`, name)
		}
	}
	for i, ok := range seen {
		if !ok {
			return nil, invalidV2(map[string]any{"input": ins[i].Name, "expected_inputs": v2Names(ins)}, "input %q is missing; this model takes %s", ins[i].Name, v2Describe(ins))
		}
	}
	if len(bin) > 0 {
		return nil, badV2("%d bytes of binary data follow the JSON header that no input claims; each binary input needs parameter \"binary_data_size\" and the sizes must add up to the body after the %s bytes of JSON", len(bin), v2HeaderLength)
	}

	// Outputs.
	outV := v2Get(v, "outputs")
	if outV == nil {
		req.outputs = make([]v2Output, len(outs))
		for i := range outs {
			req.outputs[i] = v2Output{index: i, binary: binaryDefault}
		}
		return req, nil
	}
	oitems, err := outV.Array()
	if err != nil {
		return nil, badV2(`"outputs" must be an array of {"name": ...}, got %s`, outV.Type())
	}
	used := make([]bool, len(outs))
	for k, it := range oitems {
		nameV := v2Get(it, "name")
		if it.Type() != fastjson.TypeObject || nameV == nil || nameV.Type() != fastjson.TypeString {
			return nil, badV2(`outputs[%d] must be an object with a "name" string`, k)
		}
		nameB, _ := nameV.StringBytes()
		idx := -1
		for i := range outs {
			if outs[i].Name == string(nameB) {
				idx = i
				break
			}
		}
		if idx < 0 {
			return nil, invalidV2(map[string]any{"output": string(nameB), "expected_outputs": v2Names(outs)}, "unknown output %q; this model's outputs are %s", nameB, v2Describe(outs))
		}
		if used[idx] {
			return nil, badV2("output %q is requested twice", nameB)
		}
		used[idx] = true
		o := v2Output{index: idx, binary: binaryDefault}
		if pv := v2Get(it, "parameters"); pv != nil {
			if pv.Type() != fastjson.TypeObject {
				return nil, badV2(`output %q: "parameters" must be an object, got %s`, nameB, pv.Type())
			}
			if b := v2Get(pv, "binary_data"); b != nil {
				if o.binary, err = b.Bool(); err != nil {
					return nil, badV2(`output %q: parameter "binary_data" must be true or false, got %s`, nameB, b.Type())
				}
			}
			if c := v2Get(pv, "classification"); c != nil && c.GetInt() != 0 {
				return nil, badV2("output %q: the classification extension is not supported; request the raw output", nameB)
			}
			if v2Get(pv, "shared_memory_region") != nil {
				return nil, badV2("output %q: shared memory is not supported", nameB)
			}
		}
		req.outputs = append(req.outputs, o)
	}
	return req, nil
}

// v2SpecDType is the spec's dtype, FP32 when the model does not say.
func v2SpecDType(spec engine.TensorSpec) engine.DType {
	if spec.DType == engine.Invalid {
		return engine.Float32
	}
	return spec.DType
}

// v2Describe lists specs as `"input" (FP32 [-1,64])` for error messages.
func v2Describe(specs []engine.TensorSpec) string {
	var sb strings.Builder
	for i, sp := range specs {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "%q (%s %s)", sp.Name, v2DTypeName(sp.DType), v2ShapeJSON(sp.Shape))
	}
	return sb.String()
}

func v2ShapeJSON(shape []int64) string {
	b := []byte{'['}
	for i, d := range shape {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, d, 10)
	}
	return string(append(b, ']'))
}

// v2CountJSON counts the leaves of a (nested) JSON array, for messages.
func v2CountJSON(v *fastjson.Value, depth int) (int, bool) {
	if v.Type() != fastjson.TypeArray {
		return 1, true
	}
	if depth >= v2MaxDepth {
		return 0, false
	}
	a, _ := v.Array()
	n := 0
	for _, e := range a {
		c, ok := v2CountJSON(e, depth+1)
		if !ok {
			return n, false
		}
		n += c
	}
	return n, true
}

// v2Writer fills a tensor from "data", a flat or nested JSON array read in
// row-major order; the shape is the request's, not the nesting.
type v2Writer struct {
	t    engine.Tensor
	name string
	n    int
}

func (w *v2Writer) walk(v *fastjson.Value, depth int) *APIError {
	if v.Type() != fastjson.TypeArray {
		if depth == 0 {
			return badV2(`input %q: "data" must be an array (flat or nested, in row-major order), got %s`, w.name, v.Type())
		}
		return w.put(v)
	}
	if depth >= v2MaxDepth {
		return badV2(`input %q: "data" is nested deeper than %d levels`, w.name, v2MaxDepth)
	}
	a, _ := v.Array()
	for _, e := range a {
		if aerr := w.walk(e, depth+1); aerr != nil {
			return aerr
		}
	}
	return nil
}

func (w *v2Writer) put(v *fastjson.Value) *APIError {
	i := w.n
	w.n++
	t := w.t
	if i >= t.Len() {
		return nil // counted; the caller reports the mismatch
	}
	if t.DType == engine.Bool {
		switch v.Type() {
		case fastjson.TypeTrue:
			t.Data[i] = 1
			return nil
		case fastjson.TypeFalse:
			t.Data[i] = 0
			return nil
		}
	}
	if v.Type() != fastjson.TypeNumber {
		return invalidV2(map[string]any{"input": w.name, "element": i},
			"input %q: element %d is %s where a %s number belongs", w.name, i, v.Type(), v2DTypeName(t.DType))
	}
	switch t.DType {
	case engine.Float32:
		f, _ := v.Float64()
		t.Float32s()[i] = float32(f)
		return nil
	case engine.Float64:
		f, _ := v.Float64()
		putU64(t.Data[i*8:], math.Float64bits(f))
		return nil
	case engine.Float16:
		f, _ := v.Float64()
		h := engine.Float32ToHalf(float32(f))
		t.Data[i*2], t.Data[i*2+1] = byte(h), byte(h>>8)
		return nil
	}
	n, err := v.Int64()
	if err != nil {
		f, ferr := v.Float64()
		if ferr != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return invalidV2(map[string]any{"input": w.name, "element": i},
				"input %q: element %d is %s; %s takes integers", w.name, i, v, v2DTypeName(t.DType))
		}
		n = int64(f)
	}
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	switch t.DType {
	case engine.Int32:
		lo, hi = math.MinInt32, math.MaxInt32
	case engine.Int8:
		lo, hi = math.MinInt8, math.MaxInt8
	case engine.Uint8:
		lo, hi = 0, math.MaxUint8
	case engine.Bool:
		lo, hi = 0, 1
	}
	if n < lo || n > hi {
		return invalidV2(map[string]any{"input": w.name, "element": i},
			"input %q: element %d is %d, out of the range of %s", w.name, i, n, v2DTypeName(t.DType))
	}
	switch t.DType.Size() {
	case 8:
		putU64(t.Data[i*8:], uint64(n))
	case 4:
		u := uint32(int32(n))
		t.Data[i*4], t.Data[i*4+1], t.Data[i*4+2], t.Data[i*4+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	case 1:
		t.Data[i] = byte(n)
	}
	return nil
}

// v2Infer serves POST /v2/models/{name}[/versions/{v}]/infer.
func (s *Server) v2Infer(ctx *fasthttp.RequestCtx, name, version string) {
	inst := s.v2Model(ctx, name, version)
	if inst == nil || s.ready(ctx) == nil {
		return
	}
	if ce := strings.ToLower(strings.TrimSpace(string(ctx.Request.Header.Peek("Content-Encoding")))); ce != "" && ce != "identity" {
		writeError(ctx, newError(415, CodeUnsupportedMedia, fmt.Sprintf("Content-Encoding %q is not accepted; send the request uncompressed", ce), nil))
		return
	}
	body, ok := s.readBody(ctx)
	if !ok {
		return
	}
	p := s.parsers.Get()
	req, aerr := parseV2Request(p, body, ctx.Request.Header.Peek(v2HeaderLength), inst.Model.Inputs(), inst.Model.Outputs())
	s.parsers.Put(p)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	rctx, cancel := s.requestContext()
	defer cancel()
	out, err := s.infer(rctx, inst, req.inputs)
	if err != nil {
		writeError(ctx, s.submitError(err))
		return
	}
	s.v2WriteResponse(ctx, inst.Model, req, out)
}

// v2WriteResponse writes the inference response: JSON, then the binary
// outputs' raw bytes in the order the JSON lists them.
func (s *Server) v2WriteResponse(ctx *fasthttp.RequestCtx, m *engine.Model, req *v2Request, out []engine.Tensor) {
	specs := m.Outputs()
	buf := s.getBuf()
	b := append((*buf)[:0], `{"model_name":`...)
	b = appendJSONString(b, m.Name())
	b = append(b, `,"model_version":`...)
	b = appendJSONString(b, m.Version())
	if req.id != nil {
		b = append(b, `,"id":`...)
		b = append(b, req.id...)
	}
	b = append(b, `,"outputs":[`...)
	anyBinary := false
	first := true
	for _, o := range req.outputs {
		if o.index >= len(out) {
			continue // the engine returned fewer outputs than the model declares
		}
		t := out[o.index]
		if !first {
			b = append(b, ',')
		}
		first = false
		name := fmt.Sprintf("output_%d", o.index)
		if o.index < len(specs) {
			name = specs[o.index].Name
		}
		b = append(b, `{"name":`...)
		b = appendJSONString(b, name)
		b = append(b, `,"datatype":"`...)
		b = append(b, v2DTypeName(t.DType)...)
		b = append(b, `","shape":`...)
		b = append(b, v2ShapeJSON(t.Shape)...)
		if o.binary {
			anyBinary = true
			b = append(b, `,"parameters":{"binary_data_size":`...)
			b = strconv.AppendInt(b, int64(len(t.Data)), 10)
			b = append(b, "}}"...)
			continue
		}
		b = append(b, `,"data":[`...)
		b = v2AppendFlat(b, t)
		b = append(b, "]}"...)
	}
	b = append(b, "]}"...)
	ctx.SetBody(b)
	*buf = b
	s.putBuf(buf)
	if !anyBinary {
		ctx.Response.Header.SetContentType("application/json")
		return
	}
	ctx.Response.Header.Set(v2HeaderLength, strconv.Itoa(len(b)))
	ctx.Response.Header.SetContentType("application/octet-stream")
	for _, o := range req.outputs {
		if o.binary && o.index < len(out) {
			ctx.Response.AppendBody(out[o.index].Data)
		}
	}
}

// v2AppendFlat writes a tensor's elements as a flat JSON list.
func v2AppendFlat(b []byte, t engine.Tensor) []byte {
	switch t.DType {
	case engine.Float32:
		for i, f := range t.Float32s() {
			if i > 0 {
				b = append(b, ',')
			}
			if f64 := float64(f); math.IsNaN(f64) || math.IsInf(f64, 0) {
				b = append(b, "null"...)
			} else {
				b = strconv.AppendFloat(b, f64, 'g', -1, 32)
			}
		}
		return b
	case engine.Int64:
		for i, n := range t.Int64s() {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, n, 10)
		}
		return b
	}
	for i, n := 0, t.Len(); i < n; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendValue(b, t, i)
	}
	return b
}
