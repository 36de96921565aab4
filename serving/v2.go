package serving

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/fw-serve/fw/engine"
)

// The Open Inference Protocol's vocabulary, shared by its HTTP and gRPC
// forms.

// v2Names are the protocol's datatype names of fw's dtypes.
var v2Names = map[engine.DType]string{
	engine.Bool: "BOOL", engine.Uint8: "UINT8", engine.Uint16: "UINT16", engine.Uint32: "UINT32", engine.Uint64: "UINT64",
	engine.Int8: "INT8", engine.Int16: "INT16", engine.Int32: "INT32", engine.Int64: "INT64",
	engine.Float16: "FP16", engine.Float32: "FP32", engine.Float64: "FP64", engine.BFloat16: "BF16",
	engine.String: "BYTES",
}

// datatypeOrder is the protocol's order of its datatypes, for messages.
var datatypeOrder = []engine.DType{
	engine.Bool, engine.Uint8, engine.Uint16, engine.Uint32, engine.Uint64, engine.Int8, engine.Int16, engine.Int32, engine.Int64,
	engine.Float16, engine.Float32, engine.Float64, engine.BFloat16, engine.String,
}

// DatatypeName is the protocol's name of d ("FP32", "INT64", "BYTES"...),
// "UNKNOWN" for a dtype it has none for.
func DatatypeName(d engine.DType) string {
	if s, ok := v2Names[d]; ok {
		return s
	}
	return "UNKNOWN"
}

// ParseDatatype maps a protocol datatype name to fw's dtype, engine.Invalid
// for a name the protocol does not have.
func ParseDatatype(s string) engine.DType {
	for d, name := range v2Names {
		if name == s {
			return d
		}
	}
	return engine.Invalid
}

// Datatypes lists the protocol's datatypes fw takes, for messages:
// "BOOL, UINT8, ..., BF16 and BYTES".
func Datatypes() string {
	names := make([]string, len(datatypeOrder))
	for i, d := range datatypeOrder {
		names[i] = v2Names[d]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// ConfigDataType is a model configuration's name of d: TYPE_FP32...,
// TYPE_STRING for BYTES (the configuration's own name for it).
func ConfigDataType(d engine.DType) string {
	if d == engine.String {
		return "TYPE_STRING"
	}
	return "TYPE_" + DatatypeName(d)
}

// ParseConfigDataType maps a model configuration's datatype name
// (TYPE_FP32..., TYPE_STRING) to fw's dtype, engine.Invalid for another.
func ParseConfigDataType(s string) engine.DType {
	if s == "TYPE_STRING" {
		return engine.String
	}
	if !strings.HasPrefix(s, "TYPE_") {
		return engine.Invalid
	}
	return ParseDatatype(strings.TrimPrefix(s, "TYPE_"))
}

// ShapeString writes a shape as the protocol does: [-1,64].
func ShapeString(shape []int64) string {
	b := []byte{'['}
	for i, d := range shape {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, d, 10)
	}
	return string(append(b, ']'))
}

// Describe lists tensor specs for error messages: "input" (FP32 [-1,64]).
func Describe(specs []engine.TensorSpec) string {
	var sb strings.Builder
	for i, sp := range specs {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "%q (%s %s)", sp.Name, DatatypeName(sp.DType), ShapeString(sp.Shape))
	}
	return sb.String()
}

// Platform is Triton's platform name of a model format (engine's formats
// table); "" for a format fw does not know.
func Platform(f engine.Format) string {
	if f == engine.FormatEnsemble {
		return "ensemble"
	}
	info, _ := f.Info()
	return info.Platform
}

// Backend is Triton's backend name of a model format; "" for a format fw
// does not know.
func Backend(f engine.Format) string {
	if f == engine.FormatPython {
		return "python"
	}
	info, _ := f.Info()
	return info.Backend
}

// Extensions are the protocol extensions fw serves, as GET /v2 and the
// ServerMetadata call list them.
func Extensions() []string {
	return []string{"classification", "binary_tensor_data", "model_configuration", "statistics", "model_repository", "system_shared_memory", "cuda_shared_memory", "logging", "trace", "generate"}
}

// TensorConfig is one input or output in a model configuration.
type TensorConfig struct {
	Name string
	// DataType is the model configuration's name of the element type:
	// TYPE_FP32, TYPE_INT64...
	DataType string
	// Dims are the tensor's dimensions without the batch axis when the
	// configuration's MaxBatchSize > 0; -1 is any size.
	Dims []int64
	// Reshape, when set, is the shape the model itself takes or gives
	// (without the batch axis): clients send and receive Dims.
	Reshape []int64
	// Format is an input's layout: FORMAT_NONE, FORMAT_NCHW or FORMAT_NHWC.
	Format string
	// LabelFilename is an output's labels file (classification).
	LabelFilename string
	// Optional marks an input a request may leave out.
	Optional bool
	// AllowRaggedBatch marks an input whose shape may differ between
	// the requests of one batch (ragged batching).
	AllowRaggedBatch bool
	// Labels are LabelFilename's lines, one class per line (index 0 the
	// first), for the classification extension.
	Labels []string
}

