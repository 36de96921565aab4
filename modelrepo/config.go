package modelrepo

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/fw-serve/fw/engine"
	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
	"github.com/fw-serve/fw/serving"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// maxConfigBytes bounds a config.pbtxt (or a load's config override): real
// ones are a few kilobytes.
const maxConfigBytes = 1 << 20

// maxDims and maxBatchSize bound what a configuration may declare.
const (
	maxDims      = 16
	maxBatchSize = 1 << 16
)

// supported are the configuration fields fw honours, as paths of field
// names. Every other field set in a configuration fails the load, naming
// it: fw never ignores what a configuration asks for.
var supported = map[string]bool{
	"name": true, "platform": true, "backend": true, "max_batch_size": true,
	"input": true, "input.name": true, "input.data_type": true, "input.format": true, "input.dims": true,
	"input.reshape": true, "input.reshape.shape": true, "input.optional": true, "input.allow_ragged_batch": true,
	"batch_input": true, "batch_input.kind": true, "batch_input.target_name": true, "batch_input.data_type": true, "batch_input.source_input": true,
	"batch_output": true, "batch_output.kind": true, "batch_output.target_name": true, "batch_output.source_input": true,
	"output": true, "output.name": true, "output.data_type": true, "output.dims": true,
	"output.reshape": true, "output.reshape.shape": true, "output.label_filename": true,
	"dynamic_batching": true, "dynamic_batching.preferred_batch_size": true,
	"dynamic_batching.max_queue_delay_microseconds": true, "dynamic_batching.preserve_ordering": true,
	"dynamic_batching.default_queue_policy": true, "dynamic_batching.default_queue_policy.max_queue_size": true,
	"dynamic_batching.default_queue_policy.timeout_action": true, "dynamic_batching.default_queue_policy.default_timeout_microseconds": true,
	"dynamic_batching.default_queue_policy.allow_timeout_override": true, "dynamic_batching.priority_queue_policy": true,
	"dynamic_batching.priority_levels": true, "dynamic_batching.default_priority_level": true,
	"instance_group": true, "instance_group.name": true, "instance_group.count": true,
	"instance_group.kind": true, "instance_group.gpus": true,
	"version_policy": true, "version_policy.latest": true, "version_policy.latest.num_versions": true,
	"version_policy.all": true, "version_policy.specific": true, "version_policy.specific.versions": true,
	"default_model_filename": true, "parameters": true, "response_cache": true, "response_cache.enable": true,
	"sequence_batching": true, "sequence_batching.max_sequence_idle_microseconds": true, "sequence_batching.iterative_sequence": true,
	"sequence_batching.control_input": true, "sequence_batching.control_input.name": true,
	"sequence_batching.control_input.control": true, "sequence_batching.control_input.control.kind": true,
	"sequence_batching.control_input.control.int32_false_true": true, "sequence_batching.control_input.control.fp32_false_true": true,
	"sequence_batching.control_input.control.bool_false_true": true, "sequence_batching.control_input.control.data_type": true,
	"sequence_batching.state": true, "sequence_batching.state.input_name": true, "sequence_batching.state.output_name": true,
	"sequence_batching.state.data_type": true, "sequence_batching.state.dims": true,
	"sequence_batching.state.initial_state": true, "sequence_batching.state.initial_state.data_type": true,
	"sequence_batching.state.initial_state.dims": true, "sequence_batching.state.initial_state.zero_data": true,
	"sequence_batching.state.initial_state.data_file": true, "sequence_batching.state.initial_state.name": true,
	// Taken and reported: fw keeps each sequence's state as its own tensor,
	// which the model reads as the state input and replaces with the state
	// output, whatever the buffer hint says; growable memory lets that
	// output grow past the state's dims (sequence.State.Growable).
	"sequence_batching.state.use_same_buffer_for_input_output": true, "sequence_batching.state.use_growable_memory": true,
	"sequence_batching.direct": true, "sequence_batching.direct.max_queue_delay_microseconds": true,
	"sequence_batching.direct.minimum_slot_utilization": true,
	"sequence_batching.oldest":                          true, "sequence_batching.oldest.max_candidate_sequences": true,
	"sequence_batching.oldest.preferred_batch_size": true, "sequence_batching.oldest.max_queue_delay_microseconds": true,
	"ensemble_scheduling": true, "ensemble_scheduling.step": true, "ensemble_scheduling.step.model_name": true,
	"model_transaction_policy": true, "model_transaction_policy.decoupled": true,
	"ensemble_scheduling.step.model_version": true, "ensemble_scheduling.step.input_map": true, "ensemble_scheduling.step.output_map": true,
}

