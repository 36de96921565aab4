package modelrepo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/modelhost"
	"github.com/fw-serve/fw/pybackend"
	"github.com/fw-serve/fw/sequence"
	"github.com/fw-serve/fw/serving"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// backendPython is Triton's backend name of a model written in Python.
const backendPython = "python"

// isPython reports whether cfg configures a Python-backend model.
func isPython(cfg *pb.ModelConfig) bool { return cfg.GetBackend() == backendPython }

// checkPython checks what a Python model's configuration may set: its
// tensors (listed: fw does not run auto_complete_config), batching and
// instances. What fw does not serve for Python models yet is refused,
// naming it.
func checkPython(cfg *pb.ModelConfig) error {
	if !isPython(cfg) {
		if cfg.GetModelTransactionPolicy().GetDecoupled() {
			return fmt.Errorf("model_transaction_policy decoupled is served for Python models (backend \"python\") only")
		}
		for _, in := range cfg.GetInput() {
			if in.GetOptional() && !isEnsemble(cfg) { // an ensemble hands its steps what it was given
				return fmt.Errorf("input %q: optional inputs are served for Python models (backend \"python\") and ensembles only; an ONNX or TorchScript model takes every input", in.GetName())
			}
		}
		return nil
	}
	switch {
	case cfg.GetPlatform() != "":
		return fmt.Errorf("a Python model has backend \"python\" and no platform (platform %q); remove the platform", cfg.GetPlatform())
	case cfg.GetSequenceBatching() != nil && cfg.GetModelTransactionPolicy().GetDecoupled() && !iterativeOnly(cfg):
		return fmt.Errorf("sequence_batching is not served for decoupled Python models yet; serve the model undecoupled, or keep its sequences in model.py")
	}
	if cfg.GetSequenceBatching() != nil {
		for _, in := range cfg.GetInput() {
			if in.GetReshape() != nil {
				return fmt.Errorf("input %q: reshape is not supported with sequence_batching; give it the shape clients send", in.GetName())
			}
		}
		for _, out := range cfg.GetOutput() {
			if out.GetReshape() != nil {
				return fmt.Errorf("output %q: reshape is not supported with sequence_batching; give it the shape clients see", out.GetName())
			}
		}
	}
	if _, ok := cfg.GetParameters()["EXECUTION_ENV_PATH"]; ok {
		return fmt.Errorf("parameters EXECUTION_ENV_PATH: fw does not unpack conda-pack archives; unpack it and start fw serve with --python naming its bin/python")
	}
	check := func(kind, name string, dt pb.DataType, dims []int64, reshape *pb.ModelTensorReshape) error {
		if name == "" {
			return fmt.Errorf("a Python model's %s has no name", kind)
		}
		d := dtypeOf(dt)
		if d == engine.Invalid || !pybackend.Takes(d) {
			return fmt.Errorf("%s %q: data_type %s is not one fw moves to a Python model", kind, name, dt)
		}
		if reshape != nil {
			if len(reshape.GetShape()) > maxDims {
				return fmt.Errorf("%s %q: reshape has at most %d dims", kind, name, maxDims)
			}
			if err := serving.ReshapeFits(dims, reshape.GetShape()); err != nil {
				return fmt.Errorf("%s %q: %w", kind, name, err)
			}
		}
		if len(dims) > maxDims {
			return fmt.Errorf("%s %q: at most %d dims", kind, name, maxDims)
		}
		for _, n := range dims {
			if n == 0 || n < -1 {
				return fmt.Errorf("%s %q: dim %d; use a positive size or -1", kind, name, n)
			}
		}
		return nil
	}
	for _, in := range cfg.GetInput() {
		if err := check("input", in.GetName(), in.GetDataType(), in.GetDims(), in.GetReshape()); err != nil {
			return err
		}
	}
	for _, out := range cfg.GetOutput() {
		if err := check("output", out.GetName(), out.GetDataType(), out.GetDims(), out.GetReshape()); err != nil {
			return err
		}
	}
	return nil
}