// InputFormat is the model configuration's format of input i, whose dims
// (without the batch axis when batched) are dims: FORMAT_NCHW for the input
// fw's image preprocessing fills (the first input of a model whose metadata
// has preprocessing.image, unflattened, channels first: the only layout
// /predict/image writes), FORMAT_NONE for every other input.
func InputFormat(meta *engine.Metadata, i int, dims []int64) string {
	if i != 0 || meta == nil || meta.Preprocessing == nil || meta.Preprocessing.Image == nil {
		return "FORMAT_NONE"
	}
	im := meta.Preprocessing.Image
	if im.Flatten || len(dims) != 3 || (im.Layout != "" && !strings.EqualFold(im.Layout, "NCHW")) {
		return "FORMAT_NONE"
	}
	if dims[0] > 0 && dims[0] != int64(im.Channels) {
		return "FORMAT_NONE"
	}
	return "FORMAT_NCHW"
}

// ModelConfig is what a Triton model configuration says about the model fw
// serves: the form ModelConfig (gRPC) and GET /v2/models/{m}/config (HTTP)
// render.
type ModelConfig struct {
	Name, Platform, Backend string
	// MaxBatchSize is the batcher's rows per engine call when the model
	// has a batch axis (engine.Model.Batched: every input and output has a
	// variable first axis), else 0 (the model takes its inputs whole, dims
	// are the full shapes, and there is no dynamic batching).
	MaxBatchSize  int
	Inputs        []TensorConfig
	Outputs       []TensorConfig
	MaxQueueDelay int64 // microseconds the batcher waits to fill a batch (MaxBatchSize > 0)
	Instances     int   // engine instances (--instances)
	GPUs          []int // the CUDA device the instances run on, if any
	// DefaultModelFilename is the served file's base name.
	DefaultModelFilename string
	// PreferredBatchSizes are the dynamic batcher's preferred sizes.
	PreferredBatchSizes []int64
	// PreserveOrdering is dynamic_batching's preserve_ordering: answers
	// leave in the order their batches were taken.
	PreserveOrdering bool
	// Queues are the dynamic batcher's priority_levels,
	// default_priority_level, default_queue_policy and
	// priority_queue_policy as Triton's JSON renders them (nil: none).
	Queues map[string]any
	// VersionPolicy is Triton's version_policy as JSON renders it
	// ({"latest": {"num_versions": 1}}, {"all": {}}, {"specific": {...}}).
	VersionPolicy map[string]any
	// InstanceKind is KIND_CPU or KIND_GPU.
	InstanceKind string
	// Parameters are the configuration's parameters (key -> string_value).
	Parameters map[string]string
	// ResponseCache says whether the model's answers are cached
	// (response_cache { enable: true }).
	ResponseCache bool
	// SequenceBatching, when set, is the model's sequence_batching as
	// Triton's JSON renders it (a stateful model; it then has no
	// dynamic_batching).
	SequenceBatching map[string]any
	// BatchInputs and BatchOutputs are the configuration's batch_input
	// and batch_output (ragged batching).
	BatchInputs  []BatchInputConfig
	BatchOutputs []BatchOutputConfig
	// Ensemble, when set, are the steps of an ensemble (platform
	// "ensemble": ensemble_scheduling), which has no scheduler and no
	// engine instances of its own.
	Ensemble []EnsembleStep
	// Decoupled is model_transaction_policy decoupled: the model answers
	// a request any number of times (a Python model's response sender).
	Decoupled bool
}

// BatchInputConfig is one batch_input: inputs the server makes from the
// batch it formed (Kind: BATCH_ELEMENT_COUNT...).
type BatchInputConfig struct {
	Kind, DataType string
	TargetNames    []string
	SourceInputs   []string
}

// BatchOutputConfig is one batch_output: outputs the server scatters to
// the requests in the shape of their inputs.
type BatchOutputConfig struct {
	Kind         string
	TargetNames  []string
	SourceInputs []string
}

// EnsembleStep is one step of an ensemble's configuration.
type EnsembleStep struct {
	Model string
	// Version is the step model's version, -1 (or 0) for its newest.
	Version             int64
	InputMap, OutputMap map[string]string
}

