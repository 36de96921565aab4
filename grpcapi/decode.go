package grpcapi

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/fw-serve/fw/engine"
	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/serving"
	"github.com/fw-serve/fw/sharedmem"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// request is a decoded ModelInfer request: the inputs in the model's order
// and the indexes of the outputs to return, in the order the client asked.
type request struct {
	// holds are the shared memory regions it names, held until it has
	// answered (release).
	holds   sharedmem.Holds
	inputs  []engine.Tensor
	outputs []int
	// shm holds, for the outputs that go into shared memory (by index into
	// the model's outputs), the window each goes into.
	shm map[int]sharedmem.Ref
	// classes holds, for the outputs requested with the classification
	// parameter (by index into the model's outputs), how many classes.
	classes map[int]int64
}

// shmRef reads the shared memory parameters of an input or output (what
// names it, for messages); ok is false when it names no region.
func shmRef(params map[string]*pb.InferParameter, what string) (ref sharedmem.Ref, ok bool, err error) {
	region, has := params["shared_memory_region"]
	if !has {
		return ref, false, nil
	}
	ref.Region = region.GetStringParam()
	if ref.Region == "" {
		return ref, true, invalid("%s: parameter \"shared_memory_region\" must be a region's name (string_param)", what)
	}
	size, has := params["shared_memory_byte_size"]
	if !has {
		return ref, true, invalid("%s: parameter \"shared_memory_byte_size\" is needed with \"shared_memory_region\"", what)
	}
	n, ok2 := paramUint(size)
	if !ok2 {
		return ref, true, invalid("%s: parameter \"shared_memory_byte_size\" must be a non-negative integer", what)
	}
	ref.Size = n
	if off, has := params["shared_memory_offset"]; has {
		if ref.Offset, ok2 = paramUint(off); !ok2 {
			return ref, true, invalid("%s: parameter \"shared_memory_offset\" must be a non-negative integer", what)
		}
	}
	return ref, true, nil
}

