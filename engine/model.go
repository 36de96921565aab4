package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Backend is one inference engine holding one loaded model. Run is safe for
// concurrent use. Inputs are positional, in the order Inputs() lists them.
type Backend interface {
	// Inputs describes the model's inputs as the engine sees them.
	Inputs() []TensorSpec
	// Outputs describes the model's outputs as the engine sees them.
	Outputs() []TensorSpec
	// Run computes one batch. It does not validate shapes: Model.Run does.
	Run(ctx context.Context, inputs []Tensor) ([]Tensor, error)
	// Close frees the engine's resources; the backend is unusable afterwards.
	Close() error
}

// Device is where a model runs: "cpu" or "cuda" (optionally "cuda:N").
type Device string

// Options configure Load. The zero value loads on CPU with defaults.
type Options struct {
	// Device is "cpu" (default) or "cuda" / "cuda:N".
	Device Device
	// Threads is the intra-op thread count; 0 means AvailableCPUs().
	Threads int
	// GraphOptimization is ONNX Runtime's level: "disable", "basic",
	// "extended" or "all" (default "all").
	GraphOptimization string
	// ORTLibrary overrides where libonnxruntime.so is found (fw sets it
	// from FW_ORT_LIB).
	ORTLibrary string
	// TorchShim overrides where libfwtorch.so is found (fw sets it from
	// FW_TORCH_SHIM).
	TorchShim string
	// AllowNonFinite lets NaN and Inf through to the model instead of
	// refusing the input.
	AllowNonFinite bool
	// Spin lets ONNX Runtime's intra-op threads busy-wait between calls.
	// Off by default: on a server whose CPUs also run the HTTP front end,
	// spinning threads take cycles from it.
	Spin bool
	// SizedOutputs leaves every output's size to ONNX Runtime instead of
	// allocating the outputs of a batched model from its inputs' common
	// first axis: for a model whose outputs' first axis need not be its
	// inputs' (ragged batching, whose flat inputs may happen to agree).
	SizedOutputs bool
}

func (o Options) threads() int {
	if o.Threads > 0 {
		return o.Threads
	}
	return AvailableCPUs()
}

// CUDAIndex is the CUDA device index d names, and false when d is not a
// CUDA device (or not a valid name).
func (d Device) CUDAIndex() (int, bool) {
	cuda, id, err := Options{Device: d}.deviceIndex()
	return id, cuda && err == nil
}

func (o Options) deviceIndex() (bool, int, error) {
	d := strings.ToLower(string(o.Device))
	switch {
	case d == "" || d == "cpu":
		return false, 0, nil
	case d == "cuda" || d == "gpu":
		return true, 0, nil
	case strings.HasPrefix(d, "cuda:"):
		var id int
		if _, err := fmt.Sscanf(d, "cuda:%d", &id); err != nil || id < 0 {
			return false, 0, fmt.Errorf("device %q: want cpu, cuda or cuda:N", o.Device)
		}
		return true, id, nil
	}
	return false, 0, fmt.Errorf("device %q: want cpu, cuda or cuda:N", o.Device)
}

// Model is a loaded model file: its backend, its metadata and the checks that
// keep bad input away from the engine.
type Model struct {
	Path     string
	Format   Format
	Device   Device
	Meta     *Metadata // nil for files exported without fw metadata
	Size     int64
	LoadTime time.Duration

	backend Backend
	inputs  []TensorSpec
	outputs []TensorSpec
	batched bool // see Batched
	opts    Options
	life    life
}

// life reference-counts the engine calls in flight so that Close never frees
// the backend under one: Close marks the model closing (new calls fail with
// ErrClosed) and the backend is freed by whichever of Close and the last
// running call comes last.
type life struct {
	mu      sync.Mutex
	refs    int           // engine calls in flight
	closing bool          // Close was called: no new calls
	freed   chan struct{} // closed once the backend is freed; made on first use
	err     error         // the backend's Close error, set before freed closes
}

// ErrClosed is returned by engine calls made after Model.Close.
var ErrClosed = errors.New("engine: the model is closed")

