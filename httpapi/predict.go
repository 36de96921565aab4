package httpapi

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/serving"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// handlePredict serves POST /predict: {"data": rows} for single-input models,
// {"inputs": {"name": rows, ...}} for any model.
func (s *Server) handlePredict(ctx *fasthttp.RequestCtx) {
	if mt := mediaType(ctx); mt != "application/json" {
		writeError(ctx, newError(415, CodeUnsupportedMedia,
			fmt.Sprintf("Content-Type %q is not accepted here; send application/json with {\"data\": [[...], ...]} (images go to /predict/image)", mt),
			map[string]any{"accepted": []string{"application/json"}}))
		return
	}
	inst := s.readyToPredict(ctx)
	if inst == nil {
		return
	}
	body, ok := s.readBody(ctx)
	if !ok {
		return
	}
	v, err := scanDoc(body)
	if err != nil {
		writeError(ctx, newError(400, CodeInvalidJSON, "the body is not valid JSON: "+err.Error(), nil))
		return
	}
	inputs, aerr := s.decodeInputs(v, inst)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	rctx, cancel := s.requestContext(ctx)
	defer cancel()
	out, rec, err := s.infer(rctx, inst, inputs, ctx.Time())
	if err != nil {
		writeError(ctx, s.submitError(err))
		return
	}
	buf := s.getBuf()
	b := appendPrediction((*buf)[:0], inst, out, nil)
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetBody(b)
	*buf = b
	s.putBuf(buf)
	s.done(inst, rec)
}

// infer runs inputs through inst (serving.Infer: checked, batched, retried
// on the new instance after a hot reload). began is when the request (or
// batch item) began. A failure is recorded in the statistics here; on
// success the caller records the returned request once its answer is
// encoded (s.done).
func (s *Server) infer(ctx context.Context, inst *serving.Instance, inputs []engine.Tensor, began time.Time) ([]engine.Tensor, serving.Request, error) {
	return s.inferSequence(ctx, inst, inputs, began, nil)
}

// inferSequence is infer for a request admitted to its sequence (ticket;
// nil for a stateless request).
func (s *Server) inferSequence(ctx context.Context, inst *serving.Instance, inputs []engine.Tensor, began time.Time, ticket *serving.SequenceTicket) ([]engine.Tensor, serving.Request, error) {
	rec := serving.Request{Began: began, Submitted: time.Now(), TraceBegun: true, Trace: s.cfg.Tracer.Begin(inst.Name())}
	out, t, err := serving.InferSequence(ctx, s.models, inst, inputs, ticket)
	rec.Timing = t
	if err != nil {
		rec.Encoded, rec.Err = time.Now(), err
		inst.Stats.Record(rec)
		s.untrace(rec)
	}
	return out, rec, err
}

// untrace tells the tracer that rec's request ended without an answer to
// trace.
func (s *Server) untrace(rec serving.Request) {
	if err := s.cfg.Tracer.End(rec.Trace); err != nil {
		s.log.Error("tracing", "err", err)
	}
}

// done records a successful request to inst whose answer is encoded: to
// its statistics, and to the tracer, which samples it.
func (s *Server) done(inst *serving.Instance, rec serving.Request) {
	rec.OK, rec.Encoded = true, time.Now()
	inst.Stats.Record(rec)
	if err := s.cfg.Tracer.Record(serving.TraceOf(inst, rec)); err != nil {
		s.log.Error("tracing", "err", err)
	}
}

// decodeInputs reads {"data": rows} or {"inputs": {...}} into inst's
// positional inputs, in the shapes its clients send (Instance.Inputs: a
// model configuration's dims where it reshapes, which Infer maps to the
// model's). v is a value scanDoc validated; the rows are read from its
// bytes (decodeRows), no tree of it is built.
func (s *Server) decodeInputs(v jv, inst *serving.Instance) ([]engine.Tensor, *APIError) {
	if v.Type() != fastjson.TypeObject {
		return nil, newError(400, CodeBadRequest, `the body must be a JSON object such as {"data": [[...], ...]}`, nil)
	}
	return s.decodeMembers(v.members(), inst)
}

