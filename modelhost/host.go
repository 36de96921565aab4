// Package modelhost owns the serving model's lifecycle and the slot the HTTP
// server reads it from: it loads a model file into one or more engine
// instances with a batcher in front, warms them up (the embedded test vector
// must match, then a few batches of common sizes), makes the instance current
// and the slot ready, and with Watch replaces it when the file changes on
// disk, loading the new one beside the old and swapping without dropping
// requests. Shutdown ends all of it: no reload can make the slot ready again
// once it has begun, and every instance is drained before it returns. A Host
// is the serving.Slot an httpapi.Server serves from.

package modelhost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/imageprep"
	"github.com/fw-serve/fw/serving"
	"github.com/fw-serve/fw/telemetry"
)

// Config says what to load and how to batch it.
type Config struct {
	Path   string
	Engine engine.Options
	// Batcher configures batching; Batcher.Instances engine instances are
	// loaded (each a session of its own, with Engine.Threads threads), one
	// per batcher worker, as Triton's instance groups do.
	Batcher batcher.Config
	// SkipWarmup starts serving without the warm-up batches (the test vector
	// still runs when present).
	SkipWarmup bool
	// Stats, when set, also receives every engine call (the inference
	// statistics the transports report); warm-up runs before it is attached.
	// When nil the host keeps its own, in every instance it serves.
	Stats *serving.Stats
	// Name and Version, when set, are what the model is served under (a
	// repository's directory names) instead of the file's own.
	Name, Version string
	// Prepare, when set, runs on every loaded instance before it serves:
	// it may set its Config (a repository's config.pbtxt) and fail the load
	// with the reason.
	Prepare func(*serving.Instance) error
	// Batching, when set, completes the batcher's configuration from the
	// loaded engine instance before the batcher starts (what depends on
	// the positions of its tensors: ragged batching); an error fails the
	// load.
	Batching func(m *engine.Model, bc *batcher.Config) error
	// Tracer, when set, is told of every engine call (the spans of traced
	// requests: telemetry.Observer).
	Tracer *telemetry.Tracer
	// ImageSamples, when set, keeps image test cases' preprocessed sample
	// pictures across loads (shared by a repository's models); nil decodes
	// the picture at every load.
	ImageSamples *imageprep.SampleCache
	// Open, when set, makes each engine instance instead of loading Path
	// (a model that is no file: an ensemble's pipeline, engine.Compose).
	Open func(ctx context.Context) (*engine.Model, error)
	// TryOneThread, when the thread count is fw's choice (not the user's),
	// times the first instance against a one-thread session of the same
	// file after its warm-up and keeps one thread for every instance when
	// it is as fast (engine.TryOneThread): a small model's call cannot
	// use a second thread, whose wake-up only costs CPU.
	TryOneThread bool
	// Threads, when set, remembers what the trial chose for a file (by its
	// size, modification time and inode, and the count and rows it started
	// from), so loading it again, a repository's on-demand load after an
	// eviction or a reload of an unchanged file, keeps that count without
	// a second trial. A repository shares one among its models.
	Threads *ThreadMemo
}

// ThreadMemo is the thread counts TryOneThread chose, per file version.
// Safe for concurrent use; the zero value is ready.
type ThreadMemo struct {
	mu sync.Mutex
	m  map[threadKey]int
}

// threadKey is one file version tried from one starting point.
type threadKey struct {
	path          string
	stamp         fileStamp
	threads, rows int
}

func (t *ThreadMemo) get(k threadKey) (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.m[k]
	return n, ok
}

func (t *ThreadMemo) put(k threadKey, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[threadKey]int{}
	}
	t.m[k] = n
}

// Metrics is where a Host reports: the server's readiness and reloads, and
// each loaded model version's series (httpapi.Metrics).
type Metrics interface {
	Model(name, version string) serving.ModelMetrics
	SetReady(ready bool)
	Reload(result string)
}