// acquire counts one engine call in, unless the model is closing.
func (m *Model) acquire() error {
	m.life.mu.Lock()
	defer m.life.mu.Unlock()
	if m.life.closing {
		return ErrClosed
	}
	m.life.refs++
	return nil
}

// release counts one engine call out and frees the backend when it was the
// last one after Close.
func (m *Model) release() {
	m.life.mu.Lock()
	m.life.refs--
	last := m.life.closing && m.life.refs == 0
	m.life.mu.Unlock()
	if last {
		m.free()
	}
}

// freedLocked returns the channel closed once the backend is freed.
func (m *Model) freedLocked() chan struct{} {
	if m.life.freed == nil {
		m.life.freed = make(chan struct{})
	}
	return m.life.freed
}

// free closes the backend; it runs exactly once, after Close, with no call in flight.
func (m *Model) free() {
	err := m.backend.Close()
	m.life.mu.Lock()
	m.life.err = err
	ch := m.freedLocked()
	m.life.mu.Unlock()
	close(ch)
}

// Load opens a model file, detects its format from its content, starts the
// matching backend and checks the metadata against what the engine reports.
func Load(ctx context.Context, path string, opts Options) (*Model, error) {
	start := time.Now()
	if _, _, err := opts.deviceIndex(); err != nil {
		return nil, &LoadError{Path: path, Code: CodeBackend, Msg: err.Error()}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	info, err := DetectFile(path)
	if err != nil {
		return nil, err
	}
	m := &Model{Path: path, Format: info.Format, Device: opts.Device, Size: info.Size, opts: opts, Meta: info.Metadata}
	if m.Device == "" {
		m.Device = "cpu"
	}
	switch info.Format {
	case FormatONNX:
		b, md, err := newORTBackend(path, opts)
		if err != nil {
			return nil, err
		}
		m.backend, m.Meta = b, md
		if md != nil && md.Format == string(FormatONNXInt8) {
			m.Format = FormatONNXInt8
		}
	case FormatTorchScript, FormatQuantized:
		b, err := newTorchBackend(path, opts, false)
		if err != nil {
			return nil, err
		}
		m.backend = b
	case FormatAOTI:
		if err := checkPackageTorch(path, info.Metadata, opts.TorchShim); err != nil {
			return nil, err
		}
		low, high, err := batchRange(info.Metadata)
		if err != nil {
			return nil, &LoadError{Path: path, Code: CodeBadMetadata, Msg: "the embedded metadata is invalid", Err: err,
				Hint: "re-export with fw.export.aoti, which writes valid metadata"}
		}
		b, err := newTorchBackend(path, opts, true)
		if err != nil {
			return nil, err
		}
		m.backend = rangedBackend{Backend: b, low: low, high: high}
	}
	if err := m.reconcileSpecs(); err != nil {
		m.backend.Close()
		return nil, err
	}
	m.LoadTime = time.Since(start)
	return m, nil
}

// reconcileSpecs settles the model's input and output specs: fw.json where
// present (checked against what the engine says), the engine's otherwise.
func (m *Model) reconcileSpecs() error {
	eIn, eOut := m.backend.Inputs(), m.backend.Outputs()
	// An axis 0 that either fw.json or the engine fixes is fixed: the
	// engine refuses any other size whatever fw.json says.
	m.batched = batchedSpecs(eIn, eOut)
	if m.Meta == nil {
		m.inputs, m.outputs = eIn, eOut
		return nil
	}
	mIn, mOut := specsFromJSON(m.Meta.Inputs), specsFromJSON(m.Meta.Outputs)
	if m.Format.ONNX() {
		if err := compareSpecs("input", mIn, eIn); err != nil {
			return &LoadError{Path: m.Path, Code: CodeShapeMismatch, Msg: "fw.json disagrees with the model graph", Err: err,
				Hint: "re-export the model so the metadata is written from the real model"}
		}
		if err := compareSpecs("output", mOut, eOut); err != nil {
			return &LoadError{Path: m.Path, Code: CodeShapeMismatch, Msg: "fw.json disagrees with the model graph", Err: err,
				Hint: "re-export the model so the metadata is written from the real model"}
		}
	} else if len(eIn) > 0 && len(eIn) != len(mIn) {
		return &LoadError{Path: m.Path, Code: CodeShapeMismatch,
			Msg: fmt.Sprintf("fw.json lists %d inputs but forward() takes %d", len(mIn), len(eIn))}
	} else if len(eOut) > 0 && len(eOut) != len(mOut) {
		return &LoadError{Path: m.Path, Code: CodeShapeMismatch,
			Msg: fmt.Sprintf("fw.json lists %d outputs but the model returns %d", len(mOut), len(eOut))}
	}
	if !m.Format.ONNX() {
		for _, specs := range [][]TensorSpec{mIn, mOut} {
			for _, sp := range specs {
				if err := m.Takes(sp.DType); err != nil && sp.DType != Invalid {
					return &LoadError{Path: m.Path, Code: CodeUnsupportedDType, Msg: fmt.Sprintf("fw.json declares %q as %s", sp.Name, sp.DType), Err: err,
						Hint: "export the model with one of the dtypes libtorch models take, or as ONNX"}
				}
			}
		}
	}
	m.inputs, m.outputs = mIn, mOut
	m.batched = m.batched && batchedSpecs(mIn, mOut)
	return nil
}

// batchedSpecs reports whether every spec has a dynamic axis 0, the batch
// (see Model.Batched). A spec the engine knows nothing about (no dtype, no
// shape: TorchScript without fw.json) counts as batched, as fw has always
// served such files; a known rank-0 spec has no axis 0.
func batchedSpecs(lists ...[]TensorSpec) bool {
	for _, specs := range lists {
		for _, sp := range specs {
			if len(sp.Shape) == 0 && sp.DType == Invalid {
				continue
			}
			if len(sp.Shape) == 0 || sp.Shape[0] > 0 {
				return false
			}
		}
	}
	return true
}

// compareSpecs checks declared specs against the engine's: same count, names,
// dtypes and ranks, and every axis both fix has the same size.
func compareSpecs(kind string, declared, engine []TensorSpec) error {
	if len(declared) != len(engine) {
		return fmt.Errorf("%d %ss declared, the model has %d", len(declared), kind, len(engine))
	}
	for i := range declared {
		d, e := declared[i], engine[i]
		if d.Name != e.Name {
			return fmt.Errorf("%s %d is named %q in fw.json but %q in the model", kind, i, d.Name, e.Name)
		}
		if d.DType != e.DType {
			return fmt.Errorf("%s %q: fw.json says %s, the model takes %s", kind, d.Name, d.DType, e.DType)
		}
		if len(d.Shape) != len(e.Shape) {
			return fmt.Errorf("%s %q: fw.json shape %s, the model's %s", kind, d.Name, FormatShape(d.Shape), FormatShape(e.Shape))
		}
		for j := range d.Shape {
			if d.Shape[j] > 0 && e.Shape[j] > 0 && d.Shape[j] != e.Shape[j] {
				return fmt.Errorf("%s %q: fw.json shape %s, the model's %s", kind, d.Name, FormatShape(d.Shape), FormatShape(e.Shape))
			}
		}
	}
	return nil
}

// Name is the model's name from fw.json, else the file name without extensions.
func (m *Model) Name() string {
	if m.Meta != nil && m.Meta.Name != "" {
		return m.Meta.Name
	}
	base := filepath.Base(m.Path)
	if i := strings.IndexByte(base, '.'); i > 0 {
		base = base[:i]
	}
	return base
}

// Version is the model's version from fw.json, else "1".
func (m *Model) Version() string {
	if m.Meta != nil && m.Meta.Version != "" {
		return m.Meta.Version
	}
	return "1"
}

// Labels are the class labels of the first output, if the metadata has them.
func (m *Model) Labels() []string {
	if m.Meta == nil {
		return nil
	}
	return m.Meta.Labels
}

// Inputs are the model's input specs (batch axis first, -1 for dynamic axes).
func (m *Model) Inputs() []TensorSpec { return m.inputs }

// Outputs are the model's output specs.
func (m *Model) Outputs() []TensorSpec { return m.outputs }

// Batched reports whether the model has a batch axis: every input and output
// has rank >= 1 and a dynamic (not fixed) axis 0, so requests may be joined
// along it (what Triton's auto-complete calls max_batch_size > 0). A model
// with a fixed axis 0 (exported with a batch of 1, or whose first axis is 3
// channels) or with a rank-0 input or output is unbatched: it takes each
// request whole, and CheckInputs checks the full shapes.
func (m *Model) Batched() bool { return m.batched }

// Threads is the intra-op thread count the model was loaded with.
func (m *Model) Threads() int { return m.opts.threads() }

// AllowsNonFinite reports whether NaN and Inf inputs reach the model
// (Options.AllowNonFinite) instead of being refused by CheckInputs.
func (m *Model) AllowsNonFinite() bool { return m.opts.AllowNonFinite }

// Close stops the model: engine calls made afterwards fail with ErrClosed.
// The backend is freed at once when no call is running, and otherwise by the
// last running call as it returns, so Close never frees memory an engine call
// still uses and never waits for one (a stuck call cannot hang a shutdown).
// Freed reports when the backend is gone. Close returns the backend's error
// when it freed it itself; calling it again does nothing.
func (m *Model) Close() error {
	m.life.mu.Lock()
	if m.life.closing {
		m.life.mu.Unlock()
		return nil
	}
	m.life.closing = true
	now := m.life.refs == 0
	m.freedLocked()
	m.life.mu.Unlock()
	if !now {
		return nil
	}
	m.free()
	return m.life.err
}

// Freed returns a channel that is closed once Close has been called and the
// last engine call has returned, i.e. when the backend's memory is released.
func (m *Model) Freed() <-chan struct{} {
	m.life.mu.Lock()
	defer m.life.mu.Unlock()
	return m.freedLocked()
}

// InputError is a request whose tensors do not fit the model: wrong count,
// dtype, shape, size, or non-finite values. Its message says what was expected
// and what was received.
type InputError struct {
	Input    string
	Msg      string
	Expected string
	Received string
}

func (e *InputError) Error() string {
	s := e.Msg
	if e.Input != "" {
		s = fmt.Sprintf("input %q: %s", e.Input, e.Msg)
	}
	if e.Expected != "" || e.Received != "" {
		s += fmt.Sprintf(" (expected %s, received %s)", e.Expected, e.Received)
	}
	return s
}

// ErrEngine marks failures inside the engine (as opposed to bad input).
var ErrEngine = errors.New("engine failure")

// CheckInputs validates tensors against the model's input specs: count,
// dtype, rank, fixed axes, data length and (unless allowed) finite values;
// for a batched model also a common batch size on axis 0, which it returns.
// An unbatched model (see Batched) has no batch axis: each input must fit
// its full spec (a rank-0 spec takes a scalar) and hold at least one
// element, and the "batch" returned is 1, the one request.
func (m *Model) CheckInputs(inputs []Tensor) (int64, error) {
	return m.checkInputs(m.inputs, inputs, m.batched)
}

// CheckInputsAs is CheckInputs against specs, one per model input in the
// model's order, instead of the model's own specs: for a server that
// changes inputs between the client and the engine (ragged batching, which
// flattens some and makes others). An Optional spec may be left out.
func (m *Model) CheckInputsAs(specs []TensorSpec, inputs []Tensor) (int64, error) {
	if len(specs) != len(m.inputs) {
		return 0, fmt.Errorf("%d input specs for a model of %d inputs", len(specs), len(m.inputs))
	}
	return m.checkInputs(specs, inputs, m.batched)
}

// CheckInputsWhole is CheckInputs for a model served without a batch axis
// although its file has one (a repository's max_batch_size 0): each input
// is checked whole, as an unbatched model's, so their first axes need not
// agree; it returns 1.
func (m *Model) CheckInputsWhole(inputs []Tensor) (int64, error) {
	return m.checkInputs(m.inputs, inputs, false)
}

func (m *Model) checkInputs(specs []TensorSpec, inputs []Tensor, batched bool) (int64, error) {
	if len(inputs) != len(specs) {
		return 0, &InputError{Msg: "wrong number of inputs", Expected: fmt.Sprint(len(specs)), Received: fmt.Sprint(len(inputs))}
	}
	batch := int64(-1)
	for i, t := range inputs {
		spec := specs[i]
		if t.Absent() {
			if !spec.Optional {
				return 0, &InputError{Input: spec.Name, Msg: "missing input", Expected: FormatShape(spec.Shape)}
			}
			continue
		}
		if spec.DType != Invalid && t.DType != spec.DType {
			return 0, &InputError{Input: spec.Name, Msg: "wrong dtype", Expected: spec.DType.String(), Received: t.DType.String()}
		}
		if err := m.Takes(t.DType); err != nil {
			return 0, &InputError{Input: spec.Name, Msg: err.Error()}
		}
		known := len(spec.Shape) > 0 || (!batched && spec.DType != Invalid) // a known rank-0 spec only exists unbatched
		if known && len(t.Shape) != len(spec.Shape) {
			return 0, &InputError{Input: spec.Name, Msg: "wrong rank", Expected: FormatShape(spec.Shape), Received: FormatShape(t.Shape)}
		}
		for j, d := range t.Shape {
			if d < 0 {
				return 0, &InputError{Input: spec.Name, Msg: "negative axis", Received: FormatShape(t.Shape)}
			}
			if j < len(spec.Shape) && spec.Shape[j] > 0 && spec.Shape[j] != d {
				msg := fmt.Sprintf("wrong size on axis %d", j)
				if j == 0 && !batched {
					msg += " (the model has no batch axis: it takes one tensor of this shape per request)"
				}
				return 0, &InputError{Input: spec.Name, Msg: msg, Expected: FormatShape(spec.Shape), Received: FormatShape(t.Shape)}
			}
		}
		if NumElements(t.Shape) == 0 && len(t.Shape) > 0 && !(batched && t.Shape[0] == 0) && !m.Format.ONNX() && !m.Format.external() {
			return 0, &InputError{Input: spec.Name, Msg: "empty tensor: a libtorch model takes no zero-sized axis; send at least one element", Expected: FormatShape(spec.Shape), Received: FormatShape(t.Shape)}
		}
		switch {
		case !batched:
		case len(t.Shape) == 0:
			return 0, &InputError{Input: spec.Name, Msg: "needs a batch axis", Expected: FormatShape(spec.Shape), Received: "a scalar"}
		case batch < 0:
			batch = t.Shape[0]
		case t.Shape[0] != batch:
			return 0, &InputError{Input: spec.Name, Msg: "batch size differs from the first input's", Expected: fmt.Sprint(batch), Received: fmt.Sprint(t.Shape[0])}
		}
		if err := t.Check(); err != nil {
			return 0, &InputError{Input: spec.Name, Msg: err.Error()}
		}
		if !m.opts.AllowNonFinite && t.DType.IsFloat() {
			if idx := firstNonFinite(t); idx >= 0 {
				return 0, &InputError{Input: spec.Name, Msg: fmt.Sprintf("element %d is %v; NaN and Inf are refused (the model's output would be meaningless)", idx, t.At(idx))}
			}
		}
	}
	if !batched {
		return 1, nil
	}
	if batch == 0 {
		return 0, &InputError{Msg: "empty batch: send at least one row"}
	}
	if batch < 0 { // every input was an optional one left out
		return 0, &InputError{Msg: "every input was left out: the batch size is read from the inputs; send at least one"}
	}
	return batch, nil
}

// Takes reports why the model's engine cannot take elements of dt, nil
// when it can: ONNX Runtime takes every known dtype, the libtorch shim
// TorchTypes, an ensemble every known one. Callers that fill inputs themselves (the sequence batcher's
// controls and state) check their datatypes with it at load.
func (m *Model) Takes(dt DType) error {
	if !dt.Known() {
		return fmt.Errorf("unsupported dtype %s", dt)
	}
	if !m.Format.external() && !m.Format.ONNX() && !slices.Contains(TorchTypes, dt) {
		return fmt.Errorf("%s tensors are not supported by libtorch models (%s); it takes %s", dt, m.Format, torchTypeNames())
	}
	return nil
}

func torchTypeNames() string {
	names := make([]string, len(TorchTypes))
	for i, d := range TorchTypes {
		names[i] = d.String()
	}
	return strings.Join(names, ", ")
}

// firstNonFinite is the index of t's first NaN or Inf, -1 when there is none.
func firstNonFinite(t Tensor) int {
	switch t.DType {
	case Float32:
		return firstNonFinite32(t.Float32s())
	}
	for i, n := 0, t.Len(); i < n; i++ {
		if v := t.At(i); math.IsNaN(v) || math.IsInf(v, 0) {
			return i
		}
	}
	return -1
}

// firstNonFinite32 finds a NaN or Inf by its exponent bits (all ones), four
// elements a step: an image's 150,528 floats took 8 % of a request's CPU as
// two float64 tests per element (docs/benchmarks.md, the GPU check).
func firstNonFinite32(xs []float32) int {
	const exp = 0x7f800000
	i := 0
	for ; i+4 <= len(xs); i += 4 {
		a, b, c, d := math.Float32bits(xs[i])&exp, math.Float32bits(xs[i+1])&exp, math.Float32bits(xs[i+2])&exp, math.Float32bits(xs[i+3])&exp
		if a == exp || b == exp || c == exp || d == exp {
			break
		}
	}
	for ; i < len(xs); i++ {
		if math.Float32bits(xs[i])&exp == exp {
			return i
		}
	}
	return -1
}

// Run validates the inputs and computes one batch. Input problems are
// *InputError; engine failures wrap ErrEngine.
func (m *Model) Run(ctx context.Context, inputs []Tensor) ([]Tensor, error) {
	if _, err := m.CheckInputs(inputs); err != nil {
		return nil, err
	}
	return m.Forward(ctx, inputs)
}

// Forward computes one batch whose inputs were already checked with
// CheckInputs (the batcher concatenates checked requests). Engine failures
// wrap ErrEngine.
func (m *Model) Forward(ctx context.Context, inputs []Tensor) ([]Tensor, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := m.acquire(); err != nil {
		return nil, err
	}
	defer m.release()
	out, err := m.backend.Run(ctx, inputs)
	if err != nil && (m.Format == FormatEnsemble || errors.As(err, new(*InputError)) || isAnswer(err)) {
		return nil, err // a step's failure, whose kind (bad input, overload...) the transport tells apart; a request a Python model called invalid; its answer
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEngine, err)
	}
	return out, nil
}

