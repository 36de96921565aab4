// Package pybackend serves models written for Triton's Python backend: a
// model.py whose class TritonPythonModel has initialize, execute and
// finalize. Each instance of such a model is a Python process running
// stub.py (embedded in the binary), which provides the module
// triton_python_backend_utils and loads the model; fw sends it a batch as
// one InferenceRequest per call and reads back its InferenceResponse over
// the process's standard input and output. A model's calls to other models
// (pb_utils.InferenceRequest(...).exec(), Triton's BLS) come back over the
// same channel and run through Config.Call.
//
// The process is the model's own code: it runs with fw's user and
// environment, as Triton runs it. What it sends back is checked (declared
// outputs only, each well formed for its datatype, bytes bounded) before
// it reaches a client; a process that dies or breaks the protocol is killed,
// the call fails with what it printed last, and the next call starts a
// fresh one.
package pybackend

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fw-serve/fw/engine"
)

//go:embed stub.py
var stubSource string

// Call runs a model on behalf of a Python model's BLS request: the named
// inputs, the outputs asked for (all when empty). It returns the outputs
// by name.
type Call func(ctx context.Context, model, version string, inputs map[string]engine.Tensor, outputs []string) (map[string]engine.Tensor, error)

// StreamCall runs a decoupled model on behalf of a Python model's BLS
// request (exec(decoupled=True)): each response's outputs by name, or its
// error, to send as it comes, final on the last.
type StreamCall func(ctx context.Context, model, version string, inputs map[string]engine.Tensor, outputs []string,
	send func(outs map[string]engine.Tensor, err error, final bool) error) error

// Repository is the server's model repository as a Python model reaches it
// (pb_utils.load_model, unload_model and is_model_ready).
type Repository interface {
	// Load loads (or reloads) the model, config (a JSON ModelConfig)
	// replacing its config.pbtxt when not empty.
	Load(ctx context.Context, name string, config []byte) error
	// Unload unloads it (and, with dependents, the models its ensemble
	// runs), returning once it takes no more requests.
	Unload(ctx context.Context, name string, dependents bool) error
	// Ready reports whether the model (version, or its newest when "") is
	// ready; an unknown model is an error.
	Ready(name, version string) (bool, error)
}

// Config is one version of a Python model.
type Config struct {
	// Python is the interpreter (with numpy) that runs the model.
	Python string
	// File is the model.py; Dir, the version directory, is put first on
	// the model's sys.path so that files beside it import.
	File, Dir string
	// Name and Version are what the model is served as.
	Name, Version string
	// Args are initialize's args (Triton's keys), without
	// model_instance_name, which each instance gets its own of.
	Args map[string]string
	// Instance is this instance's index among the model's (its
	// model_instance_name is <name>_0_<Instance>); fw runs one Backend,
	// one process, per instance_group instance.
	Instance int
	// Inputs and Outputs are the configuration's tensors, batch axis first
	// when Batched.
	Inputs, Outputs []engine.TensorSpec
	// MaxBytes bounds the tensor bytes of one answer from the process.
	MaxBytes int64
	// Call runs BLS requests and StreamCall those to decoupled models;
	// nil refuses them.
	Call       Call
	StreamCall StreamCall
	// Repository answers pb_utils.load_model, unload_model and
	// is_model_ready; nil refuses them.
	Repository Repository
	// Decoupled is Triton's model_transaction_policy decoupled: the model
	// answers a request through its response sender, any number of times;
	// it is served through Stream, not Run.
	Decoupled bool
	// Iterative is Triton's sequence_batching iterative_sequence: the
	// model may reschedule a request (set_release_flags), which then runs
	// through execute again before it is answered.
	Iterative bool
	// Log receives what the model prints.
	Log *slog.Logger
	// Metrics receives the model's custom metrics (pb_utils.MetricFamily);
	// nil drops them.
	Metrics *Metrics
}

// Backend is a started Python model: engine.Backend over its processes.
type Backend struct {
	cfg  Config
	idle chan slot // free instances; one whose p is nil restarts on its next call

	mu     sync.Mutex
	all    map[*proc]bool
	closed bool
	life   context.Context    // ends at Close: a background restart's bound
	end    context.CancelFunc // ends life

	rmu      sync.Mutex
	checking *readyCheck // the is_ready() call in flight, which probes share
	reviving atomic.Bool // a restart asked for by a probe is under way
	// The last background restart that failed, and when: probes report it
	// and try again reviveBackoff after it.
	reviveErr error
	revivedAt time.Time
}