// Host loads the model and owns the slot the transports (httpapi, grpcapi)
// serve from: the current instance and the readiness.
type Host struct {
	cfg     Config
	metrics Metrics
	log     *slog.Logger
	stats   *serving.Stats

	current atomic.Pointer[serving.Instance]
	ready   atomic.Pointer[readiness]

	// mu orders swaps and readiness changes against BeginShutdown.
	mu       sync.Mutex
	stopping bool
	// busy counts reloads in progress and drains of replaced instances;
	// Add is only called under mu while !stopping, so Shutdown's Wait
	// cannot race an Add.
	busy sync.WaitGroup
	// loaded, when set (tests), runs after a reload has loaded its instance
	// and before it is swapped in.
	loaded func(*serving.Instance)
	// tryOneThread is engine.TryOneThread; tests decide its outcome.
	tryOneThread func(ctx context.Context, m *engine.Model, maxRows int) (*engine.Model, engine.ThreadTrial, error)
}

// ErrShuttingDown is returned by Reload once BeginShutdown was called.
var ErrShuttingDown = errors.New("modelhost: shutting down")

// drainTimeout bounds the drain of an instance a reload replaced.
const drainTimeout = 30 * time.Second

// readiness is one State with its reason.
type readiness struct {
	state  serving.State
	reason string
}

// New creates a host, starting (not ready) until Start. metrics records
// loads, reloads, readiness and the batcher's calls.
func New(cfg Config, metrics Metrics, log *slog.Logger) *Host {
	h := &Host{cfg: cfg, metrics: metrics, log: log, stats: cfg.Stats, tryOneThread: engine.TryOneThread}
	if h.stats == nil {
		h.stats = &serving.Stats{}
	}
	h.setState(serving.StateStarting, "loading the model")
	return h
}

// Current is the instance serving now, nil before Start succeeds.
func (h *Host) Current() *serving.Instance { return h.current.Load() }

// State is the readiness and its reason.
func (h *Host) State() (serving.State, string) {
	r := h.ready.Load()
	return r.state, r.reason
}

// setState changes readiness (and fw_ready).
func (h *Host) setState(st serving.State, reason string) {
	h.ready.Store(&readiness{st, reason})
	h.metrics.SetReady(st == serving.StateReady)
}

