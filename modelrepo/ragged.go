package modelrepo

import (
	"fmt"
	"slices"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/serving"
)

// ragged is a configuration's ragged batching (allow_ragged_batch,
// batch_input, batch_output) resolved against a loaded model: what the
// batcher does and what clients see.
type ragged struct {
	batcher *batcher.Ragged
	serving *serving.Ragged
}

// usesRagged reports whether cfg asks for ragged batching.
func usesRagged(cfg *pb.ModelConfig) bool {
	if len(cfg.GetBatchInput()) > 0 || len(cfg.GetBatchOutput()) > 0 {
		return true
	}
	return slices.ContainsFunc(cfg.GetInput(), (*pb.ModelInput).GetAllowRaggedBatch)
}

// checkRaggedConfig refuses what fw cannot serve of cfg's ragged batching
// before any file is read: it needs a batch (max_batch_size > 0), not
// sequence batching or reshape, and batch inputs and outputs that name
// the configuration's inputs and one source each.
func checkRaggedConfig(cfg *pb.ModelConfig) error {
	if !usesRagged(cfg) {
		return nil
	}
	if cfg.GetMaxBatchSize() <= 0 {
		return fmt.Errorf("allow_ragged_batch, batch_input and batch_output join requests into a batch; they need max_batch_size > 0")
	}
	if cfg.GetSequenceBatching() != nil {
		return fmt.Errorf("ragged batching (allow_ragged_batch, batch_input, batch_output) is not supported with sequence_batching in fw; use dynamic_batching")
	}
	inputs := map[string]bool{}
	optional := map[string]bool{}
	for _, in := range cfg.GetInput() {
		inputs[in.GetName()] = true
		optional[in.GetName()] = in.GetOptional()
		if in.GetReshape() != nil {
			return fmt.Errorf("input %q: reshape is not supported with ragged batching in fw; export the model with the shapes clients send", in.GetName())
		}
	}
	for _, out := range cfg.GetOutput() {
		if out.GetReshape() != nil {
			return fmt.Errorf("output %q: reshape is not supported with ragged batching in fw; export the model with the shapes clients send", out.GetName())
		}
	}
	source := func(what string, names []string) error {
		if len(names) != 1 {
			return fmt.Errorf("%s has %d source_input; it takes exactly one, an input of the configuration", what, len(names))
		}
		if !inputs[names[0]] {
			return fmt.Errorf("%s: source_input %q is not an input of the configuration", what, names[0])
		}
		if optional[names[0]] {
			return fmt.Errorf("%s: source_input %q is optional; a batch input or output is made from it, so every request must send it: remove optional", what, names[0])
		}
		return nil
	}
	for i, bi := range cfg.GetBatchInput() {
		what := fmt.Sprintf("batch_input %d (%s)", i, bi.GetKind())
		if err := source(what, bi.GetSourceInput()); err != nil {
			return err
		}
		if len(bi.GetTargetName()) == 0 {
			return fmt.Errorf("%s has no target_name: name the model input it fills", what)
		}
		switch bi.GetDataType() {
		case pb.DataType_TYPE_INT32, pb.DataType_TYPE_INT64, pb.DataType_TYPE_FP32:
		default:
			return fmt.Errorf("%s: data_type %s; a batch input is TYPE_INT32, TYPE_INT64 or TYPE_FP32", what, bi.GetDataType())
		}
		for _, t := range bi.GetTargetName() {
			if inputs[t] {
				return fmt.Errorf("%s: target_name %q is also an input of the configuration; the server fills it, so list only the inputs clients send", what, t)
			}
		}
	}
	for i, bo := range cfg.GetBatchOutput() {
		what := fmt.Sprintf("batch_output %d (%s)", i, bo.GetKind())
		if err := source(what, bo.GetSourceInput()); err != nil {
			return err
		}
		if len(bo.GetTargetName()) == 0 {
			return fmt.Errorf("%s has no target_name: name the outputs it scatters", what)
		}
		for _, t := range bo.GetTargetName() {
			if !slices.ContainsFunc(cfg.GetOutput(), func(o *pb.ModelOutput) bool { return o.GetName() == t }) {
				return fmt.Errorf("%s: target_name %q is not an output of the configuration", what, t)
			}
		}
	}
	return nil
}

// raggedKinds maps Triton's batch input kinds to the batcher's.
var raggedKinds = map[pb.BatchInput_Kind]batcher.BatchInputKind{
	pb.BatchInput_BATCH_ELEMENT_COUNT:                       batcher.ElementCount,
	pb.BatchInput_BATCH_ACCUMULATED_ELEMENT_COUNT:           batcher.AccumulatedElementCount,
	pb.BatchInput_BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO: batcher.AccumulatedElementCountWithZero,
	pb.BatchInput_BATCH_MAX_ELEMENT_COUNT_AS_SHAPE:          batcher.MaxElementCountAsShape,
	pb.BatchInput_BATCH_ITEM_SHAPE:                          batcher.ItemShape,
	pb.BatchInput_BATCH_ITEM_SHAPE_FLATTEN:                  batcher.ItemShapeFlatten,
}