// unsupportedFields lists the set fields of msg that supported lacks.
func unsupportedFields(msg protoreflect.Message, prefix string) []string {
	var out []string
	msg.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		path := prefix + string(fd.Name())
		if !supported[path] {
			out = append(out, path)
			return true
		}
		if fd.Kind() != protoreflect.MessageKind || fd.IsMap() {
			return true
		}
		if fd.IsList() {
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				out = append(out, unsupportedFields(l.Get(i).Message(), path+".")...)
			}
			return true
		}
		out = append(out, unsupportedFields(v.Message(), path+".")...)
		return true
	})
	return out
}

// parseConfig reads a configuration: protobuf text format (config.pbtxt)
// or, when json, Triton's JSON form (a load request's override). Unknown
// fields, bad syntax and fields fw does not support are errors that say
// which.
func parseConfig(data []byte, json bool) (*pb.ModelConfig, error) {
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("the configuration is %d bytes; the limit is %d", len(data), maxConfigBytes)
	}
	cfg := &pb.ModelConfig{}
	var err error
	if json {
		err = protojson.Unmarshal(data, cfg)
	} else {
		err = prototext.Unmarshal(data, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("the configuration does not parse: %w", err)
	}
	if bad := unsupportedFields(cfg.ProtoReflect(), ""); len(bad) > 0 {
		sort.Strings(bad)
		return nil, fmt.Errorf("the configuration sets %s, which fw does not support; remove %s (docs/serving.md, Moving from Triton, lists what fw reads)",
			strings.Join(bad, ", "), map[bool]string{true: "it", false: "them"}[len(bad) == 1])
	}
	return cfg, nil
}

// versionsToLoad returns the versions (numeric subdirectories of dir that
// hold something) the version policy selects, newest first.
func versionsToLoad(dir string, cfg *pb.ModelConfig) ([]int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var all []int64
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		n, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil || n < 0 || strconv.FormatInt(n, 10) != e.Name() {
			continue // Triton skips directories that are not versions
		}
		all = append(all, n)
	}
	slices.Sort(all)
	slices.Reverse(all)
	vp := cfg.GetVersionPolicy()
	switch {
	case vp.GetAll() != nil:
		return all, nil
	case vp.GetSpecific() != nil:
		var out []int64
		for _, v := range vp.GetSpecific().GetVersions() {
			if !slices.Contains(all, v) {
				return nil, fmt.Errorf("version_policy names version %d, but %s has no directory %d", v, dir, v)
			}
			out = append(out, v)
		}
		slices.Sort(out)
		slices.Reverse(out)
		return slices.Compact(out), nil
	}
	n := 1
	if vp.GetLatest() != nil && vp.GetLatest().GetNumVersions() > 0 {
		n = int(vp.GetLatest().GetNumVersions())
	}
	return all[:min(n, len(all))], nil
}

// platformFormats are the model file formats each Triton platform or
// backend name serves in fw (from engine's formats table); "fw" serves any.
func platformFormats(name string) ([]engine.Format, bool) {
	if name == "fw" {
		return nil, true
	}
	var out []engine.Format
	for _, fi := range engine.Formats() {
		if fi.Platform == name || fi.Backend == name {
			out = append(out, fi.Format)
		}
	}
	return out, len(out) > 0
}

// defaultFilenames are the files Triton looks for in a version directory
// when the configuration names none, for a platform or backend name.
func defaultFilenames(name string) []string {
	var out []string
	for _, fi := range engine.Formats() {
		if (fi.Platform == name || fi.Backend == name) && !slices.Contains(out, fi.RepositoryFile) {
			out = append(out, fi.RepositoryFile)
		}
	}
	return out
}

