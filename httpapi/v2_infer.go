package httpapi

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/serving"
	"github.com/fw-serve/fw/sharedmem"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// v2HeaderLength is the binary extension's header: the JSON part's length.
const v2HeaderLength = "Inference-Header-Content-Length"

// v2MaxDataDepth bounds the nesting of an input's "data" array: a value
// (array or element) this many levels inside it (the array itself is level
// 0) is refused, as Triton refuses it (HTTP_MAX_JSON_NESTING_DEPTH).
const v2MaxDataDepth = 100

// v2Limits are the bounds parseV2Request enforces before it allocates.
type v2Limits struct {
	maxRows  int    // the first axis of every input (0: none; --max-rows, batched models only)
	maxBytes int64  // the tensor of an input given as JSON "data" (0: none; --max-body-bytes)
	model    string // the model's name, for messages that Triton's carry it in
}

// v2Request is a parsed inference request: the inputs in the model's order
// and the outputs to return, in the order the response lists them.
type v2Request struct {
	holds   sharedmem.Holds // the shared memory regions it names, held until it has answered
	id      []byte          // the request's "id", JSON-encoded, or nil
	inputs  []engine.Tensor
	outputs []v2Output
	seq     serving.SequenceParams // the request's sequence parameters
	params  serving.Parameters     // its other parameters, for its model
	sink    *engine.ResponseSink   // the model's response parameters, when it may give any
}

type v2Output struct {
	index   int // into the model's outputs
	binary  bool
	shm     *sharedmem.Ref // the output goes into this shared memory window
	classes int64          // > 0: answer the top classes instead (classification)
}

// v2SharedMemoryRef reads the shared memory parameters of an input or
// output (what names it, for messages): shared_memory_region (given),
// shared_memory_byte_size and shared_memory_offset.
func v2SharedMemoryRef(pm []member, region jv, what string) (sharedmem.Ref, *APIError) {
	var ref sharedmem.Ref
	if region.Type() != fastjson.TypeString {
		return ref, badV2(`%s: parameter "shared_memory_region" must be a string`, what)
	}
	ref.Region, _ = region.str()
	size := v2Get(pm, "shared_memory_byte_size")
	n, ok := v2Uint(size)
	if size == nil || !ok {
		return ref, badV2(`%s: parameter "shared_memory_byte_size" must be a non-negative integer with "shared_memory_region"`, what)
	}
	ref.Size = n
	if off := v2Get(pm, "shared_memory_offset"); off != nil {
		n, ok := v2Uint(off)
		if !ok {
			return ref, badV2(`%s: parameter "shared_memory_offset" must be a non-negative integer`, what)
		}
		ref.Offset = n
	}
	return ref, nil
}

// v2Uint reads a JSON number that is an unsigned 64-bit integer, as Triton
// reads shared memory offsets and sizes (2^64-1 included: the window's
// checks refuse what no region holds, with Triton's sentences).
func v2Uint(v jv) (uint64, bool) {
	if v.Type() != fastjson.TypeNumber {
		return 0, false
	}
	if n, err := strconv.ParseUint(unsafeString(v), 10, 64); err == nil {
		return n, true
	}
	n, ok := v2Int(v)
	return uint64(n), ok && n >= 0
}

// v2Get is the member key of an object, with JSON null read as absent.
func v2Get(ms []member, key string) jv {
	x := get(ms, key)
	if x.Type() == fastjson.TypeNull {
		return nil
	}
	return x
}

// v2Bool reads a JSON boolean.
func v2Bool(v jv) (bool, bool) {
	switch v.Type() {
	case fastjson.TypeTrue:
		return true, true
	case fastjson.TypeFalse:
		return false, true
	}
	return false, false
}

// v2ParamValue is a request parameter's value as serving.SequenceParams.Set
// reads it: a bool, an integer (uint64, or int64 when negative), a string,
// or what else it is.
func v2ParamValue(v jv) any {
	switch v.Type() {
	case fastjson.TypeTrue:
		return true
	case fastjson.TypeFalse:
		return false
	case fastjson.TypeString:
		s, _ := v.str()
		return s
	case fastjson.TypeNumber:
		if n, err := strconv.ParseUint(unsafeString(v), 10, 64); err == nil {
			return n
		}
		if n, err := strconv.ParseInt(unsafeString(v), 10, 64); err == nil {
			return n
		}
		if f, err := strconv.ParseFloat(unsafeString(v), 64); err == nil {
			return f
		}
		return serving.OtherValue("a number out of range")
	}
	return serving.OtherValue("JSON " + v.Type().String())
}