// Start loads and warms up the model and makes the server ready.
func (h *Host) Start(ctx context.Context) error {
	inst, err := h.load(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopping {
		if err == nil {
			h.discard(inst)
		}
		return ErrShuttingDown
	}
	if err != nil {
		h.setState(serving.StateBroken, err.Error())
		return err
	}
	h.current.Store(inst)
	h.setState(serving.StateReady, "")
	return nil
}

// discard drains an instance that was never served.
func (h *Host) discard(inst *serving.Instance) {
	if err := Drain(context.Background(), inst, drainTimeout); err != nil {
		h.log.Warn("discard a model loaded during shutdown", "err", err)
	}
}

// load builds one warmed-up instance: Batcher.Instances engine instances of
// the file (each checked against its test vector and warmed up) behind one
// batcher whose workers use one each.
func (h *Host) load(ctx context.Context) (*serving.Instance, error) {
	start := time.Now()
	n := max(1, h.cfg.Batcher.Instances)
	models := make([]*engine.Model, 0, n)
	fail := func(err error) (*serving.Instance, error) {
		for _, m := range models {
			m.Close()
		}
		return nil, err
	}
	var image *imageprep.Pipeline
	eo := h.cfg.Engine
	open := h.cfg.Open
	if open == nil {
		open = func(ctx context.Context) (*engine.Model, error) { return engine.Load(ctx, h.cfg.Path, eo) }
	}
	try := h.cfg.TryOneThread && h.cfg.Open == nil
	var memoKey threadKey
	if try && h.cfg.Threads != nil {
		if st, err := stamp(h.cfg.Path); err == nil {
			memoKey = threadKey{h.cfg.Path, st, eo.Threads, h.trialRows()}
			if n, ok := h.cfg.Threads.get(memoKey); ok {
				eo.Threads, try = n, false // this file was tried from here before
			}
		}
	}
	for i := range n {
		m, err := open(ctx)
		if err != nil {
			return fail(err)
		}
		models = append(models, m)
		if image == nil {
			image = h.compileImage(m)
		}
		if err := warmup(ctx, m, image, h.cfg.ImageSamples, h.cfg.Batcher.MaxBatchRows, h.cfg.SkipWarmup); err != nil {
			return fail(fmt.Errorf("warm up %s: %w", h.cfg.Path, err))
		}
		if i == 0 && try {
			var decided bool
			models[0], decided = h.preferOneThread(ctx, m, image)
			eo.Threads = models[0].Threads() // the other instances load as the first one serves
			if decided && memoKey.path != "" {
				h.cfg.Threads.put(memoKey, eo.Threads)
			}
		}
	}
	m := models[0]
	inst := &serving.Instance{Model: m, Models: models, Image: image, Stats: h.stats, ServedName: h.cfg.Name, ServedVersion: h.cfg.Version}
	mm := h.metrics.Model(inst.Name(), inst.Version())
	mm.SetQueueCapacity(h.cfg.Batcher.QueueCapacity())
	bc := h.cfg.Batcher
	bc.Unbatched = bc.Unbatched || !m.Batched() // no batch axis to join requests on: one engine call each
	if o := h.cfg.Tracer.Observer(inst.Name(), inst.Version()); o != nil {
		bc.Calls = o
	}
	if h.cfg.Batching != nil {
		if err := h.cfg.Batching(m, &bc); err != nil {
			return fail(err)
		}
	}
	if m.TakesRequests() { // a Python model: each request answered on its own
		bc.Streams = m.Decoupled() // its responses through the requests' engine.Responses
		runs := make([]batcher.EachFunc, n)
		for i, m := range models {
			runs[i] = m.ForwardEach
		}
		inst.Batcher = batcher.NewEachPool(runs, bc, serving.Tee{mm, h.stats})
	} else {
		runs := make([]batcher.RunFunc, n)
		for i, m := range models {
			runs[i] = m.Forward
		}
		inst.Batcher = batcher.NewPool(runs, bc, serving.Tee{mm, h.stats})
	}
	inst.Config = serving.Config(inst, filepath.Base(h.cfg.Path))
	if h.cfg.Prepare != nil {
		if err := h.cfg.Prepare(inst); err != nil {
			_ = inst.Batcher.Close(ctx)
			return fail(err)
		}
	}
	took := time.Since(start)
	mm.Loaded(string(m.Format), string(m.Device), took)
	h.log.Info("model ready", "name", inst.Name(), "version", inst.Version(), "format", m.Format, "device", m.Device,
		"instances", n, "threads", m.Threads(), "batched", m.Batched(), "load_ms", took.Milliseconds(), "path", h.cfg.Path)
	return inst, nil
}

// trialRows is the largest call the trial times: --max-batch-size rows,
// or 1 for a model served unbatched (a configuration's max_batch_size 0).
func (h *Host) trialRows() int {
	if h.cfg.Batcher.Unbatched {
		return 1
	}
	return h.cfg.Batcher.MaxBatchRows
}

// preferOneThread returns m, or a one-thread session of its file when that
// is as fast (engine.TryOneThread) and passes m's warm-up, closing m; and
// whether the trial decided (it ran, or the model is not one to try), which
// a later load of the same file may reuse. A trial that cannot run is
// logged and m kept: it only ever saves CPU.
func (h *Host) preferOneThread(ctx context.Context, m *engine.Model, image *imageprep.Pipeline) (*engine.Model, bool) {
	one, trial, err := h.tryOneThread(ctx, m, h.trialRows())
	switch {
	case ctx.Err() != nil: // the load is being cancelled: its own error says so
		if one != nil {
			one.Close()
		}
		return m, false
	case err != nil:
		h.log.Info("could not time the model with one intra-op thread; keeping its threads", "threads", m.Threads(), "err", err)
		return m, false
	case trial.Skipped != "":
		h.log.Debug("one intra-op thread not tried", "threads", m.Threads(), "reason", trial.Skipped)
		return m, true
	}
	h.log.Info("timed the model's calls with its threads and with one", "rows", trial.Rows, "threads", m.Threads(),
		"fastest_call", trial.Many, "one_thread", trial.One, "kept_threads", trial.Threads)
	if one == nil {
		return m, true
	}
	if err := warmup(ctx, one, image, h.cfg.ImageSamples, h.cfg.Batcher.MaxBatchRows, h.cfg.SkipWarmup); err != nil {
		h.log.Warn("the one-thread session failed its warm-up; keeping the model's threads", "threads", m.Threads(), "err", err)
		one.Close()
		return m, false
	}
	m.Close()
	return one, true
}

// compileImage prepares the model's image recipe once for every request. A
// recipe that does not compile is left to /predict/image, which then
// answers each request with the reason.
func (h *Host) compileImage(m *engine.Model) *imageprep.Pipeline {
	if m.Meta == nil || m.Meta.Preprocessing == nil || m.Meta.Preprocessing.Image == nil {
		return nil
	}
	pl, err := imageprep.Compile(*m.Meta.Preprocessing.Image)
	if err != nil {
		h.log.Warn("the model's image preprocessing recipe is invalid; /predict/image will refuse requests", "err", err)
		return nil
	}
	return pl
}

// warmup runs the test vector (it must match), its image case through the
// image path (pl; it must match too) and, unless skipped, batches of a few
// common sizes so the first requests do not pay for lazy initialisation. An
// unbatched model has no batch sizes: its test vector was its warm-up.
func warmup(ctx context.Context, m *engine.Model, pl *imageprep.Pipeline, samples *imageprep.SampleCache, maxBatch int, skip bool) error {
	res, err := m.Verify(ctx)
	switch {
	case errors.Is(err, engine.ErrNoTestVector):
		// Files exported without fw metadata: nothing to compare with.
	case err != nil:
		return err
	case !res.Passed:
		return fmt.Errorf("%w: the embedded test vector does not match (max abs error %g; %s)", errTestVector, res.MaxAbsError, res.Worst)
	}
	ic, err := imageprep.VerifyImage(ctx, m, pl, samples)
	switch {
	case errors.Is(err, imageprep.ErrNoImageTestCase):
	case err != nil:
		return err
	case !ic.Passed:
		return fmt.Errorf("%w: the image test case does not match (preprocessed max abs error %g, input_atol %g; outputs max abs error %g; %s)", errTestVector, ic.InputMaxAbsError, ic.InputAtol, ic.OutputMaxAbsError, ic.Worst)
	}
	if skip || !m.Batched() {
		return nil
	}
	sizes := []int{1, 8}
	if maxBatch > 8 {
		sizes = append(sizes, maxBatch)
	}
	for _, n := range sizes {
		in, err := m.ExampleInputs(n)
		if err != nil {
			return nil // no test vector: nothing realistic to warm up with
		}
		if _, err := m.Run(ctx, in); err != nil {
			return fmt.Errorf("warm-up batch of %d: %w", n, err)
		}
	}
	return nil
}

var errTestVector = errors.New("test vector mismatch")

// fileStamp identifies a version of the model file.
type fileStamp struct {
	size int64
	mod  time.Time
	ino  uint64
}

func stamp(path string) (fileStamp, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{size: st.Size(), mod: st.ModTime(), ino: inode(st)}, nil
}

// Watch polls the model file every interval until ctx ends. When it has
// changed and then stayed the same for one more poll (so a file being written
// is not read half-way), the new file is loaded and warmed up beside the old
// one and swapped in; the old instance drains its queue and closes. A file
// that fails to load is logged and counted, and the old model keeps serving.
func (h *Host) Watch(ctx context.Context, interval time.Duration) {
	last, _ := stamp(h.cfg.Path)
	var seen fileStamp
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur, err := stamp(h.cfg.Path)
		if err != nil || cur == last {
			seen = cur
			continue
		}
		if cur != seen { // changed since the last poll: wait until it settles
			seen = cur
			continue
		}
		last = cur
		if errors.Is(h.Reload(ctx), ErrShuttingDown) {
			return
		}
	}
}