// checkPlatform refuses platforms and backends fw does not serve.
func checkPlatform(cfg *pb.ModelConfig) error {
	for _, name := range []string{cfg.GetPlatform(), cfg.GetBackend()} {
		if name == "" || name == platformEnsemble && name == cfg.GetPlatform() || name == backendPython && name == cfg.GetBackend() {
			continue
		}
		if _, ok := platformFormats(name); !ok {
			return fmt.Errorf("platform or backend %q is not served by fw; fw serves onnxruntime_onnx (backend onnxruntime), pytorch_libtorch (backend pytorch), fw's own files (backend fw), Python models (backend python) and ensembles of them (platform ensemble)", name)
		}
	}
	if err := checkPython(cfg); err != nil {
		return err
	}
	return checkEnsemble(cfg)
}

// modelFile finds the file of one version directory: the configuration's
// default_model_filename, the platform's default name, or the one model
// file there.
func modelFile(versionDir string, cfg *pb.ModelConfig) (string, error) {
	if name := cfg.GetDefaultModelFilename(); name != "" {
		if !filepath.IsLocal(name) || strings.ContainsRune(name, filepath.Separator) {
			return "", fmt.Errorf("default_model_filename %q must be a file name inside the version directory", name)
		}
		return filepath.Join(versionDir, name), nil
	}
	for _, key := range []string{cfg.GetPlatform(), cfg.GetBackend()} {
		for _, name := range defaultFilenames(key) {
			p := filepath.Join(versionDir, name)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				return p, nil
			}
		}
	}
	entries, err := os.ReadDir(versionDir)
	if err != nil {
		return "", err
	}
	var found []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || !slices.Contains(engine.ModelFileExts(), strings.ToLower(filepath.Ext(e.Name()))) || !e.Type().IsRegular() {
			continue
		}
		found = append(found, e.Name())
	}
	switch len(found) {
	case 1:
		return filepath.Join(versionDir, found[0]), nil
	case 0:
		return "", fmt.Errorf("%s holds no model file (model.onnx, model.pt, model.pt2, or set default_model_filename)", versionDir)
	}
	return "", fmt.Errorf("%s holds %d model files (%s); set default_model_filename to the one to serve", versionDir, len(found), strings.Join(found, ", "))
}

// typeName is the configuration's name of a dtype: TYPE_FP32...,
// TYPE_STRING for BYTES.
func typeName(d engine.DType) string { return serving.ConfigDataType(d) }