// v2Int reads a JSON integer strictly (no fraction, no exponent), as the
// sizes of the protocol are written.
// v2Int reads an integer member: a JSON number with no fractional part,
// written as an integer or not (3595.0 and 3.5e3 are integers to JSON
// Schema, which the served document's "integer" means), within int64.
func v2Int(v jv) (int64, bool) {
	if v.Type() != fastjson.TypeNumber {
		return 0, false
	}
	n, err := strconv.ParseInt(unsafeString(v), 10, 64)
	if err == nil {
		return n, true
	}
	f, ferr := strconv.ParseFloat(unsafeString(v), 64)
	if ferr != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return 0, false
	}
	return int64(f), true
}

func badV2(msg string, args ...any) *APIError {
	return newError(400, CodeBadRequest, fmt.Sprintf(msg, args...), nil)
}

func invalidV2(details map[string]any, msg string, args ...any) *APIError {
	return newError(422, CodeInvalidInput, fmt.Sprintf(msg, args...), details)
}

func v2Names(specs []engine.TensorSpec) []string { return inputNames(specs) }

// requestError is the answer to a request serving's rules refused: 422
// invalid_input when it does not fit the model, else 400 bad_request (both
// 400 under /v2).
func requestError(e *serving.RequestError) *APIError {
	if e.Invalid {
		return newError(422, CodeInvalidInput, e.Message, e.Details)
	}
	return newError(400, CodeBadRequest, e.Message, e.Details)
}

// parseV2Request reads an inference request: body is the whole request
// body; hdrLen is the Inference-Header-Content-Length header's value (nil
// when absent), the length of the JSON part, the binary tensor data
// following it. ins and outs are the model's input and output specs; lim
// bounds the inputs (v2Limits). The JSON
// is validated in one pass and read in place (see jsonscan.go); a tensor is
// allocated only once its shape's size is checked against the bytes that
// carry it. The returned request does not alias body.
func parseV2Request(body, hdrLen []byte, ins, outs []engine.TensorSpec, lim v2Limits, shm *sharedmem.Registry) (*v2Request, *APIError) {
	req := &v2Request{}
	done := false
	defer func() {
		if !done { // refused, or panicked: the shared memory regions read so far
			req.holds.Release()
		}
	}()
	if aerr := parseV2Into(req, body, hdrLen, ins, outs, lim, shm); aerr != nil {
		return nil, aerr
	}
	done = true
	return req, nil
}

// parseV2Into is parseV2Request into req.
func parseV2Into(req *v2Request, body, hdrLen []byte, ins, outs []engine.TensorSpec, lim v2Limits, shm *sharedmem.Registry) *APIError {
	jsonPart, bin := body, []byte(nil)
	if hdrLen != nil {
		n, err := strconv.ParseInt(strings.TrimSpace(string(hdrLen)), 10, 64) // a negative, overflowing or non-numeric value is refused here
		if err != nil || n <= 0 || n > int64(len(body)) {
			return badV2("the %s header is %q; it must be the length in bytes of the JSON part of the body, between 1 and the body's %d bytes", v2HeaderLength, hdrLen, len(body))
		}
		jsonPart, bin = body[:n], body[n:]
	}
	v, err := scanDoc(jsonPart)
	if err != nil {
		msg := "the inference request is not valid JSON: " + err.Error()
		if se, ok := err.(*syntaxError); ok && se.depth {
			msg = fmt.Sprintf("JSON nesting depth exceeds maximum allowed limit (%d): the request nests deeper than %d levels at byte %d (an input's \"data\" may nest less than %d levels)", v2MaxDataDepth, scanMaxDepth, se.off, v2MaxDataDepth)
		}
		if hdrLen == nil && len(body) > 0 {
			msg += fmt.Sprintf("; when the body carries binary tensor data, send the %s header with the JSON part's length", v2HeaderLength)
		}
		return newError(400, CodeInvalidJSON, msg, nil)
	}
	if v.Type() != fastjson.TypeObject {
		return badV2(`the inference request must be a JSON object such as {"inputs": [{"name": ..., "shape": [...], "datatype": "FP32", "data": [...]}]}`)
	}
	top := v.members()
	if id := v2Get(top, "id"); id != nil {
		if id.Type() != fastjson.TypeString {
			return badV2(`"id" must be a string, got %s`, id.Type())
		}
		if req.id = rawID(id); req.id == nil {
			return badV2(`"id" is not a valid JSON string`)
		}
	}
	binaryDefault := false
	if params := v2Get(top, "parameters"); params != nil {
		if params.Type() != fastjson.TypeObject {
			return badV2(`"parameters" must be an object, got %s`, params.Type())
		}
		for _, mb := range params.members() {
			if k, ok := mb.key.str(); ok {
				v := v2ParamValue(mb.val)
				isSeq, err := req.seq.Set(k, v)
				if err == nil && !isSeq {
					err = req.params.Add(k, v)
				}
				if err != nil {
					return badV2("%s", err.Error())
				}
			}
		}
		if b := v2Get(params.members(), "binary_data_output"); b != nil {
			var ok bool
			if binaryDefault, ok = v2Bool(b); !ok {
				return badV2(`parameter "binary_data_output" must be true or false, got %s`, b.Type())
			}
		}
	}

	// Inputs.
	inArr := v2Get(top, "inputs")
	if inArr == nil && len(ins) > 0 {
		return invalidV2(map[string]any{"expected_inputs": v2Names(ins)}, `the request has no "inputs"; this model takes %s`, serving.Describe(ins))
	}
	if inArr != nil && inArr.Type() != fastjson.TypeArray {
		return badV2(`"inputs" must be an array of tensors, got %s`, inArr.Type())
	}
	req.inputs = make([]engine.Tensor, len(ins))
	seen := serving.NewInputSet(ins)
	var aerr *APIError
	inArr.forEach(func(k int, it jv) bool {
		aerr = v2Input(it, k, ins, &seen, req, &bin, hdrLen != nil, lim, shm)
		return aerr == nil
	})
	if aerr != nil {
		return aerr
	}
	if e := seen.Missing(); e != nil {
		return requestError(e)
	}
	if len(bin) > 0 {
		return badV2("%d bytes of binary data follow the JSON header that no input claims; each binary input needs parameter \"binary_data_size\" and the sizes must add up to the body after the %s bytes of JSON", len(bin), v2HeaderLength)
	}
	return v2Outputs(req, v2Get(top, "outputs"), outs, binaryDefault, shm)
}

