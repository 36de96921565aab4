package serving

import (
	"fmt"

	"github.com/fw-serve/fw/engine"
)

// The rules an Open Inference Protocol request's tensors must follow that
// do not depend on how they travel: which inputs and outputs it names, and
// each input's datatype. httpapi (JSON and the binary extension) and
// grpcapi (protobuf) decode their own encodings and ask these for every
// verdict, so one request gets one answer, with one message, over both.

// RequestError is a request refused for a reason the client can fix. gRPC
// answers it INVALID_ARGUMENT with Message; HTTP answers 400 with Message
// and Details under /v2 (fw's own routes: 422 when Invalid, else 400).
type RequestError struct {
	// Invalid marks a well-formed request that does not fit the model (an
	// unknown or missing input, a wrong datatype), as opposed to one that
	// breaks the protocol (an input given twice).
	Invalid bool
	Message string
	// Details are the facts HTTP clients read from the error body: the
	// tensor's name, what the model takes. Nil when none.
	Details map[string]any
}

func (e *RequestError) Error() string { return e.Message }

func badRequest(format string, args ...any) *RequestError {
	return &RequestError{Message: fmt.Sprintf(format, args...)}
}

// Names lists specs' names, for RequestError.Details.
func Names(specs []engine.TensorSpec) []string {
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = s.Name
	}
	return out
}

// InputSet follows the inputs a request names against the model's: each
// is known, none is given twice, and (Missing) none is left out.
type InputSet struct {
	specs []engine.TensorSpec
	seen  []bool
}

// NewInputSet starts checking a request against the model inputs specs.
func NewInputSet(specs []engine.TensorSpec) InputSet {
	return InputSet{specs: specs, seen: make([]bool, len(specs))}
}

// Take admits the input named name and returns its index in the model's
// inputs.
func (s *InputSet) Take(name string) (int, *RequestError) {
	idx := engine.SpecIndex(s.specs, name)
	if idx < 0 {
		return -1, &RequestError{Invalid: true, Details: map[string]any{"input": name, "expected_inputs": Names(s.specs)},
			Message: fmt.Sprintf("unknown input %q; this model takes %s", name, Describe(s.specs))}
	}
	if s.seen[idx] {
		// Triton's sentence first: its clients match it.
		return -1, badRequest("input '%s' already exists in request; give each input once", name)
	}
	s.seen[idx] = true
	return idx, nil
}

// Missing refuses a request that left out one of the model's inputs (an
// optional one may be), once every input it gave was taken.
func (s *InputSet) Missing() *RequestError {
	for i, ok := range s.seen {
		if !ok && !s.specs[i].Optional {
			return &RequestError{Invalid: true, Details: map[string]any{"input": s.specs[i].Name, "expected_inputs": Names(s.specs)},
				Message: fmt.Sprintf("input %q is missing; this model takes %s", s.specs[i].Name, Describe(s.specs))}
		}
	}
	return nil
}

// OutputSet follows the outputs a request asks for against the model's:
// each is known and asked for once.
type OutputSet struct {
	specs []engine.TensorSpec
	used  []bool
}

// NewOutputSet starts checking a request's outputs against the model
// outputs specs.
func NewOutputSet(specs []engine.TensorSpec) OutputSet {
	return OutputSet{specs: specs, used: make([]bool, len(specs))}
}

// Take admits the output named name and returns its index in the model's
// outputs.
func (s *OutputSet) Take(name string) (int, *RequestError) {
	idx := engine.SpecIndex(s.specs, name)
	if idx < 0 {
		return -1, &RequestError{Invalid: true, Details: map[string]any{"output": name, "expected_outputs": Names(s.specs)},
			Message: fmt.Sprintf("unexpected inference output '%s' for model: unknown output %q; this model's outputs are %s", name, name, Describe(s.specs))}
	}
	if s.used[idx] {
		return -1, badRequest("output '%s' already exists in request; request each output once", name)
	}
	s.used[idx] = true
	return idx, nil
}

// InputDatatype reads the datatype a request gives input name, checked
// against spec (the model's input).
func InputDatatype(name, datatype string, spec engine.TensorSpec) (engine.DType, *RequestError) {
	dt := ParseDatatype(datatype)
	if dt != engine.Invalid && (spec.DType == engine.Invalid || dt == spec.DType) {
		return dt, nil // the common case allocates nothing
	}
	want := DatatypeName(spec.DType)
	details := map[string]any{"input": name, "expected_datatype": want, "received_datatype": datatype}
	if dt == engine.Invalid {
		return dt, &RequestError{Invalid: true, Details: details,
			Message: fmt.Sprintf("input %q: datatype %q is not one of the protocol's (%s); this input is %s", name, datatype, Datatypes(), want)}
	}
	return dt, &RequestError{Invalid: true, Details: details,
		Message: fmt.Sprintf("input %q has datatype %s but this model takes %s; convert the data (for example numpy .astype(np.%s))", name, datatype, want, spec.DType)}
}

// MaxAxes is the most axes an input's shape may have (ONNX Runtime's and
// libtorch's tensors take far fewer in practice).
const MaxAxes = 32

// TooManyAxes refuses input name's shape of axes axes when it has more than
// MaxAxes; nil otherwise.
func TooManyAxes(name string, axes int) *RequestError {
	if axes <= MaxAxes {
		return nil
	}
	return badRequest("input %q: shape has %d axes; at most %d are accepted", name, axes, MaxAxes)
}

// SharedMemoryOff refuses a tensor (what: `input "x"`, `output "y"`) that
// names a shared memory region on a server started without them.
func SharedMemoryOff(what string) *RequestError {
	return badRequest("%s: system shared memory is turned off on this server (fw serve --shared-memory none); send the data in the request", what)
}