// describe checks cfg against the loaded model and returns the
// configuration fw serves it under: cfg as given, completed from the model
// where it is silent (inputs, outputs, max_batch_size when auto).
func describe(inst *serving.Instance, cfg *pb.ModelConfig, auto bool, labels map[string]string) (serving.ModelConfig, *serving.Reshape, error) {
	m := inst.Model
	base := serving.Config(inst, filepath.Base(m.Path)) // completed from the file
	if auto {
		return base, nil, nil
	}
	if formats, ok := platformFormats(cfg.GetPlatform()); ok && formats != nil && !slices.Contains(formats, m.Format) {
		return base, nil, fmt.Errorf("platform %q does not serve a %s file (%s)", cfg.GetPlatform(), m.Format, filepath.Base(m.Path))
	}
	if formats, ok := platformFormats(cfg.GetBackend()); ok && formats != nil && !slices.Contains(formats, m.Format) {
		return base, nil, fmt.Errorf("backend %q does not serve a %s file (%s)", cfg.GetBackend(), m.Format, filepath.Base(m.Path))
	}
	out := base
	if cfg.GetPlatform() != "" {
		out.Platform = cfg.GetPlatform()
	}
	if cfg.GetBackend() != "" {
		out.Backend = cfg.GetBackend()
	}
	mbs := int(cfg.GetMaxBatchSize())
	if batchingFromFile(cfg) {
		mbs = base.MaxBatchSize // completed from the file: --max-batch-size when it has a batch axis
	}
	out.MaxBatchSize = mbs
	batched := mbs > 0
	if batched && !m.Batched() {
		return base, nil, fmt.Errorf("max_batch_size %d needs a model whose inputs and outputs all have a variable first axis (the batch), but %s has %s -> %s; set max_batch_size: 0",
			mbs, filepath.Base(m.Path), serving.Describe(m.Inputs()), serving.Describe(m.Outputs()))
	}
	var err error
	// The client's tensors: a sequence batcher's controls and state are
	// not listed (Triton's rule), except a state output listed to debug.
	if inst.Sequences != nil {
		for _, in := range cfg.GetInput() {
			if !slices.ContainsFunc(inst.Inputs(), func(sp engine.TensorSpec) bool { return sp.Name == in.GetName() }) &&
				slices.ContainsFunc(m.Inputs(), func(sp engine.TensorSpec) bool { return sp.Name == in.GetName() }) {
				return base, nil, fmt.Errorf("input %q is filled by the server (sequence_batching's control inputs and state); list only the inputs clients send", in.GetName())
			}
		}
	}
	var rin, rout []serving.ReshapeTensor
	if out.Inputs, rin, err = tensors("input", inst.Inputs(), ioOf(cfg.GetInput()), batched, nil, inst.Model.Meta); err != nil {
		return base, nil, err
	}
	if out.Outputs, rout, err = tensors("output", inst.Outputs(), ioOfOut(cfg.GetOutput()), batched, labels, nil); err != nil {
		return base, nil, err
	}
	var reshape *serving.Reshape
	if len(rin)+len(rout) > 0 {
		if inst.Sequences != nil {
			return base, nil, fmt.Errorf("reshape is not supported with sequence_batching; export the model with the shapes clients send")
		}
		if reshape, err = serving.NewReshape(m, batched, rin, rout); err != nil {
			return base, nil, err
		}
	}
	if inst.Sequences != nil {
		sc := inst.Sequences.Config()
		out.SequenceBatching = sequenceJSON(cfg, &sc)
	}
	if db := cfg.GetDynamicBatching(); db != nil {
		out.Queues = queuesJSON(db)
		out.PreferredBatchSizes = nil
		for _, p := range db.GetPreferredBatchSize() {
			out.PreferredBatchSizes = append(out.PreferredBatchSizes, int64(p))
		}
	}
	if vp := versionPolicyJSON(cfg); vp != nil {
		out.VersionPolicy = vp
	}
	out.Parameters = parametersJSON(cfg)
	if v, ok := base.Parameters[paramHoldWhenIdle]; ok && batchingFromFile(cfg) && out.Parameters[paramHoldWhenIdle] == "" {
		if out.Parameters == nil { // batched as the server's flags say, which the parameter reports
			out.Parameters = map[string]string{}
		}
		out.Parameters[paramHoldWhenIdle] = v
	}
	if cfg.GetDefaultModelFilename() != "" {
		out.DefaultModelFilename = cfg.GetDefaultModelFilename()
	}
	return out, reshape, nil
}

// versionPolicyJSON is cfg's version_policy as Triton's JSON renders it;
// nil when it sets none.
func versionPolicyJSON(cfg *pb.ModelConfig) map[string]any {
	vp := cfg.GetVersionPolicy()
	switch {
	case vp.GetAll() != nil:
		return map[string]any{"all": map[string]any{}}
	case vp.GetSpecific() != nil:
		return map[string]any{"specific": map[string]any{"versions": vp.GetSpecific().GetVersions()}}
	case vp.GetLatest() != nil:
		return map[string]any{"latest": map[string]any{"num_versions": int(max(1, vp.GetLatest().GetNumVersions()))}}
	}
	return nil
}

// parametersJSON is cfg's parameters (key -> string_value); nil when none.
func parametersJSON(cfg *pb.ModelConfig) map[string]string {
	if len(cfg.GetParameters()) == 0 {
		return nil
	}
	out := map[string]string{}
	for k, v := range cfg.GetParameters() {
		out[k] = v.GetStringValue()
	}
	return out
}

// batchingFromFile reports whether a configuration leaves the batching to
// auto-complete: no max_batch_size and no inputs or outputs listed (so the
// file's first axes decide, as Triton's auto-complete does).
func batchingFromFile(cfg *pb.ModelConfig) bool {
	return cfg.GetMaxBatchSize() == 0 && len(cfg.GetInput()) == 0 && len(cfg.GetOutput()) == 0
}