// EachBackend is a Backend that takes a batch as the requests it is made
// of and answers each (a Python model, whose execute takes a list of
// requests): the batcher groups requests for it without joining them.
//
// ctxs are the requests' own contexts (ctx is the call's): a backend may
// tell the model that one of them was cancelled, and a request whose
// context carries Responses (WithResponses: a decoupled model's) is
// answered through them; its outs entry stays nil.
type EachBackend interface {
	Backend
	RunEach(ctx context.Context, ctxs []context.Context, reqs [][]Tensor) (outs [][]Tensor, errs []error, err error)
}

// TakesRequests reports whether the model's backend is an EachBackend.
func (m *Model) TakesRequests() bool {
	_, ok := m.backend.(EachBackend)
	return ok
}

// ForwardEach computes a batch of requests whose inputs were checked, on
// an EachBackend: an answer or an error per request, or an error for the
// whole call (which wraps ErrEngine unless the model called the request
// invalid). ctxs are the requests' contexts (see EachBackend).
func (m *Model) ForwardEach(ctx context.Context, ctxs []context.Context, reqs [][]Tensor) ([][]Tensor, []error, error) {
	eb, ok := m.backend.(EachBackend)
	if !ok {
		return nil, nil, fmt.Errorf("%w: the %s backend does not take requests one by one", ErrEngine, m.Format)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if err := m.acquire(); err != nil {
		return nil, nil, err
	}
	defer m.release()
	outs, errs, err := eb.RunEach(ctx, ctxs, reqs)
	if err != nil && !errors.As(err, new(*InputError)) && !isAnswer(err) && ctx.Err() == nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrEngine, err)
	}
	return outs, errs, err
}

