package serving

import (
	"fmt"
	"slices"

	"github.com/fw-serve/fw/engine"
)

// Reshape maps between the shapes clients send and receive (a model
// configuration's dims) and the shapes the model itself takes and gives
// (its reshape), tensor by tensor, as Triton's `reshape` does: the data
// stays as it is, only the shape changes, and the element counts agree.
// For a batched model the shapes are without the batch axis, which passes
// through.
type Reshape struct {
	batched bool
	in      map[int][]int64 // model input index -> the model's shape
	out     map[int][]int64 // model output index -> the client's dims
	// inputs and outputs are the tensors as clients see them.
	inputs, outputs []engine.TensorSpec
}

// ReshapeTensor says how one tensor is reshaped: Index into the model's
// inputs or outputs, Dims as clients see it, Model as the model has it
// (both without the batch axis when batched; all sizes fixed).
type ReshapeTensor struct {
	Index       int
	Dims, Model []int64
}

// NewReshape builds the mapping for model m; ins and outs are the
// reshaped tensors, batched says whether axis 0 is the batch.
func NewReshape(m *engine.Model, batched bool, ins, outs []ReshapeTensor) (*Reshape, error) {
	r := &Reshape{batched: batched, in: map[int][]int64{}, out: map[int][]int64{},
		inputs: append([]engine.TensorSpec{}, m.Inputs()...), outputs: append([]engine.TensorSpec{}, m.Outputs()...)}
	client := func(dims []int64) []int64 {
		if batched {
			return append([]int64{-1}, dims...)
		}
		return append([]int64{}, dims...)
	}
	for _, t := range ins {
		if engine.NumElements(t.Dims) != engine.NumElements(t.Model) {
			return nil, fmt.Errorf("input %q: dims %s and reshape %s hold different element counts", r.inputs[t.Index].Name, ShapeString(t.Dims), ShapeString(t.Model))
		}
		r.in[t.Index] = t.Model
		r.inputs[t.Index].Shape = client(t.Dims)
	}
	for _, t := range outs {
		if engine.NumElements(t.Dims) != engine.NumElements(t.Model) {
			return nil, fmt.Errorf("output %q: dims %s and reshape %s hold different element counts", r.outputs[t.Index].Name, ShapeString(t.Dims), ShapeString(t.Model))
		}
		r.out[t.Index] = t.Dims
		r.outputs[t.Index].Shape = client(t.Dims)
	}
	return r, nil
}

// reshaped returns t with the shape to (plus its batch axis when batched),
// or an *engine.InputError when its elements do not fill that shape.
func (r *Reshape) reshaped(t engine.Tensor, to []int64, name string) (engine.Tensor, error) {
	shape := to
	if r.batched {
		if len(t.Shape) == 0 {
			return t, &engine.InputError{Input: name, Msg: "needs a batch axis", Received: "a scalar"}
		}
		shape = append([]int64{t.Shape[0]}, to...)
	}
	if engine.NumElements(shape) != engine.NumElements(t.Shape) {
		want := ShapeString(shape)
		if r.batched {
			want = ShapeString(append([]int64{-1}, to...))
		}
		return t, &engine.InputError{Input: name, Msg: "wrong shape", Expected: want, Received: ShapeString(t.Shape)}
	}
	t.Shape = shape
	return t, nil
}

// toModel gives inputs in the client's shapes the model's shapes.
func (r *Reshape) toModel(inputs []engine.Tensor) ([]engine.Tensor, error) {
	out := make([]engine.Tensor, len(inputs))
	copy(out, inputs)
	for i, to := range r.in {
		if i >= len(out) {
			continue
		}
		client := r.inputs[i].Shape
		if r.batched {
			client = client[1:]
		}
		// The client's tensor must have the configured dims (all fixed).
		if len(out[i].Shape) != len(client)+boolInt(r.batched) || !slices.Equal(out[i].Shape[boolInt(r.batched):], client) {
			return nil, &engine.InputError{Input: r.inputs[i].Name, Msg: "wrong shape", Expected: ShapeString(r.inputs[i].Shape), Received: ShapeString(out[i].Shape)}
		}
		t, err := r.reshaped(out[i], to, r.inputs[i].Name)
		if err != nil {
			return nil, err
		}
		out[i] = t
	}
	return out, nil
}

// fromModel gives outputs in the model's shapes the configured dims.
func (r *Reshape) fromModel(outputs []engine.Tensor) {
	for i, dims := range r.out {
		if i < len(outputs) {
			if t, err := r.reshaped(outputs[i], dims, r.outputs[i].Name); err == nil {
				outputs[i] = t
			}
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
