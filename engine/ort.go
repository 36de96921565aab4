//go:build cgo

package engine

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"

	ort "github.com/yalue/onnxruntime_go"
)

// ortRuntime guards ONNX Runtime's environment, which is process-wide in the
// C library itself: it is initialised once, from the first library path used.
var ortRuntime struct {
	once sync.Once
	path string
	err  error
	// api is the library's C API, for what onnxruntime_go lacks (filling
	// string tensors byte-exactly: ort_strings.go).
	api ortAPI
}

// ORTLibraryPath is where fw looks for libonnxruntime.so.1: override
// (Options.ORTLibrary; fw reads FW_ORT_LIB into it) when set, else
// third_party/onnxruntime/lib or lib/ next to the binary or above the
// working directory.
func ORTLibraryPath(override string) string {
	return findLibrary(override,
		"third_party/onnxruntime/lib/libonnxruntime.so.1",
		"lib/libonnxruntime.so.1")
}

func initORT(override string) (string, error) {
	ortRuntime.once.Do(func() {
		p := ORTLibraryPath(override)
		if p == "" {
			ortRuntime.err = fmt.Errorf("libonnxruntime.so.1 not found: run `make setup` (scripts/fetch-ort.sh puts it in third_party/onnxruntime/lib) or set FW_ORT_LIB")
			return
		}
		ortRuntime.path = p
		ort.SetSharedLibraryPath(p)
		if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
			ortRuntime.err = fmt.Errorf("initialise ONNX Runtime from %s: %w", p, err)
			return
		}
		// ONNX Runtime's usage telemetry goes off: a server sends nothing
		// anywhere it was not told to (it looked up
		// mobile.events.data.microsoft.com after start and grew RSS by about
		// 0.5 MB ten seconds later). A library built without telemetry
		// refuses nothing here; an error would only mean it stays as built.
		_ = ort.DisableTelemetry()
		ortRuntime.api, ortRuntime.err = ortStringAPI(p)
	})
	return ortRuntime.path, ortRuntime.err
}

// ORTVersion returns the loaded ONNX Runtime version, initialising it if needed.
func ORTVersion(override string) (string, error) {
	if _, err := initORT(override); err != nil {
		return "", err
	}
	return ort.GetVersion(), nil
}

type ortBackend struct {
	mu      sync.RWMutex // Close waits for running calls, as in torchBackend
	session *ort.DynamicAdvancedSession
	inputs  []TensorSpec
	outputs []TensorSpec
	batched bool // every input and output has a dynamic axis 0 (Model.Batched)
	// sizedOutputs: ONNX Runtime sizes every output (Options.SizedOutputs).
	sizedOutputs bool
}

var ortOptLevels = map[string]ort.GraphOptimizationLevel{
	"disable":  ort.GraphOptimizationLevelDisableAll,
	"basic":    ort.GraphOptimizationLevelEnableBasic,
	"extended": ort.GraphOptimizationLevelEnableExtended,
	"all":      ort.GraphOptimizationLevelEnableAll,
	"":         ort.GraphOptimizationLevelEnableAll,
}

func newORTBackend(path string, opts Options) (Backend, *Metadata, error) {
	fail := func(code, msg string, err error, hint string) (Backend, *Metadata, error) {
		return nil, nil, &LoadError{Path: path, Code: code, Msg: msg, Err: err, Hint: hint}
	}
	libPath, err := initORT(opts.ORTLibrary)
	if err != nil {
		return fail(CodeBackend, "ONNX Runtime is unavailable", err, "")
	}
	level, ok := ortOptLevels[strings.ToLower(opts.GraphOptimization)]
	if !ok {
		return fail(CodeBackend, fmt.Sprintf("unknown graph optimisation level %q", opts.GraphOptimization), nil, "use disable, basic, extended or all")
	}
	inInfo, outInfo, err := inputOutputInfo(path)
	if err != nil {
		return fail(CodeEngine, "ONNX Runtime cannot read the model", err, "check the file with `fw verify`; re-export it if it is damaged")
	}
	inputs, err := specsFromORT(inInfo)
	if err != nil {
		return fail(CodeUnsupportedDType, "unsupported model input", err, "")
	}
	outputs, err := specsFromORT(outInfo)
	if err != nil {
		return fail(CodeUnsupportedDType, "unsupported model output", err, "")
	}
	so, err := ort.NewSessionOptions()
	if err != nil {
		return fail(CodeEngine, "create session options", err, "")
	}
	defer so.Destroy()
	if err := so.SetIntraOpNumThreads(opts.threads()); err != nil {
		return fail(CodeEngine, "set intra-op threads", err, "")
	}
	if err := so.SetInterOpNumThreads(1); err != nil {
		return fail(CodeEngine, "set inter-op threads", err, "")
	}
	if err := so.SetGraphOptimizationLevel(level); err != nil {
		return fail(CodeEngine, "set graph optimisation level", err, "")
	}
	spin := "0"
	if opts.Spin {
		spin = "1"
	}
	for _, key := range []string{"session.intra_op.allow_spinning", "session.inter_op.allow_spinning"} {
		if err := so.AddSessionConfigEntry(key, spin); err != nil {
			return fail(CodeEngine, "set "+key, err, "")
		}
	}
	if cuda, id, _ := opts.deviceIndex(); cuda {
		cudaOpts, err := ort.NewCUDAProviderOptions()
		if err == nil {
			err = cudaOpts.Update(map[string]string{"device_id": fmt.Sprint(id)})
			if err == nil {
				err = so.AppendExecutionProviderCUDA(cudaOpts)
			}
			cudaOpts.Destroy()
		}
		if err != nil {
			return fail(CodeBackend, fmt.Sprintf("the ONNX Runtime library at %s has no usable CUDA execution provider", libPath), err,
				"it is a CPU build (the npm onnxruntime-node library is); point FW_ORT_LIB at a CUDA build of libonnxruntime.so with libonnxruntime_providers_cuda.so beside it (Dockerfile.cuda), or serve the TorchScript export, which runs on CUDA through libtorch")
		}
	}
	names := func(specs []TensorSpec) []string {
		out := make([]string, len(specs))
		for i, s := range specs {
			out[i] = s.Name
		}
		return out
	}
	sess, err := ort.NewDynamicAdvancedSession(path, names(inputs), names(outputs), so)
	if err != nil {
		return fail(CodeEngine, "ONNX Runtime cannot create a session for the model", err, "")
	}
	b := &ortBackend{session: sess, inputs: inputs, outputs: outputs, batched: batchedSpecs(inputs, outputs), sizedOutputs: opts.SizedOutputs}
	md, err := b.metadata()
	if err != nil {
		sess.Destroy()
		return fail(CodeBadMetadata, "the embedded metadata is invalid", err, "re-export with fw.export, which writes valid metadata")
	}
	return b, md, nil
}