// DecoupledBackend is the Backend of a model that may be decoupled
// (Triton's model_transaction_policy decoupled): a request gets any
// number of responses, through the Responses its context carries (see
// EachBackend).
type DecoupledBackend interface {
	Backend
	Decoupled() bool
}

// Decoupled reports whether the model answers through Responses.
func (m *Model) Decoupled() bool {
	db, ok := m.backend.(DecoupledBackend)
	return ok && db.Decoupled()
}

// ReadyBackend is the Backend of a model that can say whether it is ready
// to serve beyond having loaded: a Python model's is_ready() and the health
// of its process.
type ReadyBackend interface {
	Backend
	// Ready is nil when the model is ready; else why it is not. ctx bounds
	// the check.
	Ready(ctx context.Context) error
}

// CheckReady asks the backend whether it is ready (ReadyBackend); a model
// whose backend cannot say is ready once loaded.
func (m *Model) CheckReady(ctx context.Context) error {
	if rb, ok := m.backend.(ReadyBackend); ok {
		return rb.Ready(ctx)
	}
	return nil
}

// ExampleInputs returns inputs of n rows made by repeating the rows of the
// embedded test vector: real data for warm-up batches and benchmarks. It
// fails with ErrNoTestVector for files without one. An unbatched model has
// no rows to repeat: its one example is the test vector's inputs as they
// are, returned for n == 1, and any other n fails with ErrUnbatched.
func (m *Model) ExampleInputs(n int) ([]Tensor, error) {
	if m.Meta == nil || m.Meta.TestVector == nil {
		return nil, ErrNoTestVector
	}
	if !m.batched && n != 1 {
		return nil, fmt.Errorf("example inputs of %d rows: %w", n, ErrUnbatched)
	}
	out := make([]Tensor, 0, len(m.inputs))
	for _, spec := range m.inputs {
		enc, ok := m.Meta.TestVector.Inputs[spec.Name]
		if !ok {
			return nil, fmt.Errorf("test vector has no input %q", spec.Name)
		}
		tv, err := enc.Decode()
		if err != nil {
			return nil, fmt.Errorf("test vector input %q: %w", spec.Name, err)
		}
		if !m.batched {
			out = append(out, tv)
			continue
		}
		if len(tv.Shape) == 0 || tv.Shape[0] == 0 {
			return nil, fmt.Errorf("test vector input %q has no rows", spec.Name)
		}
		rowBytes := len(tv.Data) / int(tv.Shape[0])
		t, err := NewTensor(tv.DType, append([]int64{int64(n)}, tv.Shape[1:]...))
		if err != nil {
			return nil, fmt.Errorf("test vector input %q: %w", spec.Name, err)
		}
		for r := 0; r < n; r++ {
			src := r % int(tv.Shape[0])
			copy(t.Data[r*rowBytes:], tv.Data[src*rowBytes:(src+1)*rowBytes])
		}
		out = append(out, t)
	}
	return out, nil
}

