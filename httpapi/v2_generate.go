package httpapi

// Triton's generate extension: POST /v2/models/{name}[/versions/{v}]/generate
// and /generate_stream, a flat JSON object in and out instead of V2's
// tensor lists (docs/protocol/extension_generate.md in
// triton-inference-server/server). A request's top-level keys that name a
// model input are that input, its value converted to a tensor of the
// input's datatype and of the shape the model's metadata allows; "id" is
// the request's ID; "parameters" is an object whose keys follow the same
// rule; every other key is a request parameter (a string, number or
// boolean). The answer is one JSON object: each output by name (a single
// element as a scalar, otherwise a flat list), "id" when given,
// "model_name" and "model_version". generate_stream sends the same object
// as one Server-Sent Event: fw's models answer each request exactly once
// (Triton's decoupled models, which answer several times, are not
// served). Where Triton's clients match error text, the sentences are
// Triton's.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/serving"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// genRequest is a parsed generate request: the inputs' values (in model
// order; nil where absent), the request ID and the sequence parameters.
type genRequest struct {
	values []jv
	id     []byte // JSON-encoded, or nil
	seq    serving.SequenceParams
	params serving.Parameters // the other keys, for the model
}

// parseGenerate reads a generate request's keys in their order, the first
// error winning, as Triton reads them.
func parseGenerate(body []byte, model string, ins []engine.TensorSpec) (*genRequest, *APIError) {
	v, err := scanDoc(body)
	if err != nil {
		return nil, newError(400, CodeInvalidJSON, "failed to parse the request JSON buffer: "+err.Error(), nil)
	}
	if v.Type() != fastjson.TypeObject {
		return nil, badV2(`the generate request must be a JSON object of the model's inputs by name, such as {%q: ...}`, firstName(ins))
	}
	g := &genRequest{values: make([]jv, len(ins))}
	if aerr := g.keys(v.members(), ins, ""); aerr != nil {
		return nil, aerr
	}
	var got, missing []string
	for i, sp := range ins {
		switch {
		case g.values[i] != nil:
			got = append(got, "'"+sp.Name+"'")
		case !sp.Optional: // an optional one left out stays the zero Tensor
			missing = append(missing, "'"+sp.Name+"'")
		}
	}
	if len(missing) > 0 {
		return nil, newError(400, CodeInvalidInput, fmt.Sprintf("expected %d inputs but got %d inputs for model '%s'. Got input(s) [%s], but missing required input(s) [%s]. Please provide all required input(s).",
			len(ins), len(got), model, strings.Join(got, ","), strings.Join(missing, ",")), map[string]any{"expected_inputs": inputNames(ins)})
	}
	return g, nil
}

func firstName(ins []engine.TensorSpec) string {
	if len(ins) == 0 {
		return "input"
	}
	return ins[0].Name
}

// keys reads the members of the request object (or, with prefix, of its
// "parameters" object).
func (g *genRequest) keys(ms []member, ins []engine.TensorSpec, prefix string) *APIError {
	for _, m := range ms {
		k, ok := m.key.str()
		if !ok {
			return badV2("%sa key is not a valid JSON string", prefix)
		}
		if prefix == "" && k == "id" {
			if m.val.Type() != fastjson.TypeString {
				return badV2("Unable to parse 'id': attempt to access JSON non-string as string")
			}
			if s, _ := m.val.str(); s != "" {
				g.id = rawID(m.val)
			}
			continue
		}
		if prefix == "" && k == "parameters" {
			if m.val.Type() != fastjson.TypeObject {
				return badV2("Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object")
			}
			if aerr := g.keys(m.val.members(), ins, "Converting keyword: 'parameters': "); aerr != nil {
				return aerr
			}
			continue
		}
		if i := slices.IndexFunc(ins, func(sp engine.TensorSpec) bool { return sp.Name == k }); i >= 0 {
			if g.values[i] != nil {
				return badV2("%sinput '%s' already exists in request", prefix, k)
			}
			if aerr := genCheckValue(m.val, ins[i]); aerr != nil {
				return aerr
			}
			g.values[i] = m.val
			continue
		}
		switch m.val.Type() {
		case fastjson.TypeString, fastjson.TypeNumber, fastjson.TypeTrue, fastjson.TypeFalse:
		default:
			return badV2("%sparameter '%s' has invalid type. It should be either 'int', 'bool', or 'string'.", prefix, k)
		}
		v := v2ParamValue(m.val)
		isSeq, err := g.seq.Set(k, v)
		if err == nil && !isSeq {
			err = g.params.Add(k, v)
		}
		if err != nil {
			return badV2("%s%s", prefix, err.Error())
		}
	}
	return nil
}