// resolveRagged resolves cfg's ragged batching (checkRaggedConfig passed)
// against the loaded model m: a ragged input must be one flat axis in the
// model, a batch input's target an input of the model of its datatype.
// nil when cfg asks for none.
func resolveRagged(cfg *pb.ModelConfig, m *engine.Model) (*ragged, error) {
	if !usesRagged(cfg) {
		return nil, nil
	}
	if m.Format == engine.FormatAOTI {
		return nil, fmt.Errorf("ragged batching is not supported for an AOTInductor package (%s), compiled for batches of whole rows; export the model to ONNX or TorchScript", m.Path)
	}
	specs := m.Inputs()
	index := func(name string) int { return engine.SpecIndex(specs, name) }
	br := &batcher.Ragged{Inputs: make([]bool, len(specs))}
	dims := map[int][]int64{}
	for _, in := range cfg.GetInput() {
		i := index(in.GetName())
		if i < 0 || !in.GetAllowRaggedBatch() {
			continue // a name the model lacks fails in describe, with the model's inputs
		}
		if sh := specs[i].Shape; len(sh) > 1 {
			return nil, fmt.Errorf("input %q allows ragged batches, so the model takes it as one axis holding every request's elements, but %s takes %s; export it with shape [-1]",
				in.GetName(), m.Path, engine.FormatShape(sh))
		}
		br.Inputs[i] = true
		dims[i] = slices.Clone(in.GetDims())
	}
	var made []int
	for _, bi := range cfg.GetBatchInput() {
		src := index(bi.GetSourceInput()[0])
		if src < 0 {
			return nil, fmt.Errorf("batch_input: source_input %q is not an input of %s, whose inputs are %s", bi.GetSourceInput()[0], m.Path, serving.Describe(specs))
		}
		dt := dtypeOf(bi.GetDataType()) // INT32, INT64 or FP32 (checkRaggedConfig)
		for _, t := range bi.GetTargetName() {
			i := index(t)
			if i < 0 {
				return nil, fmt.Errorf("batch_input: target_name %q is not an input of %s, whose inputs are %s", t, m.Path, serving.Describe(specs))
			}
			if slices.Contains(made, i) {
				return nil, fmt.Errorf("batch_input: target_name %q is filled by two batch inputs", t)
			}
			if specs[i].DType != engine.Invalid && specs[i].DType != dt {
				return nil, fmt.Errorf("batch_input: target_name %q is %s in the model; the configuration says %s", t, specs[i].DType, bi.GetDataType())
			}
			rank := 1
			if bi.GetKind() == pb.BatchInput_BATCH_ITEM_SHAPE {
				rank = 2
			}
			if sh := specs[i].Shape; len(sh) > 0 && len(sh) != rank {
				return nil, fmt.Errorf("batch_input: %s makes %q with %d axes, but the model takes %s", bi.GetKind(), t, rank, engine.FormatShape(sh))
			}
			made = append(made, i)
			br.Made = append(br.Made, batcher.MadeInput{Index: i, Kind: raggedKinds[bi.GetKind()], Source: src, DType: dt})
		}
	}
	outs := m.Outputs()
	br.Scatter = slices.Repeat([]int{-1}, len(outs))
	scattered := map[int][]int64{}
	for _, bo := range cfg.GetBatchOutput() {
		src := index(bo.GetSourceInput()[0])
		if src < 0 {
			return nil, fmt.Errorf("batch_output: source_input %q is not an input of %s, whose inputs are %s", bo.GetSourceInput()[0], m.Path, serving.Describe(specs))
		}
		for _, t := range bo.GetTargetName() {
			k := engine.SpecIndex(outs, t)
			if k < 0 {
				return nil, fmt.Errorf("batch_output: target_name %q is not an output of %s, whose outputs are %s", t, m.Path, serving.Describe(outs))
			}
			br.Scatter[k] = src
			for _, o := range cfg.GetOutput() {
				if o.GetName() == t {
					scattered[k] = slices.Clone(o.GetDims())
				}
			}
		}
	}
	return &ragged{batcher: br, serving: serving.NewRagged(m, dims, made, scattered)}, nil
}

// raggedJSON reports cfg's batch inputs and outputs in the model
// configuration.
func raggedJSON(cfg *pb.ModelConfig, out *serving.ModelConfig) {
	for i, in := range out.Inputs {
		for _, c := range cfg.GetInput() {
			if c.GetName() == in.Name {
				out.Inputs[i].AllowRaggedBatch = c.GetAllowRaggedBatch()
			}
		}
	}
	for _, bi := range cfg.GetBatchInput() {
		out.BatchInputs = append(out.BatchInputs, serving.BatchInputConfig{Kind: bi.GetKind().String(), DataType: bi.GetDataType().String(),
			TargetNames: slices.Clone(bi.GetTargetName()), SourceInputs: slices.Clone(bi.GetSourceInput())})
	}
	for _, bo := range cfg.GetBatchOutput() {
		out.BatchOutputs = append(out.BatchOutputs, serving.BatchOutputConfig{Kind: bo.GetKind().String(),
			TargetNames: slices.Clone(bo.GetTargetName()), SourceInputs: slices.Clone(bo.GetSourceInput())})
	}
}