// Reload loads the file again and swaps it in; on failure the old model stays.
// The replaced instance drains in the background (Shutdown waits for it).
// Once BeginShutdown was called, Reload fails with ErrShuttingDown, and a
// model it was loading meanwhile is closed instead of served: a reload never
// makes a draining server ready again.
func (h *Host) Reload(ctx context.Context) error {
	h.mu.Lock()
	if h.stopping {
		h.mu.Unlock()
		return ErrShuttingDown
	}
	h.busy.Add(1)
	h.mu.Unlock()
	defer h.busy.Done()

	h.log.Info("model file changed: loading the new version beside the old", "path", h.cfg.Path)
	inst, err := h.load(ctx)
	if err != nil {
		h.metrics.Reload("failed")
		h.log.Error("reload refused: the old model keeps serving", "err", err)
		return err
	}
	if h.loaded != nil {
		h.loaded(inst)
	}
	h.mu.Lock()
	if st, _ := h.State(); h.stopping || st == serving.StateDraining {
		h.mu.Unlock()
		h.log.Info("reload discarded: the server is shutting down", "path", h.cfg.Path)
		h.discard(inst)
		return ErrShuttingDown
	}
	old := h.current.Swap(inst)
	h.setState(serving.StateReady, "")
	if old != nil {
		h.busy.Add(1)
		go func() {
			defer h.busy.Done()
			if err := Drain(context.Background(), old, drainTimeout); err != nil {
				h.log.Warn("drain the replaced model", "err", err)
			}
		}()
	}
	h.mu.Unlock()
	h.metrics.Reload("ok")
	return nil
}