// genCheckValue checks that every element of v (a scalar or nested lists)
// has the JSON type sp's datatype is written in, with Triton's sentences.
func genCheckValue(v jv, sp engine.TensorSpec) *APIError {
	var want fastjson.Type
	var msg string
	switch sp.DType {
	case engine.String:
		want, msg = fastjson.TypeString, "Unable to parse JSON bytes array: attempt to access JSON non-string as string"
	case engine.Bool:
		want, msg = fastjson.TypeTrue, "Unable to parse 'data': attempt to access JSON non-boolean as boolean"
	case engine.Float16, engine.BFloat16, engine.Float32, engine.Float64:
		want, msg = fastjson.TypeNumber, "Unable to parse 'data': attempt to access JSON non-number as double"
	case engine.Uint8, engine.Uint16, engine.Uint32, engine.Uint64:
		want, msg = fastjson.TypeNumber, "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer"
	default:
		want, msg = fastjson.TypeNumber, "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"
	}
	var bad bool
	var walk func(e jv, depth int)
	walk = func(e jv, depth int) {
		t := e.Type()
		if t == fastjson.TypeArray && depth < v2MaxDataDepth {
			e.forEach(func(_ int, x jv) bool {
				walk(x, depth+1)
				return !bad
			})
			return
		}
		if t == fastjson.TypeFalse {
			t = fastjson.TypeTrue
		}
		if t != want {
			bad = true
		}
	}
	walk(v, 0)
	if bad {
		return invalidV2(map[string]any{"input": sp.Name, "datatype": serving.DatatypeName(sp.DType)}, "%s (input '%s' is %s)", msg, sp.Name, serving.DatatypeName(sp.DType))
	}
	return nil
}

// genShape is the shape a generate input of n elements takes: from the
// last axis to the first, each fixed axis divides n; the innermost
// variable axis takes what is left, the others 1.
func genShape(sp engine.TensorSpec, n int64) ([]int64, bool) {
	shape := slices.Clone(sp.Shape)
	rest := n
	inner := -1
	for i := len(shape) - 1; i >= 0; i-- {
		d := shape[i]
		if d < 0 {
			if inner < 0 {
				inner = i
			}
			continue
		}
		if d == 0 {
			if rest != 0 {
				return nil, false
			}
			continue
		}
		if rest%d != 0 {
			return nil, false
		}
		rest /= d
	}
	for i, d := range shape {
		if d < 0 {
			shape[i] = 1
			if i == inner {
				shape[i] = rest
			}
		}
	}
	if engine.NumElements(shape) != n {
		return nil, false // no variable axis took the rest
	}
	return shape, true
}

// genLeaves counts v's elements: 1 for a scalar, else the scalars in its
// nested lists.
func genLeaves(v jv) int64 {
	if v.Type() != fastjson.TypeArray {
		return 1
	}
	var n int64
	v.forEach(func(_ int, e jv) bool {
		n += genLeaves(e)
		return true
	})
	return n
}

// genInputs converts the request's values into the model's input tensors
// with the V2 reader's data path (v2DataTensor: its limits, range checks
// and string encoding), each value read in place in the body.
func genInputs(g *genRequest, ins []engine.TensorSpec, lim v2Limits) (*v2Request, *APIError) {
	req := &v2Request{inputs: make([]engine.Tensor, len(ins)), id: g.id, seq: g.seq, params: g.params}
	for i, sp := range ins {
		v := g.values[i]
		if v == nil { // an optional input left out (parseGenerate admitted it)
			continue
		}
		n := genLeaves(v)
		shape, ok := genShape(sp, n)
		if !ok {
			return nil, invalidV2(map[string]any{"input": sp.Name, "shape": sp.Shape},
				"The schema can not convert input '%s' to tensor with proper shape: its %d elements do not fill a shape %s (send a list of the elements, or nested lists, filling the shape)",
				sp.Name, n, serving.ShapeString(sp.Shape))
		}
		if sp.DType == engine.Invalid {
			return nil, badV2("input %q: the model does not state its datatype; send it to /infer with a \"datatype\"", sp.Name)
		}
		data := v
		if v.Type() != fastjson.TypeArray {
			data = jv("[" + string(v) + "]") // one element
		}
		t, aerr := v2DataTensor(sp.Name, sp.DType, shape, n, data, lim, func() *APIError { return v2TooManyRows(sp.Name, shape, lim.maxRows) })
		if aerr != nil {
			return nil, aerr
		}
		req.inputs[i] = t
	}
	return req, nil
}