// v2Input reads inputs[k], it, into req.inputs, taking its binary data (if
// any) from the front of *bin. seen follows the model inputs already
// given; hasHdr says whether the request has the binary extension's header.
func v2Input(it jv, k int, ins []engine.TensorSpec, seen *serving.InputSet, req *v2Request, bin *[]byte, hasHdr bool, lim v2Limits, shm *sharedmem.Registry) *APIError {
	{
		if it.Type() != fastjson.TypeObject {
			return badV2(`inputs[%d] must be an object with "name", "shape", "datatype" and "data", got %s`, k, it.Type())
		}
		itm := it.members()
		nameV := v2Get(itm, "name")
		if nameV == nil || nameV.Type() != fastjson.TypeString {
			return badV2(`inputs[%d] needs a "name" string`, k)
		}
		name, ok := nameV.str()
		if !ok {
			return badV2(`inputs[%d]: "name" is not a valid JSON string`, k)
		}
		idx, e := seen.Take(name)
		if e != nil {
			return requestError(e)
		}
		spec := ins[idx]
		dtV := v2Get(itm, "datatype")
		if dtV == nil || dtV.Type() != fastjson.TypeString {
			return badV2(`input %q needs a "datatype" string such as %q`, name, serving.DatatypeName(v2SpecDType(spec)))
		}
		dtB, _ := dtV.str()
		dt, e := serving.InputDatatype(name, dtB, spec)
		if e != nil {
			return requestError(e)
		}
		shapeV := v2Get(itm, "shape")
		if shapeV == nil {
			return badV2(`input %q needs a "shape" array such as %s`, name, serving.ShapeString(spec.Shape))
		}
		if shapeV.Type() != fastjson.TypeArray {
			return badV2(`input %q: "shape" must be an array of non-negative integers, got %s`, name, shapeV.Type())
		}
		if n := shapeV.count(serving.MaxAxes); n > serving.MaxAxes {
			return requestError(serving.TooManyAxes(name, shapeV.count(-1)))
		}
		// The element count, checked for overflow as Triton checks it (and
		// with its sentences); the byte size below cannot overflow then.
		var shape []int64
		count, overflow, empty := int64(1), false, false
		bad := false
		shapeV.forEach(func(_ int, d jv) bool {
			n, ok := v2Int(d)
			if !ok || n < 0 {
				bad = true
				return false
			}
			shape = append(shape, n)
			switch {
			case n == 0:
				empty = true
			case !overflow && count > math.MaxInt64/n:
				overflow = true
			default:
				count *= n
			}
			return true
		})
		if bad {
			// Triton's status (500) and sentence: its JSON reader fails.
			return newError(500, CodeBadRequest, fmt.Sprintf(`Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer (input %q: "shape" must be an array of non-negative integers, got %s)`, name, shapeV), map[string]any{"input": name})
		}
		if shape == nil {
			shape = []int64{}
		}
		elemBytes := int64(dt.Size())
		if dt == engine.String {
			elemBytes = engine.StringHeader // each element's 4-byte length, at least
		}
		switch {
		case empty:
			count = 0
		case overflow:
			return badV2("invalid shape for input '%s': shape %s causes total element count to exceed maximum size of %d", name, serving.ShapeString(shape), int64(math.MaxInt64))
		case elemBytes > 1 && count > math.MaxInt64/elemBytes:
			of := fmt.Sprintf("data type size (%d)", elemBytes)
			if dt == engine.String {
				of = fmt.Sprintf("the %d-byte length of each BYTES element", elemBytes)
			}
			return badV2("byte size overflow for input '%s': element count (%d) * %s exceeds maximum allowed size (%d)", name, count, of, int64(math.MaxInt64))
		}
		// The row limit is checked once the shape is known to match the bytes
		// that carry it (a mismatch is the more useful answer), before the
		// tensor is allocated.
		tooManyRows := func() *APIError { return v2TooManyRows(name, shape, lim.maxRows) }
		var params jv
		var pm []member
		if pv := v2Get(itm, "parameters"); pv != nil {
			if pv.Type() != fastjson.TypeObject {
				return badV2(`input %q: "parameters" must be an object, got %s`, name, pv.Type())
			}
			pm = pv.members()
			params = v2Get(pm, "binary_data_size")
		}
		data := v2Get(itm, "data")
		nbytes := count * int64(dt.Size()) // cannot overflow: checked above
		// sizeError refuses a byte size (of binary data or a shared memory
		// window) that cannot carry the shape: for BYTES, whose size is the
		// serialized elements', less than their 4-byte lengths.
		sizeError := func(size int64, of, param string) *APIError {
			switch {
			case dt == engine.String && size < count*engine.StringHeader:
				return invalidV2(map[string]any{"input": name, "min_bytes": count * engine.StringHeader, "received_bytes": size},
					"input %q: shape %s of BYTES needs at least %d bytes%s (a 4-byte length per element), %s is %d", name, serving.ShapeString(shape), count*engine.StringHeader, of, param, size)
			case dt != engine.String && size != nbytes:
				return invalidV2(map[string]any{"input": name, "expected_bytes": nbytes, "received_bytes": size},
					"input byte size mismatch for input '%s' for model '%s'. Expected %d, got %d: shape %s of %s needs %d bytes%s, %s is %d", name, lim.model, nbytes, size, serving.ShapeString(shape), dtB, nbytes, of, param, size)
			}
			return nil
		}
		// tensorOf makes the input from its serialized bytes, checking
		// that they hold exactly the shape's BYTES elements.
		tensorOf := func(b []byte) (engine.Tensor, *APIError) {
			if dt == engine.String {
				if err := engine.CheckStrings(b, count); err != nil {
					return engine.Tensor{}, invalidV2(map[string]any{"input": name},
						"input %q: the BYTES data does not hold the %d elements of shape %s, each a 4-byte little-endian length then its bytes: %v", name, count, serving.ShapeString(shape), err)
				}
			}
			return engine.Tensor{DType: dt, Shape: shape, Data: b}, nil
		}
		if region := v2Get(pm, "shared_memory_region"); region != nil {
			if params != nil || data != nil {
				return badV2(`input %q names a shared memory region and also carries "data" or "binary_data_size"; send one`, name)
			}
			ref, aerr := v2SharedMemoryRef(pm, region, "input "+strconv.Quote(name))
			if aerr != nil {
				return aerr
			}
			if ref.Size > math.MaxInt64 {
				ref.Size = math.MaxInt64 // larger than any region: refused below
			}
			if aerr := sizeError(int64(ref.Size), "", "shared_memory_byte_size"); aerr != nil {
				return aerr
			}
			if aerr := tooManyRows(); aerr != nil {
				return aerr
			}
			if shm == nil {
				return requestError(serving.SharedMemoryOff(fmt.Sprintf("input %q", name)))
			}
			// Held until the answer is written, as Triton holds it: an
			// unregister meanwhile waits for this request.
			b, err := shm.ReadAll(&req.holds, ref, alignedBytes)
			if err != nil {
				return sharedMemoryError(err)
			}
			t, aerr := tensorOf(b)
			if aerr != nil {
				return aerr
			}
			req.inputs[idx] = t
			return nil
		}
		switch {
		case params != nil && data != nil:
			return badV2(`input %q has both "data" and parameter "binary_data_size"; send one`, name)
		case params != nil:
			size, ok := v2Int(params)
			if !ok || size < 0 {
				return badV2(`input %q: parameter "binary_data_size" must be a non-negative integer, got %s`, name, params)
			}
			if !hasHdr {
				return badV2("input %q declares binary_data_size %d but the request has no %s header saying where the JSON ends and the binary data begins", name, size, v2HeaderLength)
			}
			if size > int64(len(*bin)) {
				return badV2("input %q declares binary_data_size %d but only %d bytes of binary data remain after the JSON header and the inputs before it", name, size, len(*bin))
			}
			if aerr := sizeError(size, " of binary data", "binary_data_size"); aerr != nil {
				return aerr
			}
			if aerr := tooManyRows(); aerr != nil {
				return aerr
			}
			t, aerr := tensorOf(append(alignedBytes(int(size))[:0], (*bin)[:size]...))
			if aerr != nil {
				return aerr
			}
			*bin = (*bin)[size:]
			req.inputs[idx] = t
		case data != nil:
			if data.Type() != fastjson.TypeArray {
				return badV2(`input %q: "data" must be an array (flat or nested, in row-major order), got %s`, name, data.Type())
			}
			t, aerr := v2DataTensor(name, dt, shape, count, data, lim, tooManyRows)
			if aerr != nil {
				return aerr
			}
			req.inputs[idx] = t
		default:
			return badV2(`input %q has neither "data" nor parameter "binary_data_size"`, name)
		}
	}
	return nil
}