// inputOutputInfo reads the model's input and output names, types and
// shapes. The Go binding reads them through a temporary session; with its
// default options that session would optimise the whole graph and start a
// thread pool of its own, a second full load before the real one. Options
// that skip both make it a parse: a model repository's on-demand loads pay
// for one session, not two.
func inputOutputInfo(path string) ([]ort.InputOutputInfo, []ort.InputOutputInfo, error) {
	so, err := ort.NewSessionOptions()
	if err != nil {
		return nil, nil, fmt.Errorf("create session options: %w", err)
	}
	defer so.Destroy()
	for _, set := range []func() error{
		func() error { return so.SetIntraOpNumThreads(1) },
		func() error { return so.SetInterOpNumThreads(1) },
		func() error { return so.SetGraphOptimizationLevel(ort.GraphOptimizationLevelDisableAll) },
	} {
		if err := set(); err != nil {
			return nil, nil, fmt.Errorf("set session options: %w", err)
		}
	}
	return ort.GetInputOutputInfoWithOptions(path, so)
}

func (b *ortBackend) metadata() (*Metadata, error) {
	mm, err := b.session.GetModelMetadata()
	if err != nil {
		return nil, err
	}
	defer mm.Destroy()
	doc, ok, err := mm.LookupCustomMetadataMap(MetadataKey)
	if err != nil || !ok {
		return nil, err
	}
	return ParseMetadata([]byte(doc))
}

func specsFromORT(infos []ort.InputOutputInfo) ([]TensorSpec, error) {
	out := make([]TensorSpec, len(infos))
	for i, info := range infos {
		if info.OrtValueType != ort.ONNXTypeTensor {
			return nil, fmt.Errorf("%q is a %s; fw serves tensor inputs and outputs only", info.Name, info.OrtValueType)
		}
		dt := DType(info.DataType)
		if !dt.Known() {
			return nil, fmt.Errorf("%q has element type %s, which fw does not serve", info.Name, info.DataType)
		}
		shape := make([]int64, len(info.Dimensions))
		for j, d := range info.Dimensions {
			if d <= 0 {
				d = -1
			}
			shape[j] = d
		}
		out[i] = TensorSpec{Name: info.Name, DType: dt, Shape: shape}
	}
	return out, nil
}

func (b *ortBackend) Inputs() []TensorSpec  { return b.inputs }
func (b *ortBackend) Outputs() []TensorSpec { return b.outputs }

