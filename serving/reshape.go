package serving

import (
	"fmt"

	"github.com/fw-serve/fw/engine"
)

// Reshape maps between the shapes clients send and receive (a model
// configuration's dims) and the shapes the model itself takes and gives
// (its reshape), tensor by tensor, as Triton's `reshape` does: the data
// stays as it is, only the shape changes, and the element counts agree.
// For a batched model the shapes are without the batch axis, which passes
// through. Variable sizes (-1) are matched in order: the first -1 of the
// target takes the size the tensor has at the first -1 of its source, and
// so on (dims [2,4,-1,6] with reshape [8,-1,1,6] carry the -1 across).
type Reshape struct {
	batched bool
	in      map[int]ReshapeTensor // model input index -> its reshape
	out     map[int]ReshapeTensor // model output index -> its reshape
	// inputs and outputs are the tensors as clients see them.
	inputs, outputs []engine.TensorSpec
}

// ReshapeTensor says how one tensor is reshaped: Index into the model's
// inputs or outputs, Dims as clients see it, Model as the model has it
// (both without the batch axis when batched; -1 for a variable size, as
// many in each, the fixed sizes holding the same element count).
type ReshapeTensor struct {
	Index       int
	Dims, Model []int64
}

// ReshapeFits checks that dims and reshape can map onto each other: the
// same number of variable (-1) sizes, and the fixed sizes holding the same
// element count; every size positive or -1.
func ReshapeFits(dims, reshape []int64) error {
	fixed := func(s []int64) (int64, int, error) {
		n, vars := int64(1), 0
		for _, d := range s {
			switch {
			case d == -1:
				vars++
			case d <= 0:
				return 0, 0, fmt.Errorf("size %d; use a positive size or -1", d)
			default:
				if n > (1<<62)/d {
					return 0, 0, fmt.Errorf("%s holds too many elements", ShapeString(s))
				}
				n *= d
			}
		}
		return n, vars, nil
	}
	a, va, err := fixed(dims)
	if err != nil {
		return fmt.Errorf("dims %s: %w", ShapeString(dims), err)
	}
	b, vb, err := fixed(reshape)
	if err != nil {
		return fmt.Errorf("reshape %s: %w", ShapeString(reshape), err)
	}
	if va != vb {
		return fmt.Errorf("dims %s have %d variable sizes (-1) and reshape %s %d; they must have as many (matched in order)", ShapeString(dims), va, ShapeString(reshape), vb)
	}
	if a != b {
		return fmt.Errorf("dims %s and reshape %s hold different element counts (their fixed sizes: %d and %d)", ShapeString(dims), ShapeString(reshape), a, b)
	}
	return nil
}

// NewReshape builds the mapping for model m; ins and outs are the
// reshaped tensors, batched says whether axis 0 is the batch.
func NewReshape(m *engine.Model, batched bool, ins, outs []ReshapeTensor) (*Reshape, error) {
	r := &Reshape{batched: batched, in: map[int]ReshapeTensor{}, out: map[int]ReshapeTensor{},
		inputs: append([]engine.TensorSpec{}, m.Inputs()...), outputs: append([]engine.TensorSpec{}, m.Outputs()...)}
	client := func(dims []int64) []int64 {
		if batched {
			return append([]int64{-1}, dims...)
		}
		return append([]int64{}, dims...)
	}
	for _, t := range ins {
		if err := ReshapeFits(t.Dims, t.Model); err != nil {
			return nil, fmt.Errorf("input %q: %w", r.inputs[t.Index].Name, err)
		}
		r.in[t.Index] = t
		r.inputs[t.Index].Shape = client(t.Dims)
	}
	for _, t := range outs {
		if err := ReshapeFits(t.Dims, t.Model); err != nil {
			return nil, fmt.Errorf("output %q: %w", r.outputs[t.Index].Name, err)
		}
		r.out[t.Index] = t
		r.outputs[t.Index].Shape = client(t.Dims)
	}
	return r, nil
}

// reshaped returns t, whose shape (after its batch axis when batched)
// must match the pattern from, with the shape of the pattern to, its
// variable sizes carried across in order; an *engine.InputError when t
// does not match from.
func (r *Reshape) reshaped(t engine.Tensor, from, to []int64, name string) (engine.Tensor, error) {
	b := boolInt(r.batched)
	want := func() string {
		if r.batched {
			return ShapeString(append([]int64{-1}, from...))
		}
		return ShapeString(from)
	}
	if len(t.Shape) != len(from)+b {
		if r.batched && len(t.Shape) == 0 {
			return t, &engine.InputError{Input: name, Msg: "needs a batch axis", Received: "a scalar"}
		}
		return t, &engine.InputError{Input: name, Msg: "wrong shape", Expected: want(), Received: ShapeString(t.Shape)}
	}
	var vars []int64
	for i, d := range from {
		got := t.Shape[b+i]
		switch {
		case d == -1:
			vars = append(vars, got)
		case got != d:
			return t, &engine.InputError{Input: name, Msg: "wrong shape", Expected: want(), Received: ShapeString(t.Shape)}
		}
	}
	shape := make([]int64, 0, len(to)+b)
	if r.batched {
		shape = append(shape, t.Shape[0])
	}
	for _, d := range to {
		if d == -1 {
			d, vars = vars[0], vars[1:] // as many in both (ReshapeFits)
		}
		shape = append(shape, d)
	}
	t.Shape = shape
	return t, nil
}

// toModel gives inputs in the client's shapes the model's shapes.
func (r *Reshape) toModel(inputs []engine.Tensor) ([]engine.Tensor, error) {
	out := make([]engine.Tensor, len(inputs))
	copy(out, inputs)
	for i, rt := range r.in {
		if i >= len(out) || out[i].Absent() { // an optional input left out
			continue
		}
		t, err := r.reshaped(out[i], rt.Dims, rt.Model, r.inputs[i].Name)
		if err != nil {
			return nil, err
		}
		out[i] = t
	}
	return out, nil
}

// fromModel gives outputs in the model's shapes the configured dims (an
// output whose shape does not match its reshape is left as the model gave
// it).
func (r *Reshape) fromModel(outputs []engine.Tensor) {
	for i, rt := range r.out {
		if i < len(outputs) && !outputs[i].Absent() {
			if t, err := r.reshaped(outputs[i], rt.Model, rt.Dims, r.outputs[i].Name); err == nil {
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