// Config describes inst in a model configuration's terms.
func Config(inst *Instance, filename string) ModelConfig {
	m := inst.Model
	bc := inst.Batcher.Config()
	c := ModelConfig{
		Name: inst.Name(), Platform: Platform(m.Format), Backend: Backend(m.Format),
		MaxQueueDelay: bc.MaxDelay.Microseconds(), Instances: bc.Instances, DefaultModelFilename: filename, PreserveOrdering: bc.PreserveOrdering,
		VersionPolicy: map[string]any{"latest": map[string]any{"num_versions": 1}}, InstanceKind: "KIND_CPU",
	}
	batched := m.Batched()
	if batched {
		c.MaxBatchSize = bc.MaxBatchRows
		if bc.MaxDelay > 0 && len(bc.PreferredSizes) == 0 {
			// fw serve's batching: an idle engine never waits, which a
			// repository's configuration asks for with this parameter
			// (its default is Triton's holding).
			c.Parameters = map[string]string{"fw_hold_when_idle": "false"}
		}
	}
	conv := func(specs []engine.TensorSpec, inputs bool) []TensorConfig {
		out := make([]TensorConfig, len(specs))
		for i, sp := range specs {
			dims := sp.Shape
			if batched && len(dims) > 0 { // empty: a shape the engine does not know
				dims = dims[1:]
			}
			out[i] = TensorConfig{Name: sp.Name, DataType: ConfigDataType(sp.DType), Dims: append([]int64{}, dims...)}
			if inputs {
				out[i].Format = InputFormat(m.Meta, i, dims)
			}
		}
		return out
	}
	c.Inputs, c.Outputs = conv(m.Inputs(), true), conv(m.Outputs(), false)
	if n, ok := m.Device.CUDAIndex(); ok {
		c.GPUs, c.InstanceKind = []int{n}, "KIND_GPU"
	}
	return c
}

// ConfigJSON renders a model configuration as Triton's JSON (its config
// extension's answer, the model_config a Python model's initialize reads):
// Triton's field names, int64 dims as numbers.
func ConfigJSON(c ModelConfig) map[string]any {
	tensors := func(ts []TensorConfig, input bool) []map[string]any {
		out := make([]map[string]any, len(ts))
		for i, t := range ts {
			m := map[string]any{"name": t.Name, "data_type": t.DataType, "dims": t.Dims, "is_shape_tensor": false}
			if t.Reshape != nil {
				m["reshape"] = map[string]any{"shape": t.Reshape}
			}
			if input {
				format := t.Format
				if format == "" {
					format = "FORMAT_NONE"
				}
				m["format"], m["allow_ragged_batch"], m["optional"] = format, t.AllowRaggedBatch, t.Optional
			} else {
				m["label_filename"] = t.LabelFilename
			}
			out[i] = m
		}
		return out
	}
	kind, gpus := c.InstanceKind, c.GPUs
	if kind == "" {
		kind = "KIND_CPU"
	}
	if gpus == nil {
		gpus = []int{}
	}
	preferred := c.PreferredBatchSizes
	if preferred == nil {
		preferred = []int64{}
	}
	policy := c.VersionPolicy
	if policy == nil {
		policy = map[string]any{"latest": map[string]any{"num_versions": 1}}
	}
	params := map[string]any{}
	for k, v := range c.Parameters {
		params[k] = map[string]any{"string_value": v}
	}
	out := map[string]any{
		"name":                     c.Name,
		"platform":                 c.Platform,
		"backend":                  c.Backend,
		"version_policy":           policy,
		"max_batch_size":           c.MaxBatchSize,
		"input":                    tensors(c.Inputs, true),
		"output":                   tensors(c.Outputs, false),
		"instance_group":           []map[string]any{{"name": c.Name, "kind": kind, "count": c.Instances, "gpus": gpus}},
		"default_model_filename":   c.DefaultModelFilename,
		"parameters":               params,
		"model_transaction_policy": map[string]any{"decoupled": c.Decoupled},
		"response_cache":           map[string]any{"enable": c.ResponseCache},
		"batch_input":              []map[string]any{},
		"batch_output":             []map[string]any{},
	}
	for _, bi := range c.BatchInputs {
		out["batch_input"] = append(out["batch_input"].([]map[string]any), map[string]any{"kind": bi.Kind,
			"target_name": bi.TargetNames, "data_type": bi.DataType, "source_input": bi.SourceInputs})
	}
	for _, bo := range c.BatchOutputs {
		out["batch_output"] = append(out["batch_output"].([]map[string]any), map[string]any{"kind": bo.Kind,
			"target_name": bo.TargetNames, "source_input": bo.SourceInputs})
	}
	if c.Ensemble != nil {
		steps := make([]map[string]any, len(c.Ensemble))
		for i, st := range c.Ensemble {
			steps[i] = map[string]any{"model_name": st.Model, "model_version": st.Version, "input_map": st.InputMap, "output_map": st.OutputMap, "model_namespace": ""}
		}
		out["ensemble_scheduling"] = map[string]any{"step": steps}
		out["instance_group"] = []map[string]any{} // no engine instances of its own
	} else if c.SequenceBatching != nil {
		out["sequence_batching"] = c.SequenceBatching
	} else if c.MaxBatchSize > 0 { // max_batch_size 0 turns dynamic batching off, as in Triton
		db := map[string]any{
			"preferred_batch_size": preferred, "max_queue_delay_microseconds": c.MaxQueueDelay, "preserve_ordering": c.PreserveOrdering,
			"priority_levels": 0, "default_priority_level": 0, "priority_queue_policy": map[string]any{},
			"default_queue_policy": map[string]any{"timeout_action": "REJECT", "default_timeout_microseconds": 0, "allow_timeout_override": false, "max_queue_size": 0},
		}
		maps.Copy(db, c.Queues)
		out["dynamic_batching"] = db
	}
	return out
}