// VerifyResult is the outcome of running a model's test vector.
type VerifyResult struct {
	MaxAbsError float64
	Atol, Rtol  float64
	Passed      bool
	Rows        int64
	// Worst names the output and element with the largest excess over tolerance.
	Worst string
}

// ErrUnbatched is returned for what needs a batch axis the model does not
// have (see Model.Batched), such as example inputs of several rows.
var ErrUnbatched = errors.New("the model has no batch axis (every input and output needs a dynamic axis 0 for rows)")

// ErrNoTestVector is returned by Verify for files without a test vector.
var ErrNoTestVector = errors.New("the model file has no test vector (export it with fw.export to embed one)")

// GPUTolerance is the least atol and rtol Verify uses on a GPU. A test
// vector is computed where the model was exported, usually on the CPU in full
// float32; on a GPU, libtorch runs cuDNN's convolutions in TF32 by default
// (PyTorch's own default on Ampere and newer), whose 10-bit mantissa puts a
// ResNet-18's logits about 2e-3 from the CPU's (measured on an H200,
// docs/benchmarks.md). The file's own tolerance, when looser, still applies.
const GPUTolerance = 1e-2

// Tolerance is the atol and rtol the model's test vectors are held to here:
// the file's, and on a GPU at least GPUTolerance. Zero without a test vector.
func (m *Model) Tolerance() (atol, rtol float64) {
	if m.Meta == nil || m.Meta.TestVector == nil {
		return 0, 0
	}
	atol, rtol = m.Meta.TestVector.Atol, m.Meta.TestVector.Rtol
	if gpu, _, _ := m.opts.deviceIndex(); gpu {
		atol, rtol = max(atol, GPUTolerance), max(rtol, GPUTolerance)
	}
	return atol, rtol
}