// tensorCfg is an input or output of a configuration, the parts fw reads.
type tensorCfg struct {
	name, format, label string
	dtype               pb.DataType
	dims, reshape       []int64
	hasReshape          bool
}

func ioOf(ins []*pb.ModelInput) []tensorCfg {
	out := make([]tensorCfg, len(ins))
	for i, t := range ins {
		out[i] = tensorCfg{name: t.GetName(), dtype: t.GetDataType(), dims: t.GetDims(), format: t.GetFormat().String(),
			reshape: t.GetReshape().GetShape(), hasReshape: t.GetReshape() != nil}
	}
	return out
}

func ioOfOut(outs []*pb.ModelOutput) []tensorCfg {
	out := make([]tensorCfg, len(outs))
	for i, t := range outs {
		out[i] = tensorCfg{name: t.GetName(), dtype: t.GetDataType(), dims: t.GetDims(), label: t.GetLabelFilename(),
			reshape: t.GetReshape().GetShape(), hasReshape: t.GetReshape() != nil}
	}
	return out
}

// tensors checks a configuration's inputs (or outputs) against the model's
// specs and returns them in the model's order. A configuration that lists
// none takes the model's; one that lists some must name only tensors the
// model has, with its datatype and compatible dims. An input the
// configuration leaves out gets the format fw's preprocessing metadata
// (meta, nil when none) implies.
func tensors(kind string, specs []engine.TensorSpec, cfgs []tensorCfg, batched bool, labels map[string]string, meta *engine.Metadata) ([]serving.TensorConfig, []serving.ReshapeTensor, error) {
	byName := map[string]engine.TensorSpec{}
	index := map[string]int{}
	for i, sp := range specs {
		byName[sp.Name] = sp
		index[sp.Name] = i
	}
	var reshapes []serving.ReshapeTensor
	auto := func(sp engine.TensorSpec) serving.TensorConfig {
		dims := sp.Shape
		if batched && len(dims) > 0 {
			dims = dims[1:]
		}
		tc := serving.TensorConfig{Name: sp.Name, DataType: typeName(sp.DType), Dims: append([]int64{}, dims...)}
		if kind == "input" {
			tc.Format = serving.InputFormat(meta, index[sp.Name], dims)
		}
		return tc
	}
	if len(cfgs) == 0 {
		out := make([]serving.TensorConfig, len(specs))
		for i, sp := range specs {
			out[i] = auto(sp)
		}
		return out, nil, nil
	}
	given := map[string]serving.TensorConfig{}
	for _, c := range cfgs {
		sp, ok := byName[c.name]
		if !ok {
			return nil, nil, fmt.Errorf("%s %q of the configuration is not in the model, whose %ss are %s", kind, c.name, kind, serving.Describe(specs))
		}
		if _, dup := given[c.name]; dup {
			return nil, nil, fmt.Errorf("%s %q is listed twice in the configuration", kind, c.name)
		}
		if want := typeName(sp.DType); c.dtype.String() != want {
			return nil, nil, fmt.Errorf("%s %q: the configuration says %s, the model takes %s", kind, c.name, c.dtype, want)
		}
		if len(c.dims) > maxDims || len(c.reshape) > maxDims {
			return nil, nil, fmt.Errorf("%s %q: at most %d dims", kind, c.name, maxDims)
		}
		modelShape := sp.Shape
		if batched {
			modelShape = modelShape[1:]
		}
		if c.hasReshape {
			if err := compatible(c.reshape, modelShape); err != nil {
				return nil, nil, fmt.Errorf("%s %q: reshape %s does not fit the model's shape %s: %v", kind, c.name, serving.ShapeString(c.reshape), serving.ShapeString(modelShape), err)
			}
			if err := serving.ReshapeFits(c.dims, c.reshape); err != nil {
				return nil, nil, fmt.Errorf("%s %q: %w", kind, c.name, err)
			}
			reshapes = append(reshapes, serving.ReshapeTensor{Index: index[c.name], Dims: c.dims, Model: c.reshape})
		} else if err := compatible(c.dims, modelShape); err != nil {
			return nil, nil, fmt.Errorf("%s %q: dims %s do not fit the model's shape %s (without the batch axis when max_batch_size > 0): %v", kind, c.name, serving.ShapeString(c.dims), serving.ShapeString(modelShape), err)
		}
		tc := serving.TensorConfig{Name: c.name, DataType: c.dtype.String(), Dims: append([]int64{}, c.dims...)}
		if c.hasReshape {
			tc.Reshape = append([]int64{}, c.reshape...)
		}
		if kind == "input" {
			tc.Format = c.format
		} else if c.label != "" {
			if _, ok := labels[c.label]; !ok {
				return nil, nil, fmt.Errorf("output %q: label_filename %q is not a file in the model's directory", c.name, c.label)
			}
			tc.LabelFilename, tc.Labels = c.label, splitLabels(labels[c.label])
		}
		given[c.name] = tc
	}
	out := make([]serving.TensorConfig, 0, len(specs))
	for _, sp := range specs {
		if tc, ok := given[sp.Name]; ok {
			out = append(out, tc)
		} else if kind == "input" {
			return nil, nil, fmt.Errorf("the model's input %q is missing from the configuration, which lists %d inputs; list every input or none", sp.Name, len(cfgs))
		} else {
			out = append(out, auto(sp))
		}
	}
	return out, reshapes, nil
}