// completePython makes a configuration that names no backend a Python
// model's when the version directory holds a model.py and no model file
// (as Triton tells one), and completes a Python model's configuration
// with its TritonPythonModel.auto_complete_config, run in a process of its
// own (unless auto-complete is disabled; a model.py that never mentions it
// and a configuration that lists its tensors skip the process).
func (r *Repository) completePython(ctx context.Context, name, vdir string, cfg *pb.ModelConfig) (*pb.ModelConfig, error) {
	if !isPython(cfg) {
		if cfg.GetBackend() != "" || cfg.GetPlatform() != "" {
			return cfg, nil
		}
		if _, err := pythonFile(vdir, cfg); err != nil {
			return cfg, nil
		}
		if _, err := modelFile(vdir, cfg); err == nil {
			return cfg, nil // a model file beside it: not a Python model
		}
		cfg = proto.Clone(cfg).(*pb.ModelConfig)
		cfg.Backend = backendPython
	}
	file, err := pythonFile(vdir, cfg)
	if err != nil {
		return nil, err
	}
	listed := len(cfg.GetInput()) > 0 && len(cfg.GetOutput()) > 0
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if !r.cfg.DisableAutoComplete && (!listed || bytes.Contains(src, []byte("auto_complete_config"))) {
		cfg = proto.Clone(cfg).(*pb.ModelConfig)
		cfg.Name = name
		js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(cfg)
		if err != nil {
			return nil, err
		}
		out, err := pybackend.AutoComplete(ctx, pybackend.Config{Python: r.cfg.Python, File: file, Dir: vdir, Name: name, Log: r.log}, js)
		if err != nil {
			return nil, err
		}
		if cfg, err = parseConfig(out, true); err != nil {
			return nil, fmt.Errorf("the configuration auto_complete_config returned: %w", err)
		}
		if cfg.GetName() != name {
			return nil, fmt.Errorf("auto_complete_config renamed the model %q; it must keep its name", cfg.GetName())
		}
		if cfg.GetBackend() == "" {
			cfg.Backend = backendPython
		}
		if err := checkPlatform(cfg); err != nil {
			return nil, err
		}
	}
	if len(cfg.GetOutput()) == 0 {
		return nil, fmt.Errorf("a Python model lists its outputs (name, data_type, dims) in config.pbtxt, or adds them in TritonPythonModel.auto_complete_config")
	}
	if len(cfg.GetInput()) == 0 && cfg.GetMaxBatchSize() > 0 {
		// A batch is counted in its inputs' rows: without inputs there are none.
		return nil, fmt.Errorf("a Python model without inputs has max_batch_size 0 (it has %d): its requests are not batched", cfg.GetMaxBatchSize())
	}
	return cfg, nil
}

// pythonFile is the model.py of a version directory (or the file
// default_model_filename names).
func pythonFile(vdir string, cfg *pb.ModelConfig) (string, error) {
	name := "model.py"
	if n := cfg.GetDefaultModelFilename(); n != "" {
		if !filepath.IsLocal(n) || strings.ContainsRune(n, filepath.Separator) {
			return "", fmt.Errorf("default_model_filename %q must be a file name inside the version directory", n)
		}
		name = n
	}
	p := filepath.Join(vdir, name)
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("a Python model's version directory holds its %s: %w", name, err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a file", p)
	}
	return p, nil
}