// Verify runs the test vector embedded in the metadata and compares outputs
// with |got - want| <= atol + rtol*|want| (on a GPU, atol and rtol at least
// GPUTolerance).
func (m *Model) Verify(ctx context.Context) (*VerifyResult, error) {
	if m.Meta == nil || m.Meta.TestVector == nil {
		return nil, ErrNoTestVector
	}
	tv := m.Meta.TestVector
	inputs := make([]Tensor, len(m.inputs))
	for i, spec := range m.inputs {
		enc, ok := tv.Inputs[spec.Name]
		if !ok {
			return nil, fmt.Errorf("test vector has no input %q", spec.Name)
		}
		t, err := enc.Decode()
		if err != nil {
			return nil, fmt.Errorf("test vector input %q: %w", spec.Name, err)
		}
		inputs[i] = t
	}
	out, err := m.Run(ctx, inputs)
	if err != nil {
		return nil, fmt.Errorf("run test vector: %w", err)
	}
	res := &VerifyResult{Passed: true, Rows: 1}
	res.Atol, res.Rtol = m.Tolerance()
	if m.batched && len(inputs) > 0 && len(inputs[0].Shape) > 0 {
		res.Rows = inputs[0].Shape[0]
	}
	worstExcess := math.Inf(-1)
	for i, spec := range m.outputs {
		enc, ok := tv.Outputs[spec.Name]
		if !ok {
			continue
		}
		want, err := enc.Decode()
		if err != nil {
			return nil, fmt.Errorf("test vector output %q: %w", spec.Name, err)
		}
		if i >= len(out) {
			return nil, fmt.Errorf("model returned %d outputs, test vector expects %q", len(out), spec.Name)
		}
		got := out[i]
		if NumElements(got.Shape) != NumElements(want.Shape) {
			res.Passed = false
			res.Worst = fmt.Sprintf("%s: shape %s, expected %s", spec.Name, FormatShape(got.Shape), FormatShape(want.Shape))
			continue
		}
		for j, n := 0, want.Len(); j < n; j++ {
			g, w := got.At(j), want.At(j)
			d := math.Abs(g - w)
			if math.IsNaN(d) {
				d = math.Inf(1)
			}
			if d > res.MaxAbsError {
				res.MaxAbsError = d
			}
			excess := d - (res.Atol + res.Rtol*math.Abs(w))
			if excess > 0 {
				res.Passed = false
			}
			if excess > worstExcess {
				worstExcess = excess
				res.Worst = fmt.Sprintf("%s[%d]: got %g, want %g", spec.Name, j, g, w)
			}
		}
	}
	return res, nil
}
