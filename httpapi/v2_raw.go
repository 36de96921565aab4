package httpapi

// Triton's raw binary request (the binary tensor data extension's
// Inference-Header-Content-Length: 0): the whole body is the bytes of the
// model's one input, whose shape is deduced from the byte count — a batch
// of one for a batched model, and at most one variable dimension; for a
// BYTES input, the body is its one element — and every output comes back
// as binary data.

import (
	"bytes"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/serving"
)

// isRawBinary reports whether the header says the body holds no JSON.
func isRawBinary(hdrLen []byte) bool {
	return len(bytes.TrimSpace(hdrLen)) == 1 && bytes.TrimSpace(hdrLen)[0] == '0'
}

// parseRawBinary builds the request of a raw binary body for inst.
func parseRawBinary(body []byte, inst *serving.Instance) (*v2Request, *APIError) {
	ins, outs := inst.Inputs(), inst.Outputs()
	if len(ins) != 1 {
		return nil, badV2("Raw request must only have 1 input (found 1) to be deduced but got %d inputs in '%s' model configuration; send a JSON request (or JSON with binary data and a non-zero %s)", len(ins), inst.Name(), v2HeaderLength)
	}
	spec := ins[0]
	dt := v2SpecDType(spec)
	shape := append([]int64{}, spec.Shape...)
	start := 0
	if inst.Batched() && len(shape) > 0 {
		shape[0], start = 1, 1 // a raw request is a batch of one
	}
	if dt == engine.String {
		return rawString(body, spec, shape[:start], rawStringDims(inst, spec, shape[start:]), outs)
	}
	size := dt.Size()
	if size <= 0 {
		return nil, badV2("input '%s' of datatype %s can not be sent as a raw binary request", spec.Name, serving.DatatypeName(spec.DType))
	}
	variable, fixed := -1, int64(1)
	for i := start; i < len(shape); i++ {
		if shape[i] < 0 {
			if variable >= 0 {
				return nil, badV2("The shape of the raw input '%s' can not be deduced because there are more than one variable-sized dimension", spec.Name)
			}
			variable = i
			continue
		}
		fixed *= shape[i]
	}
	if len(body)%size != 0 {
		return nil, badV2("the raw binary body of %d bytes is not a whole number of %s elements (%d bytes each) for input '%s'", len(body), serving.DatatypeName(dt), size, spec.Name)
	}
	n := int64(len(body) / size)
	switch {
	case variable >= 0 && fixed > 0 && n%fixed == 0:
		shape[variable] = n / fixed
	case variable < 0 && n == fixed:
	default:
		return nil, invalidV2(map[string]any{"input": spec.Name, "received_bytes": len(body)},
			"the raw binary body of %d bytes (%d elements) does not fill input '%s' of shape %s", len(body), n, spec.Name, serving.ShapeString(spec.Shape))
	}
	t := allocTensor(dt, shape, int(n))
	copy(t.Data, body)
	return rawBinaryRequest(t, outs), nil
}

// rawStringDims are the dims of a BYTES input without its batch axis, as
// the model's configuration gives them (config.pbtxt's dims may fix what the
// file leaves variable), else the file's (fileDims).
func rawStringDims(inst *serving.Instance, spec engine.TensorSpec, fileDims []int64) []int64 {
	for _, c := range inst.Config.Inputs {
		if c.Name == spec.Name && len(c.Dims) > 0 {
			return c.Dims
		}
	}
	return fileDims
}

// rawString is the raw binary request of a BYTES input: as Triton reads it,
// the whole body is the input's one element, so the input's shape less its
// batch axis, dims, must be [1]; batch is the batch axis ([1]), if any.
func rawString(body []byte, spec engine.TensorSpec, batch, dims []int64, outs []engine.TensorSpec) (*v2Request, *APIError) {
	if len(dims) != 1 || dims[0] != 1 {
		return nil, badV2("For BYTE datatype raw input '%s', the model must have input shape [1] (this model's is %s, without its batch axis): the raw body is one element; send a JSON request, or JSON with binary data and a non-zero %s", spec.Name, serving.ShapeString(dims), v2HeaderLength)
	}
	t, err := engine.FromStrings(append(batch[:len(batch):len(batch)], 1), [][]byte{body})
	if err != nil {
		return nil, invalidV2(map[string]any{"input": spec.Name}, "input '%s': %v", spec.Name, err)
	}
	return rawBinaryRequest(t, outs), nil
}

// rawBinaryRequest is the request of a raw binary body's one input: every output
// answered as binary data.
func rawBinaryRequest(t engine.Tensor, outs []engine.TensorSpec) *v2Request {
	req := &v2Request{inputs: []engine.Tensor{t}, outputs: make([]v2Output, len(outs))}
	for i := range outs {
		req.outputs[i] = v2Output{index: i, binary: true}
	}
	return req
}