// readyCheck is one is_ready() call: done closes once err is its answer.
type readyCheck struct {
	done chan struct{}
	err  error
}

// readyWait is how long a probe waits for the model's is_ready() (Triton's
// too); the call goes on, and the next probe waits for the same one.
const readyWait = 5 * time.Second

// Ready implements engine.ReadyBackend: the instance's process must be
// running, and the model's is_ready(), when it defines one, must return
// True within readyWait. Probes at once share one is_ready() call. A
// process found dead (killed, crashed) is started again in the background,
// so that a model nobody sends requests to while it is not ready recovers.
func (b *Backend) Ready(ctx context.Context) error {
	var p *proc
	b.mu.Lock()
	for q := range b.all {
		if !q.dead() {
			p = q
		}
	}
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return errors.New("the model is unloading")
	}
	if p == nil {
		sick := notHealthy(fmt.Sprintf("%s_0_%d", b.cfg.Name, b.cfg.Instance))
		b.rmu.Lock()
		last, at := b.reviveErr, b.revivedAt
		b.rmu.Unlock()
		if last != nil && time.Since(at) < reviveBackoff {
			return fmt.Errorf("%w; its last restart failed: %v", sick, last)
		}
		go b.revive()
		return sick
	}
	p.mu.Lock()
	started, has := p.initialized, p.hasIsReady
	p.mu.Unlock()
	switch {
	case !started: // started again after it died: initialize runs
		return notHealthy(p.instance)
	case !has:
		return nil
	}
	b.rmu.Lock()
	c := b.checking
	if c == nil {
		c = &readyCheck{done: make(chan struct{})}
		b.checking = c
		go func() {
			c.err = p.isReady()
			b.rmu.Lock()
			b.checking = nil
			b.rmu.Unlock()
			close(c.done)
		}()
	}
	b.rmu.Unlock()
	t := time.NewTimer(readyWait)
	defer t.Stop()
	select {
	case <-c.done:
		return c.err
	case <-t.C:
		return fmt.Errorf("its is_ready() did not answer within %v (the next probe waits for the same call)", readyWait)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// revive starts the instance's process again when it is dead and no call
// holds it (a call restarts it itself).
func (b *Backend) revive() {
	if !b.reviving.CompareAndSwap(false, true) {
		return
	}
	defer b.reviving.Store(false)
	var s slot
	select {
	case s = <-b.idle:
	default:
		return // a call has it, and restarts it if it must
	}
	if s.p != nil && !s.p.dead() {
		b.idle <- s
		return
	}
	if s.p != nil {
		b.drop(s.p)
	}
	// As long as initialize takes (a large model's may take minutes), until
	// the model is unloaded.
	p, err := b.start(b.life, s.i)
	b.rmu.Lock()
	b.reviveErr, b.revivedAt = err, time.Now()
	b.rmu.Unlock()
	if err != nil {
		b.cfg.Log.Warn("restarting a Python model's process", "model", b.cfg.Name, "instance", s.i, "err", err)
		b.idle <- slot{i: s.i} // the next call, or probe after reviveBackoff, tries again
		return
	}
	b.idle <- slot{s.i, p}
}

// reviveBackoff is how long after a failed background restart probes
// report it before they try again.
const reviveBackoff = 5 * time.Second

// Start starts the instance's process and runs initialize in it.
func Start(ctx context.Context, cfg Config) (*Backend, error) {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 1 << 30
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	py, err := interpreter(cfg.Python)
	if err != nil {
		return nil, err
	}
	cfg.Python = py
	b := &Backend{cfg: cfg, idle: make(chan slot, 1), all: map[*proc]bool{}}
	b.life, b.end = context.WithCancel(context.Background())
	p, err := b.start(ctx, cfg.Instance)
	if err != nil {
		b.end()
		return nil, err
	}
	b.idle <- slot{cfg.Instance, p}
	return b, nil
}

// start runs one instance's process and its initialize.
func (b *Backend) start(ctx context.Context, i int) (*proc, error) {
	args := make(map[string]string, len(b.cfg.Args)+1)
	for k, v := range b.cfg.Args {
		args[k] = v
	}
	args["model_instance_name"] = fmt.Sprintf("%s_0_%d", b.cfg.Name, i)
	p, err := spawn(b.cfg, i)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		p.kill()
		return nil, errors.New("the model is unloading")
	}
	b.all[p] = true
	b.mu.Unlock()
	if err := p.initialize(ctx, args); err != nil {
		b.drop(p)
		return nil, err
	}
	return p, nil
}