// compatible checks that dims (-1 for any size) fit a model shape (-1 or 0
// for a dynamic axis).
func compatible(dims, shape []int64) error {
	if len(dims) != len(shape) {
		return fmt.Errorf("%d dims against %d", len(dims), len(shape))
	}
	for i := range dims {
		if dims[i] < -1 || dims[i] == 0 {
			return fmt.Errorf("dim %d is %d; use a positive size or -1", i, dims[i])
		}
		if dims[i] > 0 && shape[i] > 0 && dims[i] != shape[i] {
			return fmt.Errorf("dim %d is %d, the model's %d", i, dims[i], shape[i])
		}
	}
	return nil
}

// splitLabels reads a label file as Triton does: one label per line, the
// line's index its class (a final newline ends the last label; a "\r"
// before a newline is not part of it).
func splitLabels(doc string) []string {
	if doc == "" {
		return []string{}
	}
	doc = strings.TrimSuffix(doc, "\n")
	out := strings.Split(doc, "\n")
	for i, l := range out {
		out[i] = strings.TrimSuffix(l, "\r")
	}
	return out
}

// paramHoldWhenIdle is fw's configuration parameter that chooses how a
// dynamic batcher without preferred sizes uses max_queue_delay_microseconds:
// "true" (the default, Triton's) holds a batch short of max_batch_size up
// to the delay even while the engine is idle; "false" (fw serve's
// --max-delay) runs what is queued at once when the engine is idle and
// waits only behind a running call. Triton ignores parameters it does
// not know, so a configuration with it still loads there.
const paramHoldWhenIdle = "fw_hold_when_idle"

// holdWhenIdle reads paramHoldWhenIdle of cfg (true when absent).
func holdWhenIdle(cfg *pb.ModelConfig) (bool, error) {
	p, ok := cfg.GetParameters()[paramHoldWhenIdle]
	if !ok {
		return true, nil
	}
	switch strings.ToLower(strings.TrimSpace(p.GetStringValue())) {
	case "true", "1", "yes":
		return true, nil
	case "false", "0", "no":
		return false, nil
	}
	return false, fmt.Errorf("parameters %s is %q: it must be \"true\" (Triton's: a batch waits up to max_queue_delay_microseconds for max_batch_size rows, even while the engine is idle) or \"false\" (an idle engine runs what is queued at once)", paramHoldWhenIdle, p.GetStringValue())
}

// unusedParameters are the keys of cfg's parameters that fw does not act
// on for an ONNX or TorchScript model (all but intra_op_thread_count),
// sorted. Triton's backends ignore keys they do not know too; fw logs them
// at load so that a backend option (inter_op_thread_count,
// execution_mode...) is not ignored silently.
func unusedParameters(cfg *pb.ModelConfig) []string {
	var out []string
	for k := range cfg.GetParameters() {
		if k != "intra_op_thread_count" && k != paramHoldWhenIdle {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