func (b *ortBackend) Run(ctx context.Context, inputs []Tensor) ([]Tensor, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.session == nil {
		return nil, fmt.Errorf("model is closed")
	}
	ins := make([]ort.Value, len(inputs))
	defer func() {
		for _, v := range ins {
			if v != nil {
				v.Destroy()
			}
		}
	}()
	for i, t := range inputs {
		if len(t.Data) == 0 && NumElements(t.Shape) != 0 {
			return nil, fmt.Errorf("input %q is empty", b.inputs[i].Name)
		}
		v, err := ortInput(t)
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", b.inputs[i].Name, err)
		}
		ins[i] = v
	}
	batch := int64(-1) // an unbatched model's outputs are sized by their specs alone
	if b.batched && !b.sizedOutputs && len(inputs) > 0 && len(inputs[0].Shape) > 0 {
		batch = inputs[0].Shape[0]
		for _, t := range inputs[1:] {
			if len(t.Shape) == 0 || t.Shape[0] != batch {
				batch = -1 // served whole (max_batch_size 0) with first axes that differ: ONNX Runtime sizes the outputs
				break
			}
		}
	}
	outs := make([]ort.Value, len(b.outputs))
	results := make([]Tensor, len(b.outputs))
	defer func() {
		for _, v := range outs {
			destroy(v)
		}
	}()
	// Outputs whose shape is known (apart from the batch axis of a batched
	// model) are written by ONNX Runtime straight into Go memory; the rest
	// are allocated by it.
	for i, spec := range b.outputs {
		shape, ok := concreteShape(spec.Shape, batch)
		if !ok || spec.DType == String { // ONNX Runtime owns a string tensor's elements
			continue
		}
		t, err := NewTensor(spec.DType, shape)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", spec.Name, err)
		}
		results[i] = t
		if len(results[i].Data) == 0 {
			continue
		}
		v, err := ort.NewCustomDataTensor(ort.NewShape(shape...), results[i].Data, ort.TensorElementDataType(spec.DType))
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", spec.Name, err)
		}
		outs[i] = v
	}
	preset := make([]bool, len(outs))
	for i, v := range outs {
		preset[i] = v != nil
	}
	if err := b.session.Run(ins, outs); err != nil {
		return nil, err
	}
	for i, v := range outs {
		if preset[i] {
			continue
		}
		t, err := tensorFromORT(v)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", b.outputs[i].Name, err)
		}
		results[i] = t
	}
	return results, nil
}

// destroy frees an ONNX Runtime value, if there is one: the binding may
// leave a typed nil in an output it failed to make.
func destroy(v ort.Value) {
	if v == nil {
		return
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return
	}
	v.Destroy()
}

// concreteShape is the shape of a tensor whose spec is spec (an output
// fw allocates, or TryOneThread's zero input): axis 0 is the batch size
// when batch >= 0 (a batched model), every other axis (every axis when
// batch < 0) the spec's fixed size. ok is false when an axis is dynamic,
// or for a rank-0 spec: ONNX Runtime allocates those outputs.
func concreteShape(spec []int64, batch int64) ([]int64, bool) {
	if len(spec) == 0 {
		return nil, false
	}
	out := make([]int64, len(spec))
	for i, d := range spec {
		switch {
		case i == 0 && batch >= 0:
			out[i] = batch
		case d > 0:
			out[i] = d
		default:
			return nil, false
		}
	}
	return out, true
}

// ortInput makes the ONNX Runtime value of an input: its Data itself for
// the fixed-size types, a copy of its elements for String (ONNX Runtime
// keeps its own std::strings; ortStringInput).
func ortInput(t Tensor) (ort.Value, error) {
	if t.DType != String || NumElements(t.Shape) == 0 {
		data := t.Data
		if len(data) == 0 { // a zero-sized axis: no elements, but the binding wants a byte to point at
			data = make([]byte, 1)
		}
		dt := ort.TensorElementDataType(t.DType)
		return ort.NewCustomDataTensor(ort.NewShape(t.Shape...), data, dt)
	}
	return ortStringInput(t)
}

func tensorFromORT(v ort.Value) (Tensor, error) {
	shape := []int64(v.GetShape())
	switch t := v.(type) {
	case *ort.StringTensor:
		elems, err := t.GetContents()
		if err != nil {
			return Tensor{}, err
		}
		return FromStrings(shape, elems)
	case *ort.Tensor[float32]:
		return FromFloat32(shape, t.GetData()), nil
	case *ort.Tensor[int64]:
		return FromInt64(shape, t.GetData()), nil
	case *ort.Tensor[float64]:
		return bytesTensor(Float64, shape, t.GetData()), nil
	case *ort.Tensor[int32]:
		return bytesTensor(Int32, shape, t.GetData()), nil
	case *ort.Tensor[int8]:
		return bytesTensor(Int8, shape, t.GetData()), nil
	case *ort.Tensor[uint8]:
		return bytesTensor(Uint8, shape, t.GetData()), nil
	case *ort.Tensor[bool]:
		return bytesTensor(Bool, shape, t.GetData()), nil
	case *ort.Tensor[int16]:
		return bytesTensor(Int16, shape, t.GetData()), nil
	case *ort.Tensor[uint16]:
		return bytesTensor(Uint16, shape, t.GetData()), nil
	case *ort.Tensor[uint32]:
		return bytesTensor(Uint32, shape, t.GetData()), nil
	case *ort.Tensor[uint64]:
		return bytesTensor(Uint64, shape, t.GetData()), nil
	case *ort.CustomDataTensor: // float16, bfloat16: raw bytes (engine/onnxruntime_go/README.fw.md)
		if dt := DType(t.DataType()); dt == Float16 || dt == BFloat16 {
			data := t.GetData()
			return bytesTensor(dt, shape, data[:min(len(data), int(2*NumElements(shape)))]), nil
		}
	}
	return Tensor{}, fmt.Errorf("unsupported output type %T", v)
}

func (b *ortBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.session == nil {
		return nil
	}
	err := b.session.Destroy()
	b.session = nil
	return err
}