// v2Generate serves generate (stream false) and generate_stream (true).
func (s *Server) v2Generate(ctx *fasthttp.RequestCtx, name, version string, stream bool) {
	inst := s.v2Model(ctx, name, version)
	if inst == nil || !s.serving(ctx) {
		return
	}
	body, _, ok := s.readBodyTo(ctx, s.cfg.MaxBodyBytes, nil)
	if !ok {
		return
	}
	g, aerr := parseGenerate(body, inst.Name(), inst.Inputs())
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	req, aerr := genInputs(g, inst.Inputs(), s.v2Limits(inst))
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if aerr := s.forwardHeaders(ctx, &req.params); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if stream && inst.Decoupled() {
		s.generateDecoupled(ctx, inst, req, g)
		return
	}
	out, rec, err := s.v2Run(ctx, inst, req)
	if err != nil {
		if k := serving.Classify(err, s.cfg.Timeout).Kind; !stream || (k != serving.KindEngine && k != serving.KindAnswered) {
			// Refused before the model ran (sequence rules, inputs, queue,
			// readiness, deadline): JSON, on both routes.
			writeError(ctx, s.submitError(err))
			return
		}
		// The model ran and failed: generate_stream answers it as its one
		// event, with the error's status (Triton's first-response rule).
		e := s.submitError(err)
		ctx.Response.SetStatusCode(e.Status)
		ctx.Response.Header.SetContentType("text/event-stream; charset=utf-8")
		b := append([]byte(`data: {"error":`), appendJSONString(nil, e.Message)...)
		ctx.SetBody(append(b, "}\n\n"...))
		return
	}
	if g.id != nil {
		_ = json.Unmarshal(g.id, &rec.ID)
	}
	b := genResponse(nil, inst, inst.Outputs(), out, g.id)
	if stream {
		ctx.Response.Header.SetContentType("text/event-stream; charset=utf-8")
		ctx.SetBody(append(append([]byte("data: "), b...), "\n\n"...))
	} else {
		ctx.Response.Header.SetContentType("application/json")
		ctx.SetBody(b)
	}
	s.done(inst, rec)
}

// generateDecoupled answers generate_stream for a decoupled model: an event
// for each of the model's responses as it comes (outputs as generate writes
// them, or {"error": ...}); the stream ends after the final one.
func (s *Server) generateDecoupled(ctx *fasthttp.RequestCtx, inst *serving.Instance, req *v2Request, g *genRequest) {
	ticket, err := serving.EnterSequence(inst, req.seq, req.inputs) // a decoupled model takes no sequence: refused here
	if err != nil {
		writeError(ctx, s.submitError(err))
		return
	}
	ticket.Release()
	if err := serving.CheckInputs(inst, req.inputs); err != nil {
		writeError(ctx, s.submitError(err))
		return
	}
	began := ctx.Time()
	ctx.Response.Header.SetContentType("text/event-stream; charset=utf-8")
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		rctx, cancel := context.WithCancel(s.base)
		defer cancel()
		rctx = serving.WithRequestInfo(rctx, req.idString(), &req.params)
		event := func(b []byte) error {
			_, _ = w.WriteString("data: ")
			_, _ = w.Write(b)
			_, _ = w.WriteString("\n\n")
			return w.Flush() // a client gone away ends the request
		}
		errEvent := func(err error) error {
			return event(append(append([]byte(`{"error":`), appendJSONString(nil, s.submitError(err).Message)...), '}'))
		}
		rec := serving.Request{Began: began, Submitted: time.Now()}
		err := serving.InferStream(rctx, inst, req.inputs, func(out []engine.Tensor, merr error, final bool) error {
			switch {
			case merr != nil:
				return errEvent(merr)
			case out == nil:
				return nil // the empty final response: the stream's end says it
			}
			return event(genResponse(nil, inst, inst.Outputs(), out, g.id))
		})
		rec.OK, rec.Encoded, rec.Err = err == nil, time.Now(), err
		inst.Stats.Record(rec)
		if err != nil && rctx.Err() == nil {
			_ = errEvent(err)
		}
	})
}

// genResponse writes the answer object, keys in byte order as Triton
// writes them: the outputs by name (a reserved key wins over an output of
// its name), "id" when given, "model_name", "model_version".
func genResponse(b []byte, inst *serving.Instance, specs []engine.TensorSpec, out []engine.Tensor, id []byte) []byte {
	type entry struct {
		key string
		t   *engine.Tensor
	}
	keys := []entry{{key: "model_name"}, {key: "model_version"}}
	if id != nil {
		keys = append(keys, entry{key: "id"})
	}
	for i := range out {
		name := v2OutputName(specs, i)
		if out[i].Absent() { // left out by the model's response
			continue
		}
		if name == "model_name" || name == "model_version" || (name == "id" && id != nil) {
			continue
		}
		keys = append(keys, entry{key: name, t: &out[i]})
	}
	slices.SortFunc(keys, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	b = append(b, '{')
	for i, e := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, e.key)
		b = append(b, ':')
		switch {
		case e.t != nil:
			if e.t.Len() == 1 {
				b = v2AppendFlat(b, *e.t)
			} else {
				b = append(b, '[')
				b = v2AppendFlat(b, *e.t)
				b = append(b, ']')
			}
		case e.key == "id":
			b = append(b, id...)
		case e.key == "model_name":
			b = appendJSONString(b, inst.Name())
		default:
			b = appendJSONString(b, inst.Version())
		}
	}
	return append(b, '}')
}