// decodeMembers is decodeInputs on an object's members.
func (s *Server) decodeMembers(ms []member, inst *serving.Instance) ([]engine.Tensor, *APIError) {
	specs, m := inst.Inputs(), inst.Model
	if get(ms, "inputs") != nil && get(ms, "data") != nil {
		return nil, newError(400, CodeBadRequest, `send either "data" (rows of a single-input model) or "inputs" (rows by input name), not both`, nil)
	}
	if named := get(ms, "inputs"); named != nil {
		if named.Type() != fastjson.TypeObject {
			return nil, newError(422, CodeInvalidInput, `"inputs" must be an object mapping input names to arrays of rows`, nil)
		}
		obj := named.members()
		out := make([]engine.Tensor, len(specs))
		for i, spec := range specs {
			rows := get(obj, spec.Name)
			if rows == nil {
				return nil, newError(422, CodeInvalidInput, fmt.Sprintf("input %q is missing from \"inputs\"", spec.Name), map[string]any{"expected_inputs": inputNames(specs)})
			}
			t, aerr := s.decodeTensor(rows, spec, m)
			if aerr != nil {
				return nil, aerr
			}
			out[i] = t
		}
		var unknown []string
		for _, mb := range obj {
			k, _ := mb.key.str()
			if !hasInput(specs, k) {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return nil, newError(422, CodeInvalidInput, fmt.Sprintf("unknown input(s) %v", unknown), map[string]any{"expected_inputs": inputNames(specs)})
		}
		return out, nil
	}
	data := get(ms, "data")
	if data == nil {
		return nil, newError(422, CodeInvalidInput, `missing "data": send {"data": [[...], ...]} with one array per sample`, map[string]any{"expected_inputs": inputNames(specs)})
	}
	if len(specs) != 1 {
		return nil, newError(422, CodeInvalidInput, fmt.Sprintf(`this model takes %d inputs; send {"inputs": {"name": rows, ...}}`, len(specs)), map[string]any{"expected_inputs": inputNames(specs)})
	}
	t, aerr := s.decodeTensor(data, specs[0], m)
	if aerr != nil {
		return nil, aerr
	}
	return []engine.Tensor{t}, nil
}

// decodeTensor reads one input of m from v: rows along the batch axis
// (decodeRows) for a batched model; for a model without a batch axis (see
// engine.Model.Batched) the whole tensor, nested exactly as its full shape
// ([[...16 numbers]] for [1, 16], [1, 2, 3, 4] for [4], a number for a
// scalar), one tensor per request.
func (s *Server) decodeTensor(v jv, spec engine.TensorSpec, m *engine.Model) (engine.Tensor, *APIError) {
	if m.Batched() {
		return decodeRows(v, spec, s.cfg.MaxRows)
	}
	name := spec.Name
	whole := func(got string, shape []int64) *APIError {
		return invalidInput(fmt.Sprintf("input %q: this model has no batch axis and takes one whole tensor of shape %s per request; %s "+
			"(send each tensor as its own request, or as an item of /predict/batch)", name, engine.FormatShape(spec.Shape), got), spec, shape)
	}
	if v.Type() != fastjson.TypeArray {
		if len(spec.Shape) > 0 {
			return engine.Tensor{}, whole(fmt.Sprintf("got a JSON %s", v.Type()), nil)
		}
		if ty := v.Type(); ty != fastjson.TypeNumber && ty != fastjson.TypeTrue && ty != fastjson.TypeFalse {
			return engine.Tensor{}, whole(fmt.Sprintf("got a JSON %s", ty), nil)
		}
		dt := v2SpecDType(spec)
		t := allocTensor(dt, []int64{}, 1)
		w := rowWriter{b: v, dt: dt, name: name, data: t.Data, cap: 1}
		if _, aerr := w.put(0, 0); aerr != nil {
			return engine.Tensor{}, aerr
		}
		return t, nil
	}
	shape, aerr := nestedShape(v, name)
	if aerr != nil {
		return engine.Tensor{}, aerr
	}
	fits := len(shape) == len(spec.Shape)
	for i := 0; fits && i < len(shape); i++ {
		fits = spec.Shape[i] <= 0 || spec.Shape[i] == shape[i]
	}
	if !fits {
		return engine.Tensor{}, whole(fmt.Sprintf("the data is nested as %s", engine.FormatShape(shape)), shape)
	}
	return decodeRows(v, spec, 0) // its rows are axis 0 of the whole tensor
}

func inputNames(specs []engine.TensorSpec) []string {
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = s.Name
	}
	return out
}