// v2TooManyRows refuses an input of more rows than maxRows (nil when it
// has no more).
func v2TooManyRows(name string, shape []int64, maxRows int) *APIError {
	msg := serving.TooManyRows(name, shape, maxRows)
	if msg == "" {
		return nil
	}
	return &APIError{Status: 413, Code: CodeTooLarge, Message: msg,
		Details: map[string]any{"input": name, "rows": shape[0], "max_rows": maxRows}}
}

// v2DataTensor reads an input's JSON "data" (an array, flat or nested)
// into a tensor of dt and shape (count elements): refused when its bytes
// pass lim.maxBytes, when the elements do not fill the shape, or (checked
// before allocating) by tooManyRows.
func v2DataTensor(name string, dt engine.DType, shape []int64, count int64, data jv, lim v2Limits, tooManyRows func() *APIError) (engine.Tensor, *APIError) {
	if nbytes := count * int64(dt.Size()); dt != engine.String && lim.maxBytes > 0 && nbytes > lim.maxBytes {
		return engine.Tensor{}, v2InputTooLarge(name, nbytes, lim.maxBytes)
	}
	// Each element takes at least two bytes of JSON ("1,"): a shape that
	// needs more cannot match, and is not allocated.
	w := v2Writer{b: data, name: name, dt: dt}
	var t engine.Tensor
	if count <= int64(len(data)+1)/2 {
		if aerr := tooManyRows(); aerr != nil {
			return t, aerr
		}
		t = allocTensor(dt, shape, int(count))
		w.data, w.cap = t.Data, int(count)
		if dt == engine.String {
			w.str = make([]byte, 0, len(data))
		}
	}
	if _, aerr := w.walk(0, 0); aerr != nil {
		return engine.Tensor{}, aerr
	}
	if int64(w.n) != count {
		return engine.Tensor{}, invalidV2(map[string]any{"input": name, "expected_elements": count, "received_elements": w.n},
			"input %q: shape %s needs %d elements, \"data\" holds %d", name, serving.ShapeString(shape), count, w.n)
	}
	if dt == engine.String {
		t.Data = w.str
	}
	return t, nil
}

