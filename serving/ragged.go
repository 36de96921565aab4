package serving

import (
	"fmt"
	"slices"

	"github.com/fw-serve/fw/engine"
)

// Ragged is what Triton's ragged batching changes between a model's
// clients and its engine: a ragged input (allow_ragged_batch) is sent as
// the configuration's dims after the batch axis, whatever the model file
// says (it takes the batch flattened, batcher.Ragged); the inputs the
// batcher makes (batch_input) are not the clients' to send; and a
// scattered output (batch_output) is answered in the shape of the
// client's input.
type Ragged struct {
	m *engine.Model
	// model maps a client input position to the model's.
	model []int
	// check are the model's inputs as the request must be before the
	// batcher: ragged ones as clients send them, made ones optional.
	check []engine.TensorSpec
	// inputs and outputs are the tensors as clients see them.
	inputs, outputs []engine.TensorSpec
}

// NewRagged builds the mapping for model m (batched): ragged maps a model
// input position to its configured dims (without the batch axis), made
// lists the input positions the batcher makes, scattered maps an output
// position to its configured dims.
func NewRagged(m *engine.Model, ragged map[int][]int64, made []int, scattered map[int][]int64) *Ragged {
	r := &Ragged{m: m, check: slices.Clone(m.Inputs()), outputs: slices.Clone(m.Outputs())}
	for i, sp := range m.Inputs() {
		if dims, ok := ragged[i]; ok {
			sp.Shape = append([]int64{-1}, dims...)
			r.check[i].Shape = sp.Shape
		}
		if slices.Contains(made, i) {
			r.check[i].Optional = true
			continue
		}
		r.model = append(r.model, i)
		r.inputs = append(r.inputs, sp)
	}
	for k, dims := range scattered {
		r.outputs[k].Shape = append([]int64{-1}, dims...)
	}
	return r
}

// toModel puts inputs, in the clients' order, at the model's positions
// (made ones absent, for the batcher) and checks them as clients send
// them; it returns the rows.
func (r *Ragged) toModel(inputs []engine.Tensor) ([]engine.Tensor, int64, error) {
	if len(inputs) != len(r.inputs) {
		return nil, 0, &engine.InputError{Msg: "wrong number of inputs", Expected: fmt.Sprint(len(r.inputs)), Received: fmt.Sprint(len(inputs))}
	}
	out := make([]engine.Tensor, len(r.check))
	for i, t := range inputs {
		out[r.model[i]] = t
	}
	rows, err := r.m.CheckInputsAs(r.check, out)
	return out, rows, err
}