// AutoComplete runs the model's TritonPythonModel.auto_complete_config
// (when it has one) on config, Triton's JSON of the model configuration,
// and returns the configuration it completed, as JSON. Only the class is
// loaded: no instance is made, initialize does not run.
func AutoComplete(ctx context.Context, cfg Config, config []byte) ([]byte, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	py, err := interpreter(cfg.Python)
	if err != nil {
		return nil, err
	}
	cfg.Python = py
	p, err := spawn(cfg, 0)
	if err != nil {
		return nil, err
	}
	defer p.finalize()
	m, err := p.control(ctx, map[string]any{"op": "auto", "file": cfg.File, "dir": cfg.Dir, "config": json.RawMessage(config)}, "auto_complete_config")
	switch {
	case err != nil:
		return nil, err
	case m.Op == "error":
		return nil, fmt.Errorf("auto_complete_config: %s", m.Message)
	case m.Op != "config":
		return nil, p.died("broke the protocol", fmt.Errorf("answered %q to auto", m.Op))
	}
	return m.Config, nil
}

// interpreter resolves the interpreter as fw's working directory and PATH
// name it, to an absolute path: the processes run in the model's version
// directory.
func interpreter(python string) (string, error) {
	p, err := exec.LookPath(python)
	if err == nil {
		p, err = filepath.Abs(p)
	}
	if err != nil {
		return "", fmt.Errorf("the Python backend needs an interpreter with numpy: %s: %w (set fw serve --python)", python, err)
	}
	return p, nil
}

// drop kills p and forgets it.
func (b *Backend) drop(p *proc) {
	p.kill()
	b.mu.Lock()
	delete(b.all, p)
	b.mu.Unlock()
}

// Inputs are the configuration's inputs.
func (b *Backend) Inputs() []engine.TensorSpec { return b.cfg.Inputs }

// Outputs are the configuration's outputs.
func (b *Backend) Outputs() []engine.TensorSpec { return b.cfg.Outputs }

// Run hands the batch to a free process as one request and returns its
// response's outputs in the configuration's order.
func (b *Backend) Run(ctx context.Context, inputs []engine.Tensor) ([]engine.Tensor, error) {
	outs, errs, err := b.RunEach(ctx, []context.Context{ctx}, [][]engine.Tensor{inputs})
	if err != nil {
		return nil, err
	}
	return outs[0], errs[0]
}