// loadPython loads one version of a Python model into a host of its own:
// each engine instance is a Python process (pybackend) running model.py,
// behind the batcher its configuration asks for.
func (r *Repository) loadPython(ctx context.Context, name, vs, vdir string, cfg *pb.ModelConfig, labels map[string]string) (*modelhost.Host, error) {
	path, err := pythonFile(vdir, cfg)
	if err != nil {
		return nil, err
	}
	batched := cfg.GetMaxBatchSize() > 0
	spec := func(n string, dt pb.DataType, dims []int64) engine.TensorSpec {
		shape := slices.Clone(dims)
		if batched {
			shape = append([]int64{-1}, shape...)
		}
		return engine.TensorSpec{Name: n, DType: dtypeOf(dt), Shape: shape}
	}
	// The model's tensors have their reshape's shape (Triton hands a
	// Python model its inputs reshaped, and reshapes its outputs back to
	// the dims clients see): serving.Reshape maps between the two.
	var ins, outs []engine.TensorSpec
	var rin, rout []serving.ReshapeTensor
	for i, in := range cfg.GetInput() {
		dims := in.GetDims()
		if rs := in.GetReshape(); rs != nil {
			rin = append(rin, serving.ReshapeTensor{Index: i, Dims: slices.Clone(dims), Model: slices.Clone(rs.GetShape())})
			dims = rs.GetShape()
		}
		s := spec(in.GetName(), in.GetDataType(), dims)
		s.Optional = in.GetOptional()
		ins = append(ins, s)
	}
	for i, out := range cfg.GetOutput() {
		dims := out.GetDims()
		if rs := out.GetReshape(); rs != nil {
			rout = append(rout, serving.ReshapeTensor{Index: i, Dims: slices.Clone(dims), Model: slices.Clone(rs.GetShape())})
			dims = rs.GetShape()
		}
		outs = append(outs, spec(out.GetName(), out.GetDataType(), dims))
	}
	// Sequence batching: the controls and implicit state are inputs (and
	// state outputs) of the model beside the configuration's, as Triton
	// hands them to a Python model; clients see the configuration's.
	seq, err := sequenceConfig(name, filepath.Dir(vdir), cfg)
	if err != nil {
		return nil, err
	}
	if seq != nil {
		for _, c := range seq.Controls {
			if engine.SpecIndex(ins, c.Input) >= 0 {
				return nil, fmt.Errorf("sequence_batching control %q is also an input the configuration lists; a control is not listed among the inputs (fw passes it to execute beside them)", c.Input)
			}
			ins = append(ins, engine.TensorSpec{Name: c.Input, DType: c.DType, Shape: batchedShape(batched, []int64{1})})
		}
		for _, st := range seq.States {
			if engine.SpecIndex(ins, st.Input) >= 0 {
				return nil, fmt.Errorf("sequence_batching state input %q is also an input the configuration lists; a state is not listed among the inputs (fw passes it to execute beside them)", st.Input)
			}
			ins = append(ins, engine.TensorSpec{Name: st.Input, DType: st.DType, Shape: batchedShape(batched, st.Dims)})
			if engine.SpecIndex(outs, st.Output) < 0 {
				outs = append(outs, engine.TensorSpec{Name: st.Output, DType: st.DType, Shape: batchedShape(batched, st.Dims)})
			}
		}
	}
	bc := r.batching(cfg, false)
	if err := checkRaggedConfig(cfg); err != nil {
		return nil, err
	}
	if len(cfg.GetBatchInput())+len(cfg.GetBatchOutput()) > 0 {
		return nil, fmt.Errorf("batch_input and batch_output are for models that take a batch as one tensor; a Python model's execute gets each request's own tensors, so remove them (allow_ragged_batch alone lets requests of any shape share an execute)")
	}
	if usesRagged(cfg) { // requests of any shape share an execute, each with its own tensors
		bc.Ragged = &batcher.Ragged{}
		for _, in := range cfg.GetInput() {
			bc.Ragged.Inputs = append(bc.Ragged.Inputs, in.GetAllowRaggedBatch())
		}
	}
	kind, count := "CPU", 0
	for _, g := range cfg.GetInstanceGroup() {
		count += int(max(1, g.GetCount()))
		if g.GetKind() == pb.ModelInstanceGroup_KIND_GPU {
			if _, ok := r.cfg.Engine.Device.CUDAIndex(); !ok {
				return nil, fmt.Errorf("instance_group asks for KIND_GPU but fw serve runs on %q; start it with --device cuda or use KIND_CPU", r.cfg.Engine.Device)
			}
			kind = "GPU"
		}
	}
	bc.Instances = max(1, count)
	described, err := describePython(name, cfg, labels, filepath.Base(path), bc)
	if err != nil {
		return nil, err
	}
	if seq != nil {
		described.SequenceBatching = sequenceJSON(cfg, seq)
	}
	raggedJSON(cfg, &described)
	if iterativeOnly(cfg) {
		described.SequenceBatching = map[string]any{"iterative_sequence": true}
	}
	modelConfig, err := json.Marshal(serving.ConfigJSON(described))
	if err != nil {
		return nil, err
	}
	args := map[string]string{
		"model_config": string(modelConfig), "model_instance_kind": kind, "model_instance_device_id": "0",
		"model_repository": filepath.Dir(vdir), "model_version": vs, "model_name": name,
	}
	var next atomic.Int32
	h := modelhost.New(modelhost.Config{
		Path: path, Batcher: bc, SkipWarmup: true, Name: name, Version: vs, Tracer: r.cfg.Tracer,
		Open: func(ctx context.Context) (*engine.Model, error) {
			b, err := pybackend.Start(ctx, pybackend.Config{
				Python: r.cfg.Python, File: path, Dir: vdir, Name: name, Version: vs, Args: args,
				Instance: int(next.Add(1) - 1), Inputs: ins, Outputs: outs, MaxBytes: r.cfg.MaxPythonBytes,
				Call: r.callModel, StreamCall: r.streamModel, Log: r.log, Metrics: r.cfg.PythonMetrics, Decoupled: cfg.GetModelTransactionPolicy().GetDecoupled(),
				Iterative: iterativeOnly(cfg), Repository: pythonRepository{r},
			})
			if err != nil {
				return nil, err
			}
			return engine.Wrap(engine.FormatPython, path, name, vs, ins, outs, batched, b), nil
		},
		Prepare: func(inst *serving.Instance) error {
			if seq != nil {
				sc := *seq
				sc.Slots *= max(1, inst.Batcher.Config().Instances) // per instance, as Triton's
				if err := checkEngineTakes(&sc, inst.Model); err != nil {
					return err
				}
				b, err := sequence.New(sc, inst.Model.Inputs(), inst.Model.Outputs(), batched, r.log)
				if err != nil {
					return err
				}
				inst.Sequences = b
			}
			if len(rin)+len(rout) > 0 { // not with sequence_batching (checkPython)
				rs, err := serving.NewReshape(inst.Model, batched, rin, rout)
				if err != nil {
					return err
				}
				inst.Reshape = rs
			}
			inst.Config = described
			return r.setCache(inst, cfg)
		},
	}, hostMetrics{r.metrics}, r.log)
	if err := h.Start(ctx); err != nil {
		_ = h.Shutdown(context.Background(), 30*time.Second)
		return nil, err
	}
	return h, nil
}