func hasInput(specs []engine.TensorSpec, name string) bool {
	for _, s := range specs {
		if s.Name == name {
			return true
		}
	}
	return false
}

// appendPrediction writes the /predict response body: predictions (the first
// output, one entry per row), labels (top-1, for classifiers with labels),
// outputs (every output by name, when there are several) and the model. A
// non-nil id (raw JSON) is written first, for /predict/batch items, which
// leave out the model.
func appendPrediction(b []byte, inst *serving.Instance, out []engine.Tensor, id []byte) []byte {
	m := inst.Model
	withModel := id == nil
	if id != nil {
		b = append(b, `{"id":`...)
		b = append(b, id...)
		b = append(b, ',')
	} else {
		b = append(b, '{')
	}
	rows := 0
	if len(out) > 0 && len(out[0].Shape) > 0 {
		rows = int(out[0].Shape[0])
	}
	b = append(b, `"predictions":`...)
	switch {
	case len(out) == 0:
		b = append(b, "[]"...)
	case out[0].Absent(): // a Python model's response left it out
		b = append(b, "null"...)
	default:
		b = appendTensor(b, out[0])
	}
	if labels := m.Labels(); len(labels) > 0 && len(out) > 0 && out[0].DType != engine.String && len(out[0].Shape) == 2 && int(out[0].Shape[1]) == len(labels) {
		b = append(b, `,"labels":[`...)
		for r := 0; r < rows; r++ {
			if r > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, labels[argmaxRow(out[0], r)])
		}
		b = append(b, ']')
	}
	if len(out) > 1 {
		b = append(b, `,"outputs":{`...)
		specs := m.Outputs()
		first := true
		for i, t := range out {
			if t.Absent() {
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			name := fmt.Sprintf("output_%d", i)
			if i < len(specs) {
				name = specs[i].Name
			}
			b = appendJSONString(b, name)
			b = append(b, ':')
			b = appendTensor(b, t)
		}
		b = append(b, '}')
	}
	if withModel {
		b = append(b, `,"model":{"name":`...)
		b = appendJSONString(b, inst.Name())
		b = append(b, `,"version":`...)
		b = appendJSONString(b, inst.Version())
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendTensor writes t as nested JSON arrays (its rows, for a batched
// model), or a number when t is a scalar.
func appendTensor(b []byte, t engine.Tensor) []byte {
	if len(t.Shape) == 0 {
		return elementWriter(t)(b, 0)
	}
	return appendRows(b, t, 0, int(t.Shape[0]))
}

// argmaxRow is the index of the largest value in row r of a [N, C] tensor.
func argmaxRow(t engine.Tensor, r int) int {
	c := int(t.Shape[1])
	best, bi := 0.0, 0
	if t.DType == engine.Float32 {
		row := t.Float32s()[r*c : (r+1)*c]
		bf := row[0]
		for i, v := range row {
			if v > bf {
				bf, bi = v, i
			}
		}
		return bi
	}
	for i := 0; i < c; i++ {
		if v := t.At(r*c + i); i == 0 || v > best {
			best, bi = v, i
		}
	}
	return bi
}