// RunEach hands the requests to a free process in one execute call and
// returns each response's outputs, in the configuration's order, or the
// error the model answered for that request. A process that died or broke
// the protocol fails the call and is replaced on the next. ctxs are the
// requests' contexts: the model is told when one is cancelled. A decoupled
// model's requests each carry engine.Responses in theirs, which get the
// responses, during execute and after it, until the final one; RunEach
// returns when execute has, with nil answers.
func (b *Backend) RunEach(ctx context.Context, ctxs []context.Context, reqs [][]engine.Tensor) ([][]engine.Tensor, []error, error) {
	if len(ctxs) != len(reqs) {
		return nil, nil, fmt.Errorf("%d contexts for %d requests", len(ctxs), len(reqs))
	}
	for _, c := range ctxs {
		if (engine.ResponsesOf(c) != nil) != b.cfg.Decoupled {
			if b.cfg.Decoupled {
				return nil, nil, fmt.Errorf("model %q is decoupled: its requests need a response stream (engine.WithResponses)", b.cfg.Name)
			}
			return nil, nil, fmt.Errorf("model %q is not decoupled: it answers each request once", b.cfg.Name)
		}
	}
	var s slot
	select {
	case s = <-b.idle:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	if s.p == nil || s.p.dead() {
		if s.p != nil {
			b.drop(s.p)
		}
		// The restart (initialize included) lasts while one of the
		// requests still waits for it: one nobody waits for any more is
		// stopped, and the next call tries again.
		rctx, stop := whileWanted(ctx, ctxs)
		p, err := b.start(rctx, s.i)
		stop()
		if err != nil {
			b.idle <- slot{i: s.i} // it restarts on a later call
			return nil, nil, fmt.Errorf("restart the model's Python process: %w", err)
		}
		s.p = p
	}
	// ctx ending tells the model (is_cancelled()) and kills the process
	// when execute has not returned cancelGrace later; a request's own
	// context (ctxs) ending only tells the model.
	outs, errs, err := s.p.execute(ctx, ctxs, reqs)
	if err != nil && !errors.As(err, new(*ModelError)) && !errors.As(err, new(*engine.InputError)) {
		b.drop(s.p) // a broken channel or a dead process: the next call starts a fresh one
		b.idle <- slot{i: s.i}
		return nil, nil, err
	}
	b.idle <- s
	return outs, errs, err
}

// whileWanted returns a context that ends with ctx, or when every one of
// ctxs (the requests of a call) has ended.
func whileWanted(ctx context.Context, ctxs []context.Context) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithCancel(ctx)
	if len(ctxs) == 0 {
		return wctx, cancel
	}
	var left atomic.Int64
	left.Store(int64(len(ctxs)))
	stops := make([]func() bool, len(ctxs))
	for i, c := range ctxs {
		stops[i] = context.AfterFunc(c, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return wctx, func() {
		for _, s := range stops {
			s()
		}
		cancel()
	}
}

// Decoupled reports whether the model answers through engine.Responses.
func (b *Backend) Decoupled() bool { return b.cfg.Decoupled }

// stream is one decoupled request in flight: the process's responses to
// it (by id) go to q until the final one.
type stream struct {
	id uint64
	q  *engine.Responses
}

// deliver hands on one "send" of the model, checked against cfg.
func (s *stream) deliver(cfg Config, m *message, datas [][]byte) {
	resp := engine.Response{Final: m.Final}
	switch {
	case m.Error != nil && m.Raised: // an async execute's exception, after it was answered "result"
		resp.Err = modelError(cfg.Name, m.Error)
	case m.Error != nil:
		resp.Err = answeredError(cfg.Name, m.Error)
	case m.Response:
		resp.Outs, resp.Err = outputs(cfg, m.Tensors, datas)
		resp.Parameters = m.Params
	}
	s.q.Put(resp)
}

// fail ends the request with err.
func (s *stream) fail(err error) { s.q.Fail(err) }

// Close runs each process's finalize and stops it.
func (b *Backend) Close() error {
	b.end()
	b.mu.Lock()
	b.closed = true
	procs := make([]*proc, 0, len(b.all))
	for p := range b.all {
		procs = append(procs, p)
	}
	b.all = map[*proc]bool{}
	b.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); p.finalize() }()
	}
	wg.Wait()
	return nil
}

// slot is one instance: its index and its process.
type slot struct {
	i int
	p *proc
}

// ModelError is an error the model returned for a request (an
// InferenceResponse with an error, or an exception from execute).
type ModelError struct {
	Model string
	Msg   string
	// Code is the TritonError code the model gave (1, INTERNAL, unless it
	// said otherwise; 7 is CANCELLED).
	Code int
	// Answered marks an error response the model gave the request, Raised
	// an exception from execute; neither is fw's check of its answer.
	Answered, Raised bool
}

// ModelAnswer implements engine.ModelAnswer: an error response's message
// unchanged; an exception in Triton's words.
func (e *ModelError) ModelAnswer() (code int, msg string, ok bool) {
	if e.Raised {
		return e.Code, e.Error(), true
	}
	return e.Code, e.Msg, e.Answered
}

// Error names the model and says what it answered; an exception from
// execute as Triton's Python backend says it.
func (e *ModelError) Error() string {
	if e.Raised {
		return fmt.Sprintf("Failed to process the request(s) for model '%s', message: %s", e.Model, e.Msg)
	}
	return fmt.Sprintf("Python model %q: %s", e.Model, e.Msg)
}

// datatypes are the V2 names of the element types a Python model moves
// (BF16 as DLPack through torch: numpy has no bfloat16).
var datatypes = map[engine.DType]string{
	engine.BFloat16: "BF16", engine.Bool: "BOOL", engine.Uint8: "UINT8", engine.Uint16: "UINT16", engine.Uint32: "UINT32", engine.Uint64: "UINT64",
	engine.Int8: "INT8", engine.Int16: "INT16", engine.Int32: "INT32", engine.Int64: "INT64",
	engine.Float16: "FP16", engine.Float32: "FP32", engine.Float64: "FP64", engine.String: "BYTES",
}

// Takes reports whether a Python model can take tensors of dt.
func Takes(dt engine.DType) bool { _, ok := datatypes[dt]; return ok }

// dtypeOf is the element type of a V2 datatype name a Python model may send.
func dtypeOf(name string) (engine.DType, bool) {
	for d, n := range datatypes {
		if n == name {
			return d, true
		}
	}
	return engine.Invalid, false
}