// paramUint reads an integer parameter sent as int64_param or uint64_param.
func paramUint(p *pb.InferParameter) (uint64, bool) {
	switch c := p.GetParameterChoice().(type) {
	case *pb.InferParameter_Int64Param:
		return uint64(c.Int64Param), c.Int64Param >= 0
	case *pb.InferParameter_Uint64Param:
		return c.Uint64Param, true
	}
	return 0, false
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// refused is the status of a request serving's rules refused.
func refused(e *serving.RequestError) error {
	return status.Error(codes.InvalidArgument, e.Message)
}

// decode checks req against the model's inputs and outputs and the limits
// and builds the input tensors (the request's parameters are the caller's:
// serving.SequenceParams, read by admit). Every size is checked before anything is
// allocated: the shape's element count against the bytes or values that
// carry it (which the message size limit bounds) and the rows against
// maxRows (0: none). Raw inputs are used in place (they alias req's
// raw_input_contents, which the caller must not change); typed ones are
// copied.
func decode(req *pb.ModelInferRequest, ins, outs []engine.TensorSpec, maxRows int, shm *sharedmem.Registry) (*request, error) {
	r := &request{inputs: make([]engine.Tensor, len(ins))}
	done := false
	defer func() {
		if !done { // failed, or panicked: the shared memory regions read so far
			r.holds.Release()
		}
	}()
	if err := decodeInto(r, req, ins, outs, maxRows, shm); err != nil {
		return nil, err
	}
	done = true
	return r, nil
}

// decodeInto is decode into r.
func decodeInto(r *request, req *pb.ModelInferRequest, ins, outs []engine.TensorSpec, maxRows int, shm *sharedmem.Registry) error {
	raw := req.GetRawInputContents()
	if len(raw) > 0 {
		for _, in := range req.GetInputs() {
			if c := in.GetContents(); c != nil && typedLen(c) > 0 {
				return invalid("contents field must not be specified when using raw_input_contents for '%s' for model '%s'; send every input in raw_input_contents or every one in contents", in.GetName(), req.GetModelName())
			}
		}
	}
	inBody := 0 // the inputs whose data is in the message (not in shared memory)
	for _, in := range req.GetInputs() {
		if _, ok := in.GetParameters()["shared_memory_region"]; !ok {
			inBody++
		}
	}
	if len(raw) > 0 && len(raw) != inBody {
		return invalid("raw_input_contents has %d entries for %d inputs carried in the message; send one entry per such input, in the order of inputs", len(raw), inBody)
	}
	next := 0 // the raw_input_contents entry of the next input carried in the message
	if _, ok := req.GetParameters()["shared_memory_region"]; ok {
		return invalid("request parameter %q is not supported by fw: send the data in the request", "shared_memory_region")
	}
	seen := serving.NewInputSet(ins)
	for _, in := range req.GetInputs() {
		idx, e := seen.Take(in.GetName())
		if e != nil {
			return refused(e)
		}
		ref, inShm, err := shmRef(in.GetParameters(), fmt.Sprintf("input %q", in.GetName()))
		if err != nil {
			return err
		}
		if inShm {
			t, err := decodeShmInput(in, ins[idx], ref, maxRows, shm, req.GetModelName(), &r.holds)
			if err != nil {
				return err
			}
			r.inputs[idx] = t
			continue
		}
		var rawData []byte
		if len(raw) > 0 {
			rawData = raw[next]
			next++
		}
		t, err := decodeInput(in, ins[idx], rawData, len(raw) > 0, maxRows)
		if err != nil {
			return err
		}
		r.inputs[idx] = t
	}
	if e := seen.Missing(); e != nil {
		return refused(e)
	}
	if len(req.GetOutputs()) == 0 {
		r.outputs = make([]int, len(outs))
		for i := range outs {
			r.outputs[i] = i
		}
		return nil
	}
	used := serving.NewOutputSet(outs)
	for _, o := range req.GetOutputs() {
		idx, e := used.Take(o.GetName())
		if e != nil {
			return refused(e)
		}
		if p, ok := o.GetParameters()["classification"]; ok {
			var n int64
			switch c := p.GetParameterChoice().(type) {
			case *pb.InferParameter_Int64Param:
				n = c.Int64Param
			case *pb.InferParameter_Uint64Param:
				n = int64(min(c.Uint64Param, math.MaxInt64))
			default:
				return invalid("output %q: invalid value type for 'classification' parameter, expected int64_param", o.GetName())
			}
			if err := serving.CheckClassification(outs[idx], n); err != nil {
				return invalid("%s", err)
			}
			if n > 0 {
				if r.classes == nil {
					r.classes = map[int]int64{}
				}
				r.classes[idx] = n
			}
		}
		ref, inShm, err := shmRef(o.GetParameters(), fmt.Sprintf("output %q", o.GetName()))
		if err != nil {
			return err
		}
		if inShm {
			if shm == nil {
				return refused(serving.SharedMemoryOff(fmt.Sprintf("output %q", o.GetName())))
			}
			// Held until the answer is sent: an unregister meanwhile
			// waits for it, as in Triton.
			if _, err := shm.Hold(&r.holds, ref); err != nil {
				return sharedMemoryStatus(err)
			}
			if r.shm == nil {
				r.shm = map[int]sharedmem.Ref{}
			}
			r.shm[idx] = ref
		}
		r.outputs = append(r.outputs, idx)
	}
	return nil
}

// decodeInput builds one input tensor from its raw bytes (useRaw) or its
// typed contents.
func decodeInput(in *pb.ModelInferRequest_InferInputTensor, spec engine.TensorSpec, rawData []byte, useRaw bool, maxRows int) (engine.Tensor, error) {
	name := in.GetName()
	dt, e := serving.InputDatatype(name, in.GetDatatype(), spec)
	if e != nil {
		return engine.Tensor{}, refused(e)
	}
	shape := in.GetShape()
	if e := serving.TooManyAxes(name, len(shape)); e != nil {
		return engine.Tensor{}, refused(e)
	}
	// The element count, saturating: a count beyond what the message can
	// carry is refused below without being allocated.
	count := int64(1)
	for _, d := range shape {
		if d < 0 {
			return engine.Tensor{}, invalid("input %q: shape %s has a negative dimension; every dimension must be a size >= 0", name, serving.ShapeString(shape))
		}
		if d == 0 {
			count = 0
		} else if count > 0 && count <= math.MaxInt64/8/d {
			count *= d
		} else if count > 0 {
			count = math.MaxInt64 / 8
		}
	}
	size := int64(dt.Size())
	contents := in.GetContents()
	if useRaw {
		if contents != nil && typedLen(contents) > 0 {
			return engine.Tensor{}, invalid("input %q has both typed contents and raw_input_contents; send one form for every input", name)
		}
		if dt == engine.String {
			if err := engine.CheckStrings(rawData, count); err != nil {
				return engine.Tensor{}, invalid("input %q: its raw_input_contents entry does not hold the %d BYTES elements of shape %s, each a 4-byte little-endian length then its bytes: %v", name, count, serving.ShapeString(shape), err)
			}
		} else if count*size != int64(len(rawData)) {
			return engine.Tensor{}, invalid("input %q: shape %s of %s needs %d bytes, its raw_input_contents entry has %d", name, serving.ShapeString(shape), in.GetDatatype(), count*size, len(rawData))
		}
	} else {
		n := int64(0)
		if contents != nil {
			n = int64(typedCount(contents, dt))
		}
		if dt == engine.Float16 || dt == engine.BFloat16 {
			return engine.Tensor{}, invalid("input %q: %s has no typed contents field; send it in raw_input_contents", name, in.GetDatatype())
		}
		if n != count {
			return engine.Tensor{}, invalid("input %q: shape %s needs %d elements, its contents hold %d in the field for %s (%s)", name, serving.ShapeString(shape), count, n, in.GetDatatype(), contentsField(dt))
		}
		if other := typedLen(contents) - int(n); other > 0 {
			return engine.Tensor{}, invalid("input %q: %d values are in a contents field other than %s, the one for %s", name, other, contentsField(dt), in.GetDatatype())
		}
	}
	if msg := serving.TooManyRows(name, shape, maxRows); msg != "" {
		return engine.Tensor{}, status.Error(codes.ResourceExhausted, msg)
	}
	if useRaw && len(rawData) > 0 && (dt == engine.String || uintptr(unsafe.Pointer(&rawData[0]))%uintptr(dt.Size()) == 0) {
		// The bytes are already the tensor: protobuf decoding gave the
		// message its own copy of them (grpc frees its receive buffer), and
		// the batcher and the engine only read inputs.
		return engine.Tensor{DType: dt, Shape: shape, Data: rawData}, nil
	}
	if dt == engine.String && !useRaw {
		t, err := engine.FromStrings(shape, contents.GetBytesContents()) // their count is the shape's
		if err != nil {
			return engine.Tensor{}, invalid("input %q: %v", name, err)
		}
		return t, nil
	}
	t, err := engine.NewTensor(dt, shape)
	if err != nil {
		return engine.Tensor{}, invalid("input %q: %v", name, err)
	}
	if useRaw {
		copy(t.Data, rawData) // empty, or not aligned for the element type
		return t, nil
	}
	if err := fillTyped(t, contents, name); err != nil {
		return engine.Tensor{}, err
	}
	return t, nil
}

// contentsField names the typed contents field of a datatype.
func contentsField(dt engine.DType) string {
	switch dt {
	case engine.Bool:
		return "bool_contents"
	case engine.Int8, engine.Int16, engine.Int32:
		return "int_contents"
	case engine.Int64:
		return "int64_contents"
	case engine.Uint8, engine.Uint16, engine.Uint32:
		return "uint_contents"
	case engine.Uint64:
		return "uint64_contents"
	case engine.Float32:
		return "fp32_contents"
	case engine.Float64:
		return "fp64_contents"
	case engine.String:
		return "bytes_contents"
	}
	return "raw_input_contents"
}

// typedCount is the number of values in the field for dt.
func typedCount(c *pb.InferTensorContents, dt engine.DType) int {
	switch dt {
	case engine.Bool:
		return len(c.GetBoolContents())
	case engine.Int8, engine.Int16, engine.Int32:
		return len(c.GetIntContents())
	case engine.Int64:
		return len(c.GetInt64Contents())
	case engine.Uint8, engine.Uint16, engine.Uint32:
		return len(c.GetUintContents())
	case engine.Uint64:
		return len(c.GetUint64Contents())
	case engine.Float32:
		return len(c.GetFp32Contents())
	case engine.Float64:
		return len(c.GetFp64Contents())
	case engine.String:
		return len(c.GetBytesContents())
	}
	return 0
}

// typedLen is the number of values in every field.
func typedLen(c *pb.InferTensorContents) int {
	if c == nil {
		return 0
	}
	return len(c.GetBoolContents()) + len(c.GetIntContents()) + len(c.GetInt64Contents()) + len(c.GetUintContents()) +
		len(c.GetUint64Contents()) + len(c.GetFp32Contents()) + len(c.GetFp64Contents()) + len(c.GetBytesContents())
}

// fillTyped writes the typed values into t (whose size typedCount matched),
// checking that each fits t's dtype.
func fillTyped(t engine.Tensor, c *pb.InferTensorContents, name string) error {
	d := t.Data
	switch t.DType {
	case engine.Float32:
		for i, v := range c.GetFp32Contents() {
			binary.LittleEndian.PutUint32(d[i*4:], math.Float32bits(v))
		}
	case engine.Float64:
		for i, v := range c.GetFp64Contents() {
			binary.LittleEndian.PutUint64(d[i*8:], math.Float64bits(v))
		}
	case engine.Int64:
		for i, v := range c.GetInt64Contents() {
			binary.LittleEndian.PutUint64(d[i*8:], uint64(v))
		}
	case engine.Int32:
		for i, v := range c.GetIntContents() {
			binary.LittleEndian.PutUint32(d[i*4:], uint32(v))
		}
	case engine.Int8:
		for i, v := range c.GetIntContents() {
			if v < math.MinInt8 || v > math.MaxInt8 {
				return invalid("input %q: element %d is %d, out of the range of INT8", name, i, v)
			}
			d[i] = byte(int8(v))
		}
	case engine.Int16:
		for i, v := range c.GetIntContents() {
			if v < math.MinInt16 || v > math.MaxInt16 {
				return invalid("input %q: element %d is %d, out of the range of INT16", name, i, v)
			}
			binary.LittleEndian.PutUint16(d[i*2:], uint16(v))
		}
	case engine.Uint8:
		for i, v := range c.GetUintContents() {
			if v > math.MaxUint8 {
				return invalid("input %q: element %d is %d, out of the range of UINT8", name, i, v)
			}
			d[i] = byte(v)
		}
	case engine.Uint16:
		for i, v := range c.GetUintContents() {
			if v > math.MaxUint16 {
				return invalid("input %q: element %d is %d, out of the range of UINT16", name, i, v)
			}
			binary.LittleEndian.PutUint16(d[i*2:], uint16(v))
		}
	case engine.Uint32:
		for i, v := range c.GetUintContents() {
			binary.LittleEndian.PutUint32(d[i*4:], v)
		}
	case engine.Uint64:
		for i, v := range c.GetUint64Contents() {
			binary.LittleEndian.PutUint64(d[i*8:], v)
		}
	case engine.Bool:
		for i, v := range c.GetBoolContents() {
			if v {
				d[i] = 1
			}
		}
	}
	return nil
}

// decodeShmInput builds an input tensor from the shared memory window ref
// names: its datatype and shape checked as decodeInput checks them, its
// byte size against the shape's.
func decodeShmInput(in *pb.ModelInferRequest_InferInputTensor, spec engine.TensorSpec, ref sharedmem.Ref, maxRows int, shm *sharedmem.Registry, model string, holds *sharedmem.Holds) (engine.Tensor, error) {
	name := in.GetName()
	if shm == nil {
		return engine.Tensor{}, refused(serving.SharedMemoryOff(fmt.Sprintf("input %q", name)))
	}
	if in.GetContents() != nil && typedLen(in.GetContents()) > 0 {
		return engine.Tensor{}, invalid("input %q names a shared memory region and also carries contents; send one", name)
	}
	dt, e := serving.InputDatatype(name, in.GetDatatype(), spec)
	if e != nil {
		return engine.Tensor{}, refused(e)
	}
	shape := in.GetShape()
	if e := serving.TooManyAxes(name, len(shape)); e != nil {
		return engine.Tensor{}, refused(e)
	}
	count := uint64(1)
	for _, d := range shape {
		if d < 0 {
			return engine.Tensor{}, invalid("input %q: shape %s has a negative dimension", name, serving.ShapeString(shape))
		}
		if d > 0 && count > sharedmem.MaxRegionBytes/uint64(d) {
			return engine.Tensor{}, invalid("input %q: shape %s is larger than any shared memory region", name, serving.ShapeString(shape))
		}
		count *= uint64(d)
	}
	if dt == engine.String {
		if need := count * engine.StringHeader; need > ref.Size || count > sharedmem.MaxRegionBytes/engine.StringHeader {
			return engine.Tensor{}, invalid("input %q: shape %s of BYTES needs at least %d bytes (a 4-byte length per element), shared_memory_byte_size is %d", name, serving.ShapeString(shape), need, ref.Size)
		}
	} else if need := count * uint64(dt.Size()); need != ref.Size {
		return engine.Tensor{}, invalid("input byte size mismatch for input '%s' for model '%s'. Expected %d, got %d: shape %s of %s needs %d bytes, shared_memory_byte_size is %d", name, model, need, ref.Size, serving.ShapeString(shape), in.GetDatatype(), need, ref.Size)
	}
	if msg := serving.TooManyRows(name, shape, maxRows); msg != "" {
		return engine.Tensor{}, status.Error(codes.ResourceExhausted, msg)
	}
	// The window is checked against its registered region before its copy
	// is allocated: a claimed size allocates nothing. The region is held
	// until the request has answered, as in Triton.
	data, err := shm.ReadAll(holds, ref, func(n int) []byte {
		t, _ := engine.NewTensor(engine.Uint8, []int64{int64(n)}) // aligned for any element type
		return t.Data
	})
	if err != nil {
		return engine.Tensor{}, sharedMemoryStatus(err)
	}
	if dt == engine.String {
		if err := engine.CheckStrings(data, int64(count)); err != nil {
			return engine.Tensor{}, invalid("input %q: shared memory does not hold the %d BYTES elements of shape %s, each a 4-byte little-endian length then its bytes: %v", name, count, serving.ShapeString(shape), err)
		}
	}
	return engine.Tensor{DType: dt, Shape: shape, Data: data}, nil
}