// v2Outputs reads the request's "outputs" (outV, nil when absent) into req.
func v2Outputs(req *v2Request, outV jv, outs []engine.TensorSpec, binaryDefault bool, shm *sharedmem.Registry) *APIError {
	if outV == nil {
		req.outputs = make([]v2Output, len(outs))
		for i := range outs {
			req.outputs[i] = v2Output{index: i, binary: binaryDefault}
		}
		return nil
	}
	if outV.Type() != fastjson.TypeArray {
		return badV2(`"outputs" must be an array of {"name": ...}, got %s`, outV.Type())
	}
	used := serving.NewOutputSet(outs)
	var aerr *APIError
	outV.forEach(func(k int, it jv) bool {
		itm := it.members()
		nameV := v2Get(itm, "name")
		if it.Type() != fastjson.TypeObject || nameV == nil || nameV.Type() != fastjson.TypeString {
			aerr = badV2(`outputs[%d] must be an object with a "name" string`, k)
			return false
		}
		nameB, _ := nameV.str()
		idx, e := used.Take(nameB)
		if e != nil {
			aerr = requestError(e)
			return false
		}
		o := v2Output{index: idx, binary: binaryDefault}
		if pv := v2Get(itm, "parameters"); pv != nil {
			if pv.Type() != fastjson.TypeObject {
				aerr = badV2(`output %q: "parameters" must be an object, got %s`, nameB, pv.Type())
				return false
			}
			pm := pv.members()
			if b := v2Get(pm, "binary_data"); b != nil {
				var ok bool
				if o.binary, ok = v2Bool(b); !ok {
					aerr = badV2(`output %q: parameter "binary_data" must be true or false, got %s`, nameB, b.Type())
					return false
				}
			}
			if c := v2Get(pm, "classification"); c != nil {
				n, ok := v2Int(c)
				if !ok {
					aerr = badV2(`output %q: parameter "classification" must be an integer, the number of classes to return, got %s`, nameB, c)
					return false
				}
				if err := serving.CheckClassification(outs[idx], n); err != nil {
					aerr = badV2("%s", err)
					return false
				}
				o.classes = n
			}
			if region := v2Get(pm, "shared_memory_region"); region != nil {
				ref, e := v2SharedMemoryRef(pm, region, "output "+strconv.Quote(nameB))
				if e != nil {
					aerr = e
					return false
				}
				if shm == nil { // refused before the model runs
					aerr = requestError(serving.SharedMemoryOff("output " + strconv.Quote(nameB)))
					return false
				}
				// Held until the answer is written: an unregister meanwhile
				// waits for it, as in Triton.
				if _, err := shm.Hold(&req.holds, ref); err != nil {
					aerr = sharedMemoryError(err)
					return false
				}
				o.shm, o.binary = &ref, false
			}
		}
		req.outputs = append(req.outputs, o)
		return true
	})
	if aerr != nil {
		return aerr
	}
	return nil
}