// BeginShutdown makes the server not ready (/health answers 503 "shutting
// down") and stops reloads for good, so that nothing turns it ready again.
// The model keeps serving the requests that still arrive until Shutdown.
func (h *Host) BeginShutdown() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopping = true
	h.setState(serving.StateDraining, "shutting down")
}

// Shutdown begins the shutdown if BeginShutdown was not called, waits for a
// reload in progress and the drains of replaced instances, and drains the
// serving instance, all within ctx and timeout. It returns an error when
// something was still running at the deadline; a model whose engine call is
// still running then is freed by that call as it returns.
func (h *Host) Shutdown(ctx context.Context, timeout time.Duration) error {
	h.BeginShutdown()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var errs []error
	if inst := h.current.Load(); inst != nil {
		if err := Drain(ctx, inst, timeout); err != nil {
			errs = append(errs, err)
		}
	}
	idle := make(chan struct{})
	go func() {
		h.busy.Wait()
		close(idle)
	}()
	select {
	case <-idle:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("shutdown: a reload or the drain of a replaced model is still running: %w", ctx.Err()))
	}
	return errors.Join(errs...)
}

// Drain closes an instance's sequence batcher (if any) and batcher, letting
// them finish what they accepted, and then its model. It waits for the batcher's workers until ctx ends or timeout
// passes, and then returns an error: the workers' engine calls are cancelled,
// and the model, closed anyway, is freed only when the last call still inside
// it returns (engine.Model counts them), never under one.
func Drain(ctx context.Context, inst *serving.Instance, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if inst.Sequences != nil {
		inst.Sequences.Close() // no new sequence requests; the admitted ones finish below
	}
	var errs []error
	if err := inst.Batcher.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("drain: %w", err))
	}
	for _, m := range inst.All() {
		if err := m.Close(); err != nil {
			errs = append(errs, fmt.Errorf("drain: close model %s: %w", m.Name(), err))
		}
	}
	return errors.Join(errs...)
}