// pythonRepository is the repository as a Python model reaches it
// (pybackend.Repository: pb_utils.load_model and its kin).
type pythonRepository struct{ r *Repository }

func (p pythonRepository) Load(ctx context.Context, name string, config []byte) error {
	if p.r.cfg.Mode != ModeExplicit { // as the API's loads, at start-up too
		return p.r.controlDisabled(name)
	}
	var opts serving.LoadOptions
	if len(config) > 0 {
		opts.Config = config
	}
	return p.r.Load(ctx, name, opts)
}

// Unload returns once the model takes no more requests, without waiting
// for those in flight (as Triton's): a model may unload itself.
func (p pythonRepository) Unload(ctx context.Context, name string, dependents bool) error {
	if p.r.cfg.Mode != ModeExplicit {
		return p.r.controlDisabled(name)
	}
	done := make(chan error, 1)
	go func() {
		done <- p.r.Unload(context.WithoutCancel(ctx), name, serving.UnloadOptions{Dependents: dependents})
	}()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			if (*p.r.served.Load())[name] == nil {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Ready is false for a model that is not ready (or in the repository and
// not loaded); one the repository does not have is an error (Triton's
// sentence).
func (p pythonRepository) Ready(name, version string) (bool, error) {
	err := p.r.Ready(name, version)
	if me, ok := serving.AsModelError(err); ok && me.Kind == serving.ModelUnknown {
		if _, derr := p.r.dir(name); derr != nil {
			return false, err
		}
	}
	return err == nil, nil
}

// describePython is the configuration a Python model is served under:
// config.pbtxt's, with the batching and instances fw runs it with.
func describePython(name string, cfg *pb.ModelConfig, labels map[string]string, file string, bc batcher.Config) (serving.ModelConfig, error) {
	c := serving.ModelConfig{Name: name, Backend: backendPython, MaxBatchSize: int(cfg.GetMaxBatchSize()),
		VersionPolicy: versionPolicyJSON(cfg), DefaultModelFilename: file, Instances: bc.Instances,
		MaxQueueDelay: bc.MaxDelay.Microseconds(), Parameters: parametersJSON(cfg), Decoupled: cfg.GetModelTransactionPolicy().GetDecoupled()}
	for _, p := range cfg.GetDynamicBatching().GetPreferredBatchSize() {
		c.PreferredBatchSizes = append(c.PreferredBatchSizes, int64(p))
	}
	c.Queues = queuesJSON(cfg.GetDynamicBatching())
	c.PreserveOrdering = bc.PreserveOrdering
	for _, in := range cfg.GetInput() {
		c.Inputs = append(c.Inputs, serving.TensorConfig{Name: in.GetName(), DataType: in.GetDataType().String(),
			Dims: slices.Clone(in.GetDims()), Format: in.GetFormat().String(), Optional: in.GetOptional(), Reshape: reshapeOf(in.GetReshape())})
	}
	for _, out := range cfg.GetOutput() {
		tc := serving.TensorConfig{Name: out.GetName(), DataType: out.GetDataType().String(), Dims: slices.Clone(out.GetDims()), Reshape: reshapeOf(out.GetReshape())}
		if l := out.GetLabelFilename(); l != "" {
			doc, ok := labels[l]
			if !ok {
				return c, fmt.Errorf("output %q: label_filename %q is not a file in the model's directory", out.GetName(), l)
			}
			tc.LabelFilename, tc.Labels = l, splitLabels(doc)
		}
		c.Outputs = append(c.Outputs, tc)
	}
	return c, nil
}

// streamModel runs a decoupled model for a Python model's BLS request
// (exec(decoupled=True)), each response's outputs by name to send.
func (r *Repository) streamModel(ctx context.Context, model, version string, inputs map[string]engine.Tensor, want []string,
	send func(map[string]engine.Tensor, error, bool) error) error {
	inst, ins, err := r.blsInputs(model, version, inputs)
	if err != nil {
		return err
	}
	if !inst.Decoupled() {
		return fmt.Errorf("model %q is not decoupled: call exec() without decoupled=True", model)
	}
	return serving.InferStream(ctx, inst, ins, func(outs []engine.Tensor, merr error, final bool) error {
		if merr != nil || outs == nil {
			return send(map[string]engine.Tensor{}, merr, final)
		}
		return send(pickOutputs(inst, outs, want), nil, final)
	})
}

// blsInputs finds the model a BLS request names and orders its inputs.
func (r *Repository) blsInputs(model, version string, inputs map[string]engine.Tensor) (*serving.Instance, []engine.Tensor, error) {
	inst, err := r.Get(model, version)
	if err != nil {
		return nil, nil, err
	}
	specs := inst.Inputs()
	ins := make([]engine.Tensor, len(specs))
	for i, sp := range specs {
		t, ok := inputs[sp.Name]
		if !ok && !sp.Optional {
			return nil, nil, fmt.Errorf("model %q needs input %q, which the request does not have", model, sp.Name)
		}
		ins[i] = t
	}
	for n := range inputs {
		if engine.SpecIndex(specs, n) < 0 {
			return nil, nil, fmt.Errorf("model %q has no input %q", model, n)
		}
	}
	return inst, ins, nil
}

// pickOutputs names outs, keeping those wanted (all when none are).
func pickOutputs(inst *serving.Instance, outs []engine.Tensor, want []string) map[string]engine.Tensor {
	res := make(map[string]engine.Tensor, len(outs))
	for i, sp := range inst.Outputs() {
		if i < len(outs) && !outs[i].Absent() && (len(want) == 0 || slices.Contains(want, sp.Name)) {
			res[sp.Name] = outs[i]
		}
	}
	return res
}

// callModel runs a model for a Python model's BLS request
// (pb_utils.InferenceRequest(...).exec()): the model's newest ready
// version unless one is named, its inputs by name, the outputs asked for
// (all when none are).
func (r *Repository) callModel(ctx context.Context, model, version string, inputs map[string]engine.Tensor, want []string) (map[string]engine.Tensor, error) {
	inst, ins, err := r.blsInputs(model, version, inputs)
	if err != nil {
		return nil, err
	}
	outs, _, err := serving.Infer(ctx, r, inst, ins)
	if err != nil {
		return nil, err
	}
	res := pickOutputs(inst, outs, want)
	for _, w := range want {
		if _, ok := res[w]; !ok && engine.SpecIndex(inst.Outputs(), w) < 0 {
			return nil, fmt.Errorf("model %q has no output %q", model, w)
		}
	}
	return res, nil // an output the model's response left out is left out here too
}

// reshapeOf is a tensor's reshape as its described configuration carries
// it: nil without one, a non-nil (maybe empty: a scalar) shape with one.
func reshapeOf(r *pb.ModelTensorReshape) []int64 {
	if r == nil {
		return nil
	}
	return append([]int64{}, r.GetShape()...)
}

// batchedShape is dims with the batch axis first when batched.
func batchedShape(batched bool, dims []int64) []int64 {
	if batched {
		return append([]int64{-1}, dims...)
	}
	return slices.Clone(dims)
}