// v2SpecDType is the spec's dtype, FP32 when the model does not say.
func v2SpecDType(spec engine.TensorSpec) engine.DType {
	if spec.DType == engine.Invalid {
		return engine.Float32
	}
	return spec.DType
}

// v2Writer fills a tensor from "data", b, a flat or nested JSON array read
// in row-major order; the shape is the request's, not the nesting. With
// cap 0 (a shape larger than b can hold) it only counts the elements.
// BYTES elements are JSON strings, appended to str in engine's serialized
// form (see strings.go).
type v2Writer struct {
	b    jv
	dt   engine.DType
	data []byte
	str  []byte // BYTES: the elements' serialized form, appended as read
	cap  int
	name string
	n    int
}

// walk reads the value at b[i], depth levels into "data", and returns its
// end. Nested arrays are read as one flat list.
func (w *v2Writer) walk(i, depth int) (int, *APIError) {
	b := w.b
	if depth >= v2MaxDataDepth {
		return i, badV2(`JSON nesting depth exceeds maximum allowed limit (%d) (input %q: "data" nests %d levels deep or more; send it flat, in row-major order)`, v2MaxDataDepth, w.name, v2MaxDataDepth)
	}
	if i >= len(b) || b[i] != '[' {
		if depth == 0 {
			return i, badV2(`input %q: "data" must be an array (flat or nested, in row-major order), got %s`, w.name, jv(b).Type())
		}
		return w.put(i)
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for i < len(b) {
		end, aerr := w.walk(i, depth+1)
		if aerr != nil {
			return end, aerr
		}
		i = skipWS(b, end)
		if i < len(b) && b[i] == ',' {
			i = skipWS(b, i+1)
			continue
		}
		return i + 1, nil // the ']'
	}
	return i, nil
}

// put reads the scalar at b[i] into element w.n and returns its end.
func (w *v2Writer) put(i int) (int, *APIError) {
	b := w.b
	k := w.n
	w.n++
	if w.dt == engine.String {
		e, err := scanValue(b, i, 0)
		if err != nil {
			e = len(b)
		}
		v := jv(b[i:e])
		if v.Type() != fastjson.TypeString {
			return e, invalidV2(map[string]any{"input": w.name, "element": k},
				"input %q: element %d is %s where a BYTES string belongs", w.name, k, v.Type())
		}
		if k < w.cap {
			if w.str, err = appendStringElement(w.str, v); err != nil {
				return e, newError(400, CodeInvalidJSON, fmt.Sprintf("the inference request is not valid JSON: input %q element %d: %v", w.name, k, err), nil)
			}
		}
		return e, nil
	}
	if w.dt.IsFloat() { // the common case, read in one pass
		if f, end, ok := fastFloat(b, i); ok {
			if k < w.cap {
				putFloat(w.data, k, w.dt, f)
			}
			return end, nil
		}
	}
	end := numberEnd(b, i)
	if end == i {
		e, err := scanValue(b, i, 0)
		if err != nil {
			e = len(b)
		}
		ty := jv(b[i:e]).Type()
		if w.dt == engine.Bool && (ty == fastjson.TypeTrue || ty == fastjson.TypeFalse) {
			if k < w.cap {
				w.data[k] = 0
				if ty == fastjson.TypeTrue {
					w.data[k] = 1
				}
			}
			return e, nil
		}
		return e, invalidV2(map[string]any{"input": w.name, "element": k},
			"input %q: element %d is %s where a %s number belongs", w.name, k, ty, serving.DatatypeName(w.dt))
	}
	v := jv(b[i:end])
	if w.dt.IsFloat() {
		f, ok := v.float()
		if !ok {
			return end, notANumber(v)
		}
		if k < w.cap {
			putFloat(w.data, k, w.dt, f)
		}
		return end, nil // beyond cap: counted; the caller reports the mismatch
	}
	bits, ok, inRange := parseInt(v, w.dt)
	if !ok {
		return end, invalidV2(map[string]any{"input": w.name, "element": k},
			"input %q: element %d is %s; %s takes integers", w.name, k, v, serving.DatatypeName(w.dt))
	}
	if !inRange {
		return end, invalidV2(map[string]any{"input": w.name, "element": k},
			"input %q: element %d is %s, out of the range of %s", w.name, k, v, serving.DatatypeName(w.dt))
	}
	if k < w.cap {
		putInt(w.data, k, w.dt, bits)
	}
	return end, nil
}

// v2Infer serves POST /v2/models/{name}[/versions/{v}]/infer.
func (s *Server) v2Infer(ctx *fasthttp.RequestCtx, name, version string) {
	inst := s.v2Model(ctx, name, version)
	if inst == nil || !s.serving(ctx) {
		return
	}
	// The body is read into a pooled buffer, given back once the request is
	// parsed (the request does not alias it), so refused requests and
	// chunked bodies leave little garbage.
	pooled := s.getBodyBuf()
	body, buf, ok := s.readBodyTo(ctx, s.cfg.MaxBodyBytes, *pooled)
	if buf != nil {
		*pooled = buf
	}
	defer s.putBodyBuf(pooled)
	if !ok {
		return
	}
	var req *v2Request
	var aerr *APIError
	if hdr := ctx.Request.Header.Peek(v2HeaderLength); isRawBinary(hdr) {
		req, aerr = parseRawBinary(body, inst)
	} else {
		req, aerr = parseV2Request(body, hdr, inst.Inputs(), inst.Outputs(), s.v2Limits(inst), s.cfg.SharedMemory)
	}
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	defer req.holds.Release()
	if aerr := s.forwardHeaders(ctx, &req.params); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	out, rec, err := s.v2Run(ctx, inst, req)
	if err != nil {
		writeError(ctx, s.submitError(err))
		return
	}
	if req.id != nil {
		_ = json.Unmarshal(req.id, &rec.ID) // a JSON string; another value leaves no ID
	}
	if s.v2WriteResponse(ctx, inst, req, out) {
		s.done(inst, rec)
	} else {
		rec.Encoded = time.Now()
		inst.Stats.Record(rec)
		s.untrace(rec)
	}
}

// v2Limits are the bounds of inst's V2 requests (--max-rows for a batched
// model, --max-body-bytes for a tensor given as JSON).
func (s *Server) v2Limits(inst *serving.Instance) v2Limits {
	return v2Limits{maxRows: serving.RowLimit(inst, s.cfg.MaxRows), maxBytes: s.cfg.MaxBodyBytes, model: inst.Name()}
}

// v2Run admits req to its sequence (a stateful model) and runs it within
// the request timeout: what /infer and /generate share once a request is
// read. A refused admission is returned as the error, with no statistics.
func (s *Server) v2Run(ctx *fasthttp.RequestCtx, inst *serving.Instance, req *v2Request) ([]engine.Tensor, serving.Request, error) {
	ticket, err := serving.EnterSequence(inst, req.seq, req.inputs)
	if err != nil {
		return nil, serving.Request{}, err
	}
	defer ticket.Release()
	rctx, cancel := s.requestContext(ctx)
	defer cancel()
	rctx = serving.WithRequestInfo(rctx, req.idString(), &req.params)
	rctx, req.sink = serving.WithResponseSink(rctx, inst)
	if len(req.outputs) < len(inst.Outputs()) && inst.SkipsOutputs() {
		idx := make([]int, len(req.outputs))
		for i, o := range req.outputs {
			idx[i] = o.index
		}
		rctx = serving.WithOutputs(rctx, idx)
	}
	return s.inferSequence(rctx, inst, req.inputs, ctx.Time(), ticket)
}

// v2WriteResponse writes the inference response: JSON, then the binary
// outputs' raw bytes in the order the JSON lists them.
// Outputs bound for shared memory are written there first; when one does
// not fit its window the answer is that error instead, and false.
func (s *Server) v2WriteResponse(ctx *fasthttp.RequestCtx, inst *serving.Instance, req *v2Request, out []engine.Tensor) bool {
	specs := inst.Outputs()
	// answer[k] is what request output k answers: the output itself, or
	// its classes (Triton's classification extension).
	answer := make([]engine.Tensor, len(req.outputs))
	// given says whether output o is in the answer: the engine returned it
	// (not fewer outputs than the model declares, not one a Python model's
	// response left out, which is left out here too, as Triton does).
	given := func(o v2Output) bool { return o.index < len(out) && !out[o.index].Absent() }
	for k, o := range req.outputs {
		if !given(o) {
			continue
		}
		answer[k] = out[o.index]
		if o.classes > 0 {
			c, err := inst.Classes(out[o.index], v2OutputName(specs, o.index), o.classes)
			if err != nil {
				writeError(ctx, badV2("%s", err))
				return false
			}
			answer[k] = c
		}
	}
	for k, o := range req.outputs {
		if given(o) && o.shm == nil && !o.binary && answer[k].DType == engine.String {
			// JSON strings are UTF-8; bytes that are not cannot be written
			// as they are, and changing them would answer other data than
			// the model's. Triton refuses the same.
			if i := firstNonUTF8(answer[k]); i >= 0 {
				writeError(ctx, badV2("output %q element %d holds BYTES that are not valid UTF-8, which a JSON answer cannot carry: request the output as binary data (\"parameters\": {\"binary_data\": true}; tritonclient's InferRequestedOutput(name, binary_data=True))", v2OutputName(specs, o.index), i))
				return false
			}
		}
	}
	for k, o := range req.outputs {
		if o.shm != nil && given(o) {
			if aerr := s.writeSharedMemory(o.shm, answer[k], v2OutputName(specs, o.index)); aerr != nil {
				writeError(ctx, aerr)
				return false
			}
		}
	}
	buf := s.getBuf()
	b := append((*buf)[:0], `{"model_name":`...)
	b = appendJSONString(b, inst.Name())
	b = append(b, `,"model_version":`...)
	b = appendJSONString(b, inst.Version())
	if req.id != nil {
		b = append(b, `,"id":`...)
		b = append(b, req.id...)
	}
	sp, echo := serving.SequenceEcho(inst, req.seq)
	keys, vals := serving.ResponseParameters(req.sink)
	if echo || len(keys) > 0 {
		b = append(b, `,"parameters":{`...)
		if echo {
			b = append(b, `"sequence_id":`...)
			if sp.ID.S != "" {
				b = appendJSONString(b, sp.ID.S)
			} else {
				b = strconv.AppendUint(b, sp.ID.N, 10)
			}
			b = append(b, `,"sequence_start":`...)
			b = strconv.AppendBool(b, sp.Start)
			b = append(b, `,"sequence_end":`...)
			b = strconv.AppendBool(b, sp.End)
		}
		for i, k := range keys { // the model's response parameters
			if echo || i > 0 {
				b = append(b, ',')
			}
			b = append(appendJSONString(b, k), ':')
			switch v := vals[k].(type) {
			case string:
				b = appendJSONString(b, v)
			case int64:
				b = strconv.AppendInt(b, v, 10)
			case bool:
				b = strconv.AppendBool(b, v)
			}
		}
		b = append(b, '}')
	}
	b = append(b, `,"outputs":[`...)
	anyBinary := false
	first := true
	for k, o := range req.outputs {
		if !given(o) {
			continue
		}
		t := answer[k]
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, `{"name":`...)
		b = appendJSONString(b, v2OutputName(specs, o.index))
		b = append(b, `,"datatype":"`...)
		b = append(b, serving.DatatypeName(t.DType)...)
		b = append(b, `","shape":`...)
		b = append(b, serving.ShapeString(t.Shape)...)
		if o.shm != nil {
			b = append(b, `,"parameters":{"shared_memory_region":`...)
			b = appendJSONString(b, o.shm.Region)
			b = append(b, `,"shared_memory_byte_size":`...)
			b = strconv.AppendInt(b, int64(len(t.Data)), 10)
			b = append(b, "}}"...)
			continue
		}
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
		return true
	}
	ctx.Response.Header.Set(v2HeaderLength, strconv.Itoa(len(b)))
	ctx.Response.Header.SetContentType("application/octet-stream")
	for k, o := range req.outputs {
		if o.binary && given(o) {
			ctx.Response.AppendBody(answer[k].Data)
		}
	}
	return true
}

// v2OutputName is the name of output i.
func v2OutputName(specs []engine.TensorSpec, i int) string {
	if i < len(specs) {
		return specs[i].Name
	}
	return fmt.Sprintf("output_%d", i)
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
	elem := elementWriter(t)
	for i, n := 0, t.Len(); i < n; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = elem(b, i)
	}
	return b
}

// writeSharedMemory copies an output into the shared memory window the
// request named for it, refusing one too small.
func (s *Server) writeSharedMemory(ref *sharedmem.Ref, t engine.Tensor, name string) *APIError {
	if s.cfg.SharedMemory == nil {
		return requestError(serving.SharedMemoryOff(fmt.Sprintf("output %q", name)))
	}
	if uint64(len(t.Data)) > ref.Size {
		return invalidV2(map[string]any{"output": name, "output_bytes": len(t.Data), "shared_memory_byte_size": ref.Size},
			"output %q of shape %s needs %d bytes, more than shared_memory_byte_size %d", name, serving.ShapeString(t.Shape), len(t.Data), ref.Size)
	}
	if err := s.cfg.SharedMemory.Write(*ref, t.Data); err != nil {
		return sharedMemoryError(err)
	}
	return nil
}
