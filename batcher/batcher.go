// Package batcher is the dynamic micro-batcher of the model server: it
// coalesces concurrent requests into engine calls of up to Config.MaxBatchRows
// rows, waits at most Config.MaxDelay for more work, and splits every engine
// output back to the requests one-to-one.
//
// Only requests whose inputs have the same dtypes and the same non-batch
// dimensions share an engine call (a model with a dynamic sequence axis gets
// one queue per sequence length). Within such a group requests run in arrival
// order. A request with more rows than MaxBatchRows is never split: it runs
// alone, as its own engine call; the HTTP layer caps rows per request
// separately.
//
// When an engine call of several requests fails (or panics), each request is
// retried alone, so one poisoned request fails alone and the others succeed.
//
// A model without a batch axis (Config.Unbatched) has no rows to join: each
// request is its own engine call, taken from one queue in arrival order.
package batcher

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/fw-serve/fw/engine"
)

// RunFunc is one engine call. Inputs are positional; axis 0 is the batch axis
// of every input and output, and every output's axis 0 must equal the rows
// sent (unless Config.Unbatched: then inputs and outputs are whole tensors).
//
// Ownership: the input tensors (their Data and Shape, and the slice itself)
// may be buffers the Batcher reuses for the next call, so RunFunc must not
// keep or modify them after it returns. The outputs it returns pass to the
// Batcher, which hands them (or disjoint row ranges of them) to the callers of
// Submit without copying: RunFunc must return freshly allocated outputs that
// nothing else reads or writes afterwards.
type RunFunc func(ctx context.Context, inputs []engine.Tensor) ([]engine.Tensor, error)

// EachFunc runs a batch as the requests it is made of, each with its own
// inputs, and answers each: outs[i] or errs[i] for reqs[i] (Triton's
// Python backend, whose execute takes a list of requests and returns a
// response per request). err fails the whole call. Outputs are whole
// tensors: their axis 0 is not checked against the request's rows.
//
// ctxs are the requests' own contexts, ctx the call's (the batcher's, or
// the one request's with RequestContext).
type EachFunc func(ctx context.Context, ctxs []context.Context, reqs [][]engine.Tensor) (outs [][]engine.Tensor, errs []error, err error)

// Config tunes a Batcher. Zero fields take the defaults listed, except
// MaxDelay, whose zero value means "never wait"; DefaultConfig returns the
// defaults including the 1ms delay.
type Config struct {
	// MaxBatchRows is the upper bound of rows per engine call, counted in
	// rows, not requests (default 64). A single request with more rows runs
	// alone.
	MaxBatchRows int
	// MaxDelay is how long the first request of a batch may wait for more
	// work before its batch runs anyway, while another engine call is
	// running. When no engine call is running a batch starts at once
	// (unless PreferredSizes hold it): waiting then only adds latency, and
	// under load batches fill by themselves with the requests that arrive
	// during the running call.
	// A batch also goes as soon as a request of another shape (which
	// cannot join it) is queued after its oldest, as Triton's pending
	// batch does.
	// 0 (or negative) never waits: a free worker runs whatever is queued at
	// that moment. DefaultConfig uses 1ms.
	MaxDelay time.Duration
	// Instances is the number of concurrent engine workers (default 1).
	// While some run, one other gathers the next batch.
	Instances int
	// MaxQueue is the most requests waiting for an engine call (not yet in
	// one); beyond it Submit fails at once with ErrQueueFull (default 1024).
	MaxQueue int
	// Unbatched serves a model without a batch axis (engine.Model.Batched
	// false: a fixed axis 0, or none): every request is its own engine call,
	// never joined with another, and counts as one row (in Stats, Timing and
	// MaxBatchRows); its inputs and outputs are whole tensors whose axis 0,
	// if any, is not checked against the rows. Requests still queue, in
	// arrival order, within MaxQueue; MaxDelay does not apply.
	Unbatched bool
	// PreferredSizes, when set, are Triton's preferred_batch_size: a batch
	// is held for up to MaxDelay, even while no engine call runs, until the
	// first requests of its queue add up to one of these sizes (without
	// passing the largest), and then sent at once, the largest such run of
	// requests. Short of one, a batch taken before its oldest request has
	// waited MaxDelay holds at most the largest size's rows, one taken
	// after it up to MaxBatchRows (Triton's). None keeps fw's behaviour:
	// an idle engine never waits.
	PreferredSizes []int
	// MinRows, when above 1, holds a batch for up to MaxDelay, even while
	// no engine call runs, until its queue holds at least this many rows,
	// and then sends up to MaxBatchRows: Triton's direct sequence
	// batching's minimum_slot_utilization (the share of max_batch_size
	// that must be ready). Ignored with PreferredSizes, Unbatched or no
	// MaxDelay.
	MinRows int
	// Queues are Triton's priority levels and queue policies (request
	// priorities and queue timeouts, WithQueueOptions). The zero value is
	// one queue in arrival order.
	Queues Queues
	// PreserveOrdering answers requests in the order their batches were
	// taken from the queue (Triton's preserve_ordering: within a batch,
	// queue order): a request whose engine call ended on one instance
	// waits for those taken before it, running on others. A request still
	// queued holds no one (priority levels and DELAY keep their order).
	// Without it (and always with Streams) each request is answered as
	// soon as its call ends. CallerRuns does not apply.
	PreserveOrdering bool
	// RequestContext runs an engine call of one request with that
	// request's context (its deadline, trace and values) instead of the
	// batcher's own: for a run that is itself made of requests to other
	// models (an ensemble's pipeline). Calls joining several requests
	// keep the batcher's.
	RequestContext bool
	// PassTurn makes a request's turn (WithTurn) order its entry into
	// this queue without ending there: with RequestContext, the call of
	// one request passes the turn on to the requests it makes (an
	// ensemble's first steps, which queue in their models' batchers in
	// the source's order, as Triton's ensembles do); a call joining
	// several requests ends their turns as it starts.
	PassTurn bool
	// Streams says an EachFunc answers its requests through the
	// engine.Responses their contexts carry (a decoupled model): the
	// batcher's answer to each is only whether its call started it (no
	// outputs, nothing to check).
	Streams bool
	// Calls, when set, is told of every engine call with its requests'
	// contexts (request tracing). Nil costs nothing.
	Calls CallObserver
	// Ragged, when set, joins requests whose ragged inputs differ in shape
	// and makes the inputs that describe such a call (Triton's ragged
	// batching and batch inputs); see Ragged. It needs a batch axis: an
	// Unbatched batcher ignores it.
	Ragged *Ragged
	// StartAfter, when positive, forms no batch until that many requests
	// are queued, once; then the batcher works as configured (a test hook:
	// Triton's TRITONSERVER_DELAY_SCHEDULER, with which its QA suites
	// queue a known set of requests before the first batch is cut). A
	// Close still runs what is queued. CallerRuns does not apply until
	// then.
	StartAfter int
	// CallerRuns lets a request that finds the engine idle and nothing
	// queued run its engine call on the goroutine that submitted it,
	// instead of handing it to the worker and waiting to be handed the
	// answer back: two goroutine wake-ups fewer per request at low load
	// (what a server's CPU per request pays at one or a few clients).
	// Requests arriving meanwhile queue and batch as they would behind a
	// running call. It applies to one instance of a RunFunc (New or
	// NewPool with one run function) without PreferredSizes; with more
	// instances an idle one takes the next request as usual (a Python
	// model's EachFunc, PreferredSizes and several instances never lend).
	// Only a call expected to take at most a millisecond (at the pace of
	// the recent calls, whatever their shapes; none before the first) runs
	// so, because such a request returns ctx.Err() when its call ends if
	// ctx is done meanwhile, where a queued or handed-off request returns
	// at once. A panic of Stats or Calls during such a call reaches the
	// submitting goroutine (a server's recovery) instead of ending the
	// process, and the worker is given back.
	CallerRuns bool
}

// Defaults used by New for zero Config fields, and by DefaultConfig.
const (
	DefaultMaxBatchRows = 64
	DefaultMaxDelay     = time.Millisecond
	DefaultInstances    = 1
	DefaultMaxQueue     = 1024
)

// DefaultConfig returns the recommended settings: 64 rows, 1ms delay, one
// instance, 1024 queued requests.
func DefaultConfig() Config {
	return Config{MaxBatchRows: DefaultMaxBatchRows, MaxDelay: DefaultMaxDelay, Instances: DefaultInstances, MaxQueue: DefaultMaxQueue}
}

// QueueCapacity is the most requests that may wait (MaxQueue, or its
// default when unset).
func (c Config) QueueCapacity() int { return c.withDefaults().MaxQueue }

func (c Config) withDefaults() Config {
	if c.MaxBatchRows <= 0 {
		c.MaxBatchRows = DefaultMaxBatchRows
	}
	if c.MaxDelay < 0 {
		c.MaxDelay = 0
	}
	if c.Instances <= 0 {
		c.Instances = DefaultInstances
	}
	if c.MaxQueue <= 0 {
		c.MaxQueue = DefaultMaxQueue
	}
	c.PreferredSizes = sortedSizes(c.PreferredSizes)
	if !c.Unbatched { // a preferred size past MaxBatchRows could never be sent
		c.PreferredSizes = slices.DeleteFunc(c.PreferredSizes, func(n int) bool { return n > c.MaxBatchRows })
		if len(c.PreferredSizes) == 0 {
			c.PreferredSizes = nil
		}
	}
	c.MinRows = min(c.MinRows, c.MaxBatchRows)
	if c.MinRows <= 1 || c.Unbatched || c.MaxDelay <= 0 || c.PreferredSizes != nil {
		c.MinRows = 0
	}
	if q := &c.Queues; q.Levels > 0 && (q.DefaultLevel == 0 || q.DefaultLevel > q.Levels) {
		q.DefaultLevel = q.Levels // a default outside the levels: the lowest
	}
	return c
}

// Stats observes the Batcher, typically to feed Prometheus metrics. Both
// methods are called from the Batcher's goroutines, QueueDepth with an
// internal lock held: implementations must be fast, safe for concurrent use,
// and must not call back into the Batcher.
type Stats interface {
	// BatchRun reports one engine call: its rows and requests, how long its
	// oldest request waited in the queue, how long the call took, and its
	// error (nil on success). Per-request retries after a failed batch are
	// reported as calls of their own.
	BatchRun(rows, requests int, queueWait, inference time.Duration, err error)
	// QueueDepth reports the number of requests waiting whenever it changes.
	QueueDepth(n int)
}

// CallObserver is told of every engine call with the contexts of the
// requests it ran (telemetry.Observer: the spans of traced requests). Its
// method is called on the worker's goroutine after the call, before the
// requests are answered: it must be quick and must not keep ctxs, which
// the worker reuses.
type CallObserver interface {
	EngineCall(ctxs []context.Context, rows int, start time.Time, took time.Duration, err error)
}

// PaddedStats is a Stats told how many of a call's rows were padding
// (WithWhole): rows the engine computed that no request asked for, such as
// the sequence batcher's null requests, which Triton counts in a batch's
// size but not in its inference count. A call with padding is reported to
// it by BatchRunPadded instead of BatchRun (padding < rows).
type PaddedStats interface {
	BatchRunPadded(rows, padding, requests int, queueWait, inference time.Duration, err error)
}

// wholeKey is the context key of WithWhole.
type wholeKey struct{}

// WithWhole returns ctx for a request that runs as an engine call of its
// own, never joined with other requests (the sequence batcher's direct
// batches, formed slot by slot), of whose rows padding are padding
// (PaddedStats).
func WithWhole(ctx context.Context, padding int) context.Context {
	return context.WithValue(ctx, wholeKey{}, max(padding, 0))
}

type noStats struct{}

func (noStats) BatchRun(int, int, time.Duration, time.Duration, error) {}
func (noStats) QueueDepth(int)                                         {}

var (
	// ErrQueueFull is returned by Submit when MaxQueue requests are already
	// waiting. The HTTP layer answers 503 with Retry-After.
	ErrQueueFull = errors.New("batcher: queue full")
	// ErrClosed is returned by Submit after Close, and for queued requests
	// that Close had to abandon because its context expired.
	ErrClosed = errors.New("batcher: closed")
	// ErrPanic marks an engine call that panicked; the panic value follows
	// in the message.
	ErrPanic = errors.New("batcher: engine call panicked")
	// ErrBadOutput marks an engine call whose outputs cannot be split back
	// to the requests (an axis 0 that is not the rows sent, or a data length
	// that does not match the shape). The whole batch fails with it.
	ErrBadOutput = errors.New("batcher: engine output does not fit the batch")
)

// errAbandoned is what queued requests get when Close gives up waiting.
var errAbandoned = fmt.Errorf("%w: shut down before the request ran", ErrClosed)

// maxIdleGroups bounds how many empty shape groups are kept for reuse.
const maxIdleGroups = 256

// Batcher coalesces concurrent Submit calls into engine calls. Create it with
// New or NewPool and stop it with Close; its methods are safe for concurrent use.
type Batcher struct {
	cfg   Config
	stats Stats

	// base is the context of every engine call; it is cancelled when Close
	// gives up waiting, or once every worker has exited.
	base   context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	groups map[string]*group // by shape signature, including idle ones
	active []*group          // groups with queued requests
	queued int               // requests waiting, over all groups
	qrows  int               // rows waiting, over all groups
	// callNs and callRows are moving averages of recent engine calls' time
	// and rows: the service rate Submit estimates a new request's wait from.
	callNs, callRows atomic.Int64
	closed           bool
	waiting          bool // the gathering worker sleeps and wants a notify
	// parked is the lone worker while it sleeps with nothing queued and no
	// call running (Config.CallerRuns): a Submit may borrow it and run its
	// own request. lent says it is borrowed; the worker waits on returned
	// before it gathers again.
	parked   *worker
	lent     bool
	returned *sync.Cond // on mu

	depth  atomic.Int64  // copy of queued, for QueueDepth without the lock
	notify chan struct{} // capacity 1: wakes the gathering worker

	// gatherMu is held by the one worker gathering the next batch; timer
	// is used only by that worker.
	gatherMu sync.Mutex
	timer    *time.Timer

	running atomic.Int32  // engine calls in flight
	live    atomic.Int32  // workers still running
	done    chan struct{} // closed when the last worker exits

	reqs sync.Pool // *request
	// wholes numbers WithWhole requests: each has a group of its own.
	wholes atomic.Uint64

	// queueing says cfg.Queues asks for levels or policies; levelQueued
	// then counts the queued requests per level. maxPreferred is the
	// largest of cfg.PreferredSizes (0: none). holdIdle says a batch may
	// wait while no engine call runs (PreferredSizes or MinRows).
	queueing     bool
	levelQueued  map[uint64]int
	maxPreferred int
	holdIdle     bool
	order        *order // Config.PreserveOrdering; nil without
	// startAfter is Config.StartAfter until that many requests have been
	// queued, then 0 (guarded by mu).
	startAfter int
}

// group is the queue of requests sharing one shape signature.
type group struct {
	key  string
	reqs []*request // arrival order (by level first, with Config.Queues)
	rows int        // total rows in reqs
	idx  int        // position in Batcher.active, -1 when empty
	// whole: a WithWhole request's own group, dropped once empty.
	whole bool
	// newest is when its newest request was queued (kept while it is
	// active; a request leaving does not move it back).
	newest time.Time
}

// request is one Submit call. Fields other than taken are written by Submit
// before queueing and by the worker before it signals done.
type request struct {
	ctx      context.Context
	inputs   []engine.Tensor
	rows     int
	padding  int // rows of rows that are padding (WithWhole)
	enqueued time.Time
	g        *group
	taken    bool          // guarded by Batcher.mu: in a worker's batch
	level    uint64        // priority level (Config.Queues; 0 without levels)
	delayed  bool          // guarded by Batcher.mu: past its timeout, under a DELAY policy
	timeout  time.Duration // queue timeout (0: none)
	seq      uint64        // its place in Config.PreserveOrdering's order (0: none)
	done     chan struct{} // capacity 1; exactly one send per use
	out      []engine.Tensor
	err      error
	timing   Timing // set by the worker before it signals done
}

// Timing is where one request's time went inside the Batcher.
type Timing struct {
	// Queue is from Submit to the start of the engine call that ran it.
	Queue time.Duration
	// Infer is that engine call, shared with the requests batched with it.
	Infer time.Duration
	// BatchRows is the rows of that engine call, this request's among them.
	BatchRows int
}

// worker holds one engine worker's engine and reusable buffers.
type worker struct {
	run    RunFunc  // this worker's engine (NewPool: one model instance each)
	each   EachFunc // or its engine that takes requests (NewEachPool)
	batch  []*request
	one    [1]*request
	inputs []engine.Tensor
	bufs   [][]byte
	shapes [][]int64
	ctxs   []context.Context // Config.Calls' argument, reused
}

// New starts a Batcher with cfg.Instances workers all calling run. stats
// may be nil. The workers run until Close; run must not be nil.
func New(run RunFunc, cfg Config, stats Stats) *Batcher {
	if run == nil {
		panic("batcher.New: nil RunFunc")
	}
	cfg = cfg.withDefaults()
	runs := make([]RunFunc, cfg.Instances)
	for i := range runs {
		runs[i] = run
	}
	return NewPool(runs, cfg, stats)
}

// NewPool starts a Batcher with one worker per run function, each calling
// its own (one model instance per worker, as Triton's instance groups do);
// cfg.Instances is set to len(runs). The workers run until Close.
func NewPool(runs []RunFunc, cfg Config, stats Stats) *Batcher {
	if len(runs) == 0 || slices.ContainsFunc(runs, func(r RunFunc) bool { return r == nil }) {
		panic("batcher.NewPool: no RunFunc, or a nil one")
	}
	workers := make([]*worker, len(runs))
	for i, run := range runs {
		workers[i] = &worker{run: run}
	}
	return start(workers, cfg, stats)
}

// NewEachPool starts a Batcher whose workers each call their own EachFunc:
// a batch's requests are grouped as NewPool groups them (same shapes, up
// to MaxBatchRows rows, MaxDelay) but not joined, and each request gets
// its own answer.
func NewEachPool(runs []EachFunc, cfg Config, stats Stats) *Batcher {
	if len(runs) == 0 || slices.ContainsFunc(runs, func(r EachFunc) bool { return r == nil }) {
		panic("batcher.NewEachPool: no EachFunc, or a nil one")
	}
	workers := make([]*worker, len(runs))
	for i, run := range runs {
		workers[i] = &worker{each: run}
	}
	return start(workers, cfg, stats)
}

// start runs a Batcher with the given workers.
func start(workers []*worker, cfg Config, stats Stats) *Batcher {
	cfg.Instances = len(workers)
	cfg = cfg.withDefaults()
	if stats == nil {
		stats = noStats{}
	}
	base, cancel := context.WithCancel(context.Background())
	b := &Batcher{
		cfg:    cfg,
		stats:  stats,
		base:   base,
		cancel: cancel,
		groups: make(map[string]*group),
		notify: make(chan struct{}, 1),
		timer:  time.NewTimer(time.Hour),
		done:   make(chan struct{}),
	}
	b.timer.Stop()
	if len(cfg.PreferredSizes) > 0 {
		b.maxPreferred = cfg.PreferredSizes[len(cfg.PreferredSizes)-1]
	}
	b.holdIdle = b.maxPreferred > 0 || cfg.MinRows > 0
	b.startAfter = max(0, cfg.StartAfter)
	if b.queueing = cfg.Queues.enabled(); b.queueing {
		b.levelQueued = make(map[uint64]int)
	}
	if cfg.PreserveOrdering && !cfg.Streams {
		b.order = newOrder()
	}
	b.returned = sync.NewCond(&b.mu)
	b.reqs.New = func() any { return &request{done: make(chan struct{}, 1)} }
	b.live.Store(int32(cfg.Instances))
	for _, w := range workers {
		go b.work(w)
	}
	return b
}

// Config returns the settings in effect, defaults filled in.
func (b *Batcher) Config() Config { return b.cfg }

// QueueDepth is the number of requests waiting for an engine call.
func (b *Batcher) QueueDepth() int { return int(b.depth.Load()) }

// Submit queues one request of one or more rows and waits for its outputs.
// The rows are inputs[0].Shape[0]; every input must share that batch size
// and hold exactly the bytes its shape needs (otherwise an
// *engine.InputError). With Config.Unbatched the request is one row whatever
// its shapes, and only the bytes are checked. Submit does not copy inputs: the caller must leave
// them untouched until Submit returns.
//
// The returned tensors belong to the caller: each is a row range of an output
// the engine allocated for this call (capacity clipped, so appending cannot
// reach a neighbour's rows), or the engine's output itself when the request
// ran alone. Nothing in the Batcher reads or writes them afterwards.
//
// Submit fails at once with ErrClosed after Close and with ErrQueueFull when
// MaxQueue requests are waiting. When ctx is done, Submit returns ctx.Err()
// promptly, whether the request is queued (it is then removed and never run)
// or already running (its result is discarded); one running on its own
// goroutine (Config.CallerRuns, calls of at most about a millisecond)
// returns ctx.Err() when that call ends.
func (b *Batcher) Submit(ctx context.Context, inputs []engine.Tensor) ([]engine.Tensor, error) {
	out, _, err := b.SubmitTimed(ctx, inputs)
	return out, err
}

// SubmitTimed is Submit, also returning where the request's time went
// (zero when it did not reach an engine call).
func (b *Batcher) SubmitTimed(ctx context.Context, inputs []engine.Tensor) ([]engine.Tensor, Timing, error) {
	rows, err := checkInputs(inputs, b.cfg.Unbatched)
	if err != nil {
		return nil, Timing{}, err
	}
	return b.submit(ctx, inputs, rows)
}

// SubmitChecked is SubmitTimed for inputs the caller has checked against
// the model with engine.Model.CheckInputs, which returned rows (the common
// axis 0, or 1 for an unbatched model): the batcher relies on that check
// instead of walking the inputs again.
func (b *Batcher) SubmitChecked(ctx context.Context, inputs []engine.Tensor, rows int64) ([]engine.Tensor, Timing, error) {
	if b.cfg.Unbatched { // whole tensors, one request: the batcher's own count
		rows = 1
	}
	if rows < 1 || (len(inputs) == 0 && !b.cfg.Unbatched) || rows > math.MaxInt32 {
		return nil, Timing{}, &engine.InputError{Msg: fmt.Sprintf("%d rows: check the inputs with engine.Model.CheckInputs first", rows)}
	}
	return b.submit(ctx, inputs, int(rows))
}

func (b *Batcher) submit(ctx context.Context, inputs []engine.Tensor, rows int) ([]engine.Tensor, Timing, error) {
	if err := ctx.Err(); err != nil {
		return nil, Timing{}, err
	}
	tn, err := awaitTurn(ctx)
	if err != nil {
		return nil, Timing{}, err
	}
	if b.ragged() && len(b.cfg.Ragged.Made) > 0 {
		if err := b.cfg.Ragged.checkRequest(inputs); err != nil {
			return nil, Timing{}, err
		}
	}
	var kb [128]byte
	key := kb[:0] // unbatched: one queue, whatever the shapes
	if !b.cfg.Unbatched {
		key = appendSignature(key, inputs, b.cfg.Ragged)
	}
	padding, whole := ctx.Value(wholeKey{}).(int)
	if whole { // a key no other request has: a group, and a call, of its own
		key = binary.AppendUvarint(append(key, 0xff), b.wholes.Add(1))
	}

	r := b.reqs.Get().(*request)
	r.ctx, r.inputs, r.rows, r.taken, r.padding = ctx, inputs, rows, false, padding
	r.enqueued = time.Now()

	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.putRequest(r)
		return nil, Timing{}, ErrClosed
	}
	if b.queueing { // the level's own bound first: its refusal is Triton's sentence
		if err := b.admitLocked(ctx, r); err != nil {
			b.mu.Unlock()
			b.putRequest(r)
			return nil, Timing{}, err
		}
	}
	if b.queued >= b.cfg.MaxQueue {
		n := b.queued
		b.mu.Unlock()
		b.putRequest(r)
		return nil, Timing{}, fmt.Errorf("%w: %d requests waiting (MaxQueue)", ErrQueueFull, n)
	}
	if wait, left, late := b.lateLocked(ctx, rows); late {
		err := fmt.Errorf("%w: the %d rows waiting would take about %s, longer than the %s this request has left",
			ErrQueueFull, b.qrows, wait.Round(time.Millisecond), left.Round(time.Millisecond))
		b.mu.Unlock()
		b.putRequest(r)
		return nil, Timing{}, err
	}
	if w := b.parked; w != nil && b.queued == 0 && b.quick(rows) { // parked: no call runs
		if !b.cfg.PassTurn {
			tn.taken()
		}
		return b.runHere(w, r)
	}
	g := b.groups[string(key)]
	if g == nil {
		g = &group{key: string(key), idx: -1, whole: whole}
		b.groups[g.key] = g
	}
	newGroup := g.idx < 0 // another shape: the batches waiting may go now
	if newGroup {
		g.idx = len(b.active)
		b.active = append(b.active, g)
	}
	wasEmpty := b.queued == 0
	b.enqueueLocked(g, r)
	g.rows += rows
	b.qrows += rows
	r.g = g
	b.setQueuedLocked(b.queued + 1)
	// A sleeping gatherer only needs waking when there was nothing to wait
	// for or this group just filled up; otherwise its timer already fires
	// at the earliest deadline.
	wake := b.waiting && (wasEmpty || g.rows >= b.cfg.MaxBatchRows || b.preferredLocked(g) || b.minRowsLocked(g) || (newGroup && len(b.active) > 1) || b.startAfter > 0)
	if wake {
		b.waiting = false
	}
	timeout := r.timeout
	b.mu.Unlock()
	if !b.cfg.PassTurn {
		tn.taken()
	}
	if wake {
		b.wake()
	}

	var expired <-chan time.Time
	if timeout > 0 { // a queue policy's timeout
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	for {
		select {
		case <-r.done:
			out, t, err := r.out, r.timing, r.err
			seq := r.seq // numbered when its batch was taken (PreserveOrdering)
			b.putRequest(r)
			if seq != 0 { // answered after every request taken before it
				werr := b.order.wait(ctx, b.base, seq)
				b.order.finish(seq)
				if werr != nil {
					return nil, Timing{}, werr
				}
			}
			return out, t, err
		case <-ctx.Done():
			return nil, Timing{}, b.abandon(r, ctx.Err())
		case <-expired:
			expired = nil
			if err := b.expire(r); err != nil {
				return nil, Timing{}, err
			}
		}
	}
}

// callerRunsMax is the longest engine call Config.CallerRuns runs on a
// caller's goroutine, at the pace of the recent calls: a longer one runs
// on the worker, so that its caller is still answered at its deadline
// while the call runs. Below it a hand-off's wake-ups are a large part of
// a request's cost; above it, a small one.
const callerRunsMax = time.Millisecond

// quick reports whether an engine call of rows is expected to take at most
// callerRunsMax, at the pace of the recent calls (as lateLocked reckons:
// a call of up to the usual rows takes the usual time; false before the
// first call).
func (b *Batcher) quick(rows int) bool {
	ns, per := b.callNs.Load(), b.callRows.Load()
	if ns <= 0 || per <= 0 || ns > int64(callerRunsMax) {
		return false
	}
	return int64(rows) <= per || (int64(rows)+per-1)/per <= int64(callerRunsMax)/ns
}

// runHere runs r on the caller's goroutine with the parked worker w
// (Config.CallerRuns), then gives w back. Called with b.mu held; it
// releases it.
func (b *Batcher) runHere(w *worker, r *request) ([]engine.Tensor, Timing, error) {
	b.parked, b.lent = nil, true
	r.taken = true
	b.running.Add(1)
	b.mu.Unlock()
	b.runLent(w, r)
	<-r.done // runBatch has answered r
	out, t, err := r.out, r.timing, r.err
	if err == nil && r.ctx.Err() != nil {
		out, t, err = nil, Timing{}, r.ctx.Err() // as a handed-off request's: the result is discarded
	}
	b.putRequest(r)
	return out, t, err
}

// runLent runs r as w's batch and gives w back, even if the run panics.
func (b *Batcher) runLent(w *worker, r *request) {
	defer func() {
		clear(w.batch)
		w.batch = w.batch[:0]
		b.running.Add(-1)
		b.mu.Lock()
		b.lent = false
		if b.waiting && b.queued == 0 && !b.closed {
			b.parked = w // still asleep with nothing to do: lend it again
		}
		b.returned.Broadcast() // a worker woken meanwhile waits for w
		b.mu.Unlock()
	}()
	w.batch = append(w.batch[:0], r)
	b.runBatch(w)
}

// abandon removes a cancelled request from its queue, unless a worker has
// already taken it (the worker then drops or discards it). It returns err.
func (b *Batcher) abandon(r *request, err error) error {
	b.mu.Lock()
	if r.taken {
		seq := r.seq
		b.mu.Unlock()
		if seq != 0 {
			b.order.finish(seq) // its answer will not be given: the next in order may go
		}
		return err // the worker still holds r: leave it to the GC
	}
	b.removeLocked(r)
	// What is left may now be ready (a preferred size, an older head).
	wake := b.waiting && (b.holdIdle || b.queueing)
	if wake {
		b.waiting = false
	}
	b.mu.Unlock()
	if wake {
		b.wake()
	}
	b.putRequest(r)
	return err
}

// removeLocked takes r, which no worker has taken, out of its queue.
func (b *Batcher) removeLocked(r *request) {
	g := r.g
	for i, q := range g.reqs {
		if q == r {
			copy(g.reqs[i:], g.reqs[i+1:])
			g.reqs[len(g.reqs)-1] = nil
			g.reqs = g.reqs[:len(g.reqs)-1]
			break
		}
	}
	g.rows -= r.rows
	b.qrows -= r.rows
	if len(g.reqs) == 0 {
		b.deactivateLocked(g)
	}
	b.unqueuedLocked(r)
	b.setQueuedLocked(b.queued - 1)
}

func (b *Batcher) putRequest(r *request) {
	r.ctx, r.inputs, r.g, r.out, r.err, r.timing = nil, nil, nil, nil, nil, Timing{}
	r.level, r.delayed, r.timeout, r.seq = 0, false, 0, 0
	b.reqs.Put(r)
}

// lateLocked says whether a request of rows, queued now behind what is
// waiting, would still be waiting when ctx's deadline passes, by the recent
// engine calls' pace: queued rows over rows per call, times the time per
// call, shared by the workers, plus its own call. Such a request is refused
// at once (a fast 503 the client can retry elsewhere) instead of taking a
// place in the queue only to time out there: under sustained overload that
// keeps the queue to what can be served in time, so the engine spends its
// time on requests that still have a client. With nothing waiting, or no
// call measured yet, or no deadline, nothing is refused.
func (b *Batcher) lateLocked(ctx context.Context, rows int) (wait, left time.Duration, late bool) {
	dl, ok := ctx.Deadline()
	ns, per := b.callNs.Load(), b.callRows.Load()
	if !ok || b.qrows == 0 || ns == 0 || per == 0 {
		return 0, 0, false
	}
	calls := (int64(b.qrows) + per - 1) / per // the calls ahead of this request
	wait = time.Duration(calls*ns/int64(b.cfg.Instances) + ns)
	left = time.Until(dl)
	return wait, left, wait > left
}

// observeCall folds one engine call into the moving averages lateLocked
// reads (weight 1/8 for the new call).
func (b *Batcher) observeCall(rows int, took time.Duration) {
	for _, c := range []struct {
		avg *atomic.Int64
		v   int64
	}{{&b.callNs, int64(took)}, {&b.callRows, int64(max(rows, 1))}} {
		old := c.avg.Load()
		if old == 0 {
			c.avg.Store(c.v)
		} else {
			c.avg.Store(old + (c.v-old)/8)
		}
	}
}

func (b *Batcher) setQueuedLocked(n int) {
	b.queued = n
	b.depth.Store(int64(n))
	b.stats.QueueDepth(n)
}

func (b *Batcher) wake() {
	select {
	case b.notify <- struct{}{}:
	default:
	}
}

// Close stops accepting requests (Submit then returns ErrClosed), lets every
// queued and running request finish, and returns nil once the workers have
// exited. Queued requests no longer wait for MaxDelay. If ctx expires first,
// Close cancels the context of running engine calls, fails the requests still
// queued with ErrClosed, and returns an error wrapping ctx.Err(). Close may
// be called more than once.
func (b *Batcher) Close(ctx context.Context) error {
	b.mu.Lock()
	b.closed = true
	wake := b.waiting
	b.waiting = false
	b.mu.Unlock()
	if wake {
		b.wake()
	}
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
		b.cancel()
		return fmt.Errorf("batcher: close: waiting for %d queued requests and running engine calls: %w", b.QueueDepth(), ctx.Err())
	}
}

// work is one engine worker: gather a batch, run it, repeat until closed and
// drained. While a batch runs, the running count is raised; when the last
// running call ends, a gatherer waiting out MaxDelay is woken, because an
// idle engine should not wait.
func (b *Batcher) work(w *worker) {
	defer func() {
		if b.live.Add(-1) == 0 {
			b.cancel()
			close(b.done)
		}
	}()
	for b.gather(w) {
		b.running.Add(1)
		b.runBatch(w)
		if b.running.Add(-1) == 0 {
			b.wake()
		}
		clear(w.batch)
		w.batch = w.batch[:0]
	}
}

// gather waits until a group is ready and moves its next batch into
// w.batch. It returns false when the Batcher is closed and nothing is queued.
func (b *Batcher) gather(w *worker) bool {
	b.gatherMu.Lock()
	defer b.gatherMu.Unlock()
	b.mu.Lock()
	// A request that would start at once anyway may run on w itself.
	lendable := b.cfg.CallerRuns && b.cfg.Instances == 1 && w.each == nil && !b.holdIdle && b.order == nil && b.startAfter <= 0
	for {
		for b.lent {
			b.returned.Wait()
		}
		g, wait := b.pickLocked()
		if g != nil {
			b.takeLocked(g, w)
			b.mu.Unlock()
			return true
		}
		if b.closed { // closed groups are always ready, so nothing is queued
			b.mu.Unlock()
			return false
		}
		b.waiting = true
		if lendable && wait == 0 && b.running.Load() == 0 {
			b.parked = w // nothing queued: a Submit may run on w itself
		}
		b.mu.Unlock()
		if wait > 0 {
			b.timer.Reset(wait)
			select {
			case <-b.notify:
			case <-b.timer.C:
			}
			b.timer.Stop()
		} else {
			<-b.notify
		}
		b.mu.Lock()
		b.waiting = false
		b.parked = nil
	}
}

// pickLocked returns the ready group whose head request is oldest, or nil and
// how long until the first one becomes ready (0 when nothing is queued).
func (b *Batcher) pickLocked() (*group, time.Duration) {
	if len(b.active) == 0 {
		return nil, 0
	}
	if b.startAfter > 0 && !b.closed {
		if b.queued < b.startAfter {
			return nil, 0 // woken by every Submit until then
		}
		b.startAfter = 0
	}
	immediate := b.closed || b.cfg.MaxDelay <= 0 || b.cfg.Unbatched || (b.running.Load() == 0 && !b.holdIdle)
	var now time.Time
	if !immediate {
		now = time.Now()
	}
	// A batch goes when a request that cannot join it (another shape)
	// was queued after its oldest, as Triton's pending batch does: the
	// newest request of every other group.
	var newest, second time.Time
	var newestG *group
	if !immediate && len(b.active) > 1 {
		for _, g := range b.active {
			if g.newest.After(newest) {
				second, newest, newestG = newest, g.newest, g
			} else if g.newest.After(second) {
				second = g.newest
			}
		}
	}
	var best *group
	var wait time.Duration
	for _, g := range b.active {
		head := g.reqs[0]
		ready := immediate || g.rows >= b.cfg.MaxBatchRows || b.preferredLocked(g) || b.minRowsLocked(g)
		if !ready {
			oldest := b.oldestLocked(g) // a walk of g's queue with levels: once
			if newestG != nil {
				other := newest
				if newestG == g {
					other = second
				}
				ready = other.After(oldest)
			}
			switch left := b.cfg.MaxDelay - now.Sub(oldest); {
			case ready: // another shape came after it
			case left <= 0:
				ready = true
			case wait == 0 || left < wait:
				wait = left
			}
		}
		if ready && (best == nil || b.sooner(head, best.reqs[0])) {
			best = g
		}
	}
	if best != nil {
		return best, 0
	}
	return nil, wait
}

// sooner reports whether the ready queue headed by a runs before the one
// headed by b: the higher priority level, else the older request.
func (b *Batcher) sooner(a, c *request) bool {
	if b.queueing && (a.level != c.level || a.delayed != c.delayed) {
		return before(a, c)
	}
	return a.enqueued.Before(c.enqueued)
}

// takeLocked moves the longest prefix of g's queue that fits in MaxBatchRows
// (at least one request, however large; exactly one when Unbatched) into
// w.batch. With PreferredSizes it is the requests adding up to a preferred
// size when there are such, else at most the largest size's rows, or,
// once the oldest has waited MaxDelay, MaxBatchRows (Triton's: a batch
// past its delay grows to the model's limit).
func (b *Batcher) takeLocked(g *group, w *worker) {
	limit := b.cfg.MaxBatchRows
	if b.maxPreferred > 0 && !b.cfg.Unbatched {
		if _, rows := b.preferredPrefix(g); rows > 0 {
			limit = rows
		} else if b.cfg.MaxDelay <= 0 || time.Since(b.oldestLocked(g)) < b.cfg.MaxDelay {
			limit = min(limit, b.maxPreferred)
		}
	}
	rows, n := 0, 0
	for n < len(g.reqs) {
		r := g.reqs[n]
		if n > 0 && (b.cfg.Unbatched || rows+r.rows > limit) {
			break
		}
		rows += r.rows
		r.taken = true
		if b.order != nil { // answers leave in the order batches are taken, as Triton's
			r.seq = b.order.take()
		}
		b.unqueuedLocked(r)
		n++
	}
	w.batch = append(w.batch[:0], g.reqs[:n]...)
	m := copy(g.reqs, g.reqs[n:])
	clear(g.reqs[m:])
	g.reqs = g.reqs[:m]
	g.rows -= rows
	b.qrows -= rows
	if m == 0 {
		b.deactivateLocked(g)
	}
	b.setQueuedLocked(b.queued - n)
}

func (b *Batcher) deactivateLocked(g *group) {
	last := len(b.active) - 1
	b.active[g.idx] = b.active[last]
	b.active[g.idx].idx = g.idx
	b.active[last] = nil
	b.active = b.active[:last]
	g.idx = -1
	g.newest = time.Time{}
	if g.whole || len(b.groups) > maxIdleGroups {
		delete(b.groups, g.key)
	}
}

// runBatch runs w.batch: drops cancelled requests, makes one engine call,
// splits the outputs, and on failure retries each request alone.
func (b *Batcher) runBatch(w *worker) {
	live := w.batch[:0]
	for _, r := range w.batch {
		if err := r.ctx.Err(); err != nil {
			finish(r, nil, err) // its Submit has returned or is returning
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	if b.base.Err() != nil {
		for _, r := range live {
			finish(r, nil, errAbandoned)
		}
		return
	}
	if w.each != nil {
		b.runEach(w, live)
		return
	}
	outs, err := b.runGroup(w, live)
	switch {
	case err == nil:
		b.deliver(live, outs)
		return
	case len(live) == 1 || errors.Is(err, ErrBadOutput) || b.base.Err() != nil:
		for _, r := range live {
			finish(r, nil, err)
		}
		return
	}
	// Several requests failed together: retry each alone so that one bad
	// request cannot fail the others.
	for _, r := range live {
		if e := r.ctx.Err(); e != nil {
			finish(r, nil, e)
			continue
		}
		if b.base.Err() != nil {
			finish(r, nil, errAbandoned)
			continue
		}
		w.one[0] = r
		outs, err := b.runGroup(w, w.one[:])
		if err == nil {
			b.deliver(w.one[:], outs)
		} else {
			finish(r, nil, err)
		}
		w.one[0] = nil
	}
}

// runGroup makes one engine call for reqs (same shape group) and checks its
// outputs. It reports the call to Stats.
func (b *Batcher) runGroup(w *worker, reqs []*request) ([]engine.Tensor, error) {
	rows := 0
	for _, r := range reqs {
		rows += r.rows
	}
	start := time.Now()
	queueWait := start.Sub(reqs[0].enqueued)
	var in, outs []engine.Tensor
	var err error
	switch {
	case b.ragged():
		if in, err = b.raggedConcat(reqs, rows); err != nil { // not ErrBadOutput: each request is retried alone
			return nil, fmt.Errorf("batcher: joining %d requests: %w", len(reqs), err)
		}
	case len(reqs) == 1:
		in = reqs[0].inputs
	default:
		in = w.concat(reqs, rows)
	}
	b.passTurns(reqs)
	ctx := b.base
	if b.cfg.RequestContext && len(reqs) == 1 {
		// The request's context, cancelled too when the batcher's is (a
		// drain that runs out of time).
		rctx, cancel := context.WithCancel(reqs[0].ctx)
		stop := context.AfterFunc(b.base, cancel)
		defer func() { stop(); cancel() }()
		ctx = rctx
	}
	outs, err = b.call(ctx, w, in)
	inference := time.Since(start)
	b.observeCall(rows, inference)
	for _, r := range reqs {
		r.timing = Timing{Queue: start.Sub(r.enqueued), Infer: inference, BatchRows: rows}
	}
	if err == nil {
		err = checkOutputs(outs, rows, b.cfg.Unbatched, b.scattered())
	}
	if err == nil && b.ragged() {
		err = b.cfg.Ragged.checkScattered(outs, reqs)
	}
	padding := 0
	for _, r := range reqs {
		padding += r.padding
	}
	if ps, ok := b.stats.(PaddedStats); ok && padding > 0 {
		ps.BatchRunPadded(rows, padding, len(reqs), queueWait, inference, err)
	} else {
		b.stats.BatchRun(rows, len(reqs), queueWait, inference, err)
	}
	if b.cfg.Calls != nil {
		for _, r := range reqs {
			w.ctxs = append(w.ctxs, r.ctx)
		}
		b.cfg.Calls.EngineCall(w.ctxs, rows, start, inference, err)
		clear(w.ctxs)
		w.ctxs = w.ctxs[:0]
	}
	if err != nil {
		return nil, fmt.Errorf("batcher: engine call of %d rows from %d requests: %w", rows, len(reqs), err)
	}
	return outs, nil
}

// call runs w's engine, turning a panic into an error.
func (b *Batcher) call(ctx context.Context, w *worker, in []engine.Tensor) (outs []engine.Tensor, err error) {
	defer func() {
		if p := recover(); p != nil {
			outs, err = nil, fmt.Errorf("%w: %v", ErrPanic, p)
		}
	}()
	return w.run(ctx, in)
}

// runEach makes one engine call of reqs as separate requests (an
// EachFunc) and answers each with its own outputs or error.
func (b *Batcher) runEach(w *worker, reqs []*request) {
	rows := 0
	ins := make([][]engine.Tensor, len(reqs))
	ctxs := make([]context.Context, len(reqs))
	for i, r := range reqs {
		rows += r.rows
		ins[i], ctxs[i] = r.inputs, r.ctx
	}
	start := time.Now()
	queueWait := start.Sub(reqs[0].enqueued)
	b.passTurns(reqs)
	ctx := b.base
	if b.cfg.RequestContext && len(reqs) == 1 {
		rctx, cancel := context.WithCancel(reqs[0].ctx)
		stop := context.AfterFunc(b.base, cancel)
		defer func() { stop(); cancel() }()
		ctx = rctx
	}
	outs, errs, err := b.callEach(ctx, w, ctxs, ins)
	inference := time.Since(start)
	b.observeCall(rows, inference)
	for _, r := range reqs {
		r.timing = Timing{Queue: start.Sub(r.enqueued), Infer: inference, BatchRows: rows}
	}
	if err == nil && (len(outs) != len(reqs) || len(errs) != len(reqs)) {
		err = fmt.Errorf("%w: %d answers to %d requests", ErrBadOutput, min(len(outs), len(errs)), len(reqs))
	}
	b.stats.BatchRun(rows, len(reqs), queueWait, inference, err)
	if b.cfg.Calls != nil {
		b.cfg.Calls.EngineCall(ctxs, rows, start, inference, err) // the requests' contexts, collected above
	}
	for i, r := range reqs {
		switch {
		case err != nil:
			finish(r, nil, fmt.Errorf("batcher: engine call of %d rows from %d requests: %w", rows, len(reqs), err))
		case errs[i] != nil:
			finish(r, nil, errs[i])
		case b.cfg.Streams: // answered through its engine.Responses
			finish(r, nil, nil)
		default:
			if e := checkOutputs(outs[i], r.rows, true, nil); e != nil {
				finish(r, nil, e)
				continue
			}
			finish(r, outs[i], nil)
		}
	}
}

// callEach runs w's EachFunc, turning a panic into an error.
func (b *Batcher) callEach(ctx context.Context, w *worker, ctxs []context.Context, ins [][]engine.Tensor) (outs [][]engine.Tensor, errs []error, err error) {
	defer func() {
		if p := recover(); p != nil {
			outs, errs, err = nil, nil, fmt.Errorf("%w: %v", ErrPanic, p)
		}
	}()
	return w.each(ctx, ctxs, ins)
}

// concat copies the inputs of reqs, input by input, into w's reusable
// buffers. The result is valid until the next concat on w. Rows are
// contiguous in Data for every dtype (String's serialized elements
// included: see engine.Tensor), so joining is concatenating.
func (w *worker) concat(reqs []*request, rows int) []engine.Tensor {
	n := len(reqs[0].inputs)
	for len(w.inputs) < n {
		w.inputs = append(w.inputs, engine.Tensor{})
		w.bufs = append(w.bufs, nil)
		w.shapes = append(w.shapes, nil)
	}
	for j := 0; j < n; j++ {
		total := 0
		for _, r := range reqs {
			total += len(r.inputs[j].Data)
		}
		buf := w.bufs[j]
		if cap(buf) < total {
			buf = alignedBytes(max(total, 2*cap(buf)))
			w.bufs[j] = buf
		}
		buf = buf[:total]
		off := 0
		for _, r := range reqs {
			off += copy(buf[off:], r.inputs[j].Data)
		}
		proto := reqs[0].inputs[j]
		shape := append(w.shapes[j][:0], proto.Shape...)
		shape[0] = int64(rows)
		w.shapes[j] = shape
		w.inputs[j] = engine.Tensor{DType: proto.DType, Shape: shape, Data: buf}
	}
	return w.inputs[:n]
}

// ragged reports whether engine calls join requests as Config.Ragged says.
func (b *Batcher) ragged() bool { return b.cfg.Ragged != nil && !b.cfg.Unbatched }

// scattered is Config.Ragged when its outputs may be scattered, else nil.
func (b *Batcher) scattered() *Ragged {
	if b.ragged() {
		return b.cfg.Ragged
	}
	return nil
}

// deliver hands request i rows [off_i, off_i+rows_i) of every output, or
// of a scattered one (Config.Ragged) the next elements in the shape of its
// own input. The parts share the engine's freshly allocated outputs, which
// nothing else touches, so they stay valid and belong to the callers.
// checkOutputs (and Ragged.checkScattered) have checked that every output
// splits so.
func (b *Batcher) deliver(reqs []*request, outs []engine.Tensor) {
	rg := b.scattered()
	if len(reqs) == 1 && rg == nil {
		finish(reqs[0], outs, nil)
		return
	}
	rows := make([]int, len(reqs))
	for i, r := range reqs {
		rows[i] = r.rows
	}
	res := make([][]engine.Tensor, len(reqs))
	for i := range res {
		res[i] = make([]engine.Tensor, len(outs))
	}
	for k, t := range outs {
		if t.Absent() {
			continue // each request's answer leaves it out too
		}
		var parts []engine.Tensor
		var err error
		if src := rg.scatterOf(k); src >= 0 {
			shapes := make([][]int64, len(reqs))
			for i, r := range reqs {
				shapes[i] = r.inputs[src].Shape
			}
			parts, err = engine.SplitShapes(t, shapes)
		} else {
			parts, err = engine.SplitRows(t, rows)
		}
		if err != nil { // checkOutputs and checkScattered make this unreachable
			for _, r := range reqs {
				finish(r, nil, fmt.Errorf("%w: output %d: %v", ErrBadOutput, k, err))
			}
			return
		}
		for i, p := range parts {
			res[i][k] = p
		}
	}
	for i, r := range reqs {
		finish(r, res[i], nil)
	}
}

// finish completes r. It must be the worker's last use of r: Submit may reuse
// it as soon as the send lands.
func finish(r *request, out []engine.Tensor, err error) {
	r.out, r.err = out, err
	r.done <- struct{}{}
}

// checkInputs validates what the batcher relies on and returns the rows: the
// common axis 0, or 1 for an unbatched model's whole tensors.
func checkInputs(inputs []engine.Tensor, unbatched bool) (int, error) {
	if len(inputs) == 0 && !unbatched { // an unbatched model may take none (a Python model's)
		return 0, &engine.InputError{Msg: "no inputs"}
	}
	rows := int64(-1)
	if unbatched {
		rows = 1
	}
	for i, t := range inputs {
		if t.Absent() { // an optional input left out (the model's check allowed it)
			continue
		}
		switch {
		case unbatched:
		case len(t.Shape) == 0:
			return 0, &engine.InputError{Msg: fmt.Sprintf("input %d needs a batch axis", i), Received: "a scalar"}
		case rows < 0:
			rows = t.Shape[0]
		case t.Shape[0] != rows:
			return 0, &engine.InputError{Msg: fmt.Sprintf("input %d: batch size differs from the first input's", i),
				Expected: fmt.Sprint(rows), Received: fmt.Sprint(t.Shape[0])}
		}
		if err := t.Check(); err != nil {
			return 0, &engine.InputError{Msg: fmt.Sprintf("input %d: %v", i, err)}
		}
	}
	if rows == 0 {
		return 0, &engine.InputError{Msg: "empty batch: send at least one row"}
	}
	if rows < 0 {
		return 0, &engine.InputError{Msg: "every input was left out: send at least one"}
	}
	return int(rows), nil
}

// checkOutputs verifies that every output is well formed (engine.Tensor.Check:
// the bytes, or for String the elements, its shape needs) and, unless
// unbatched (whole tensors, never split) or scattered by rg, can be split
// into rows.
func checkOutputs(outs []engine.Tensor, rows int, unbatched bool, rg *Ragged) error {
	if len(outs) == 0 {
		return fmt.Errorf("%w: the engine returned no outputs", ErrBadOutput)
	}
	for i, t := range outs {
		if t.Absent() { // an output a Python model's response left out: left out of every request's answer
			continue
		}
		if !unbatched && rg.scatterOf(i) < 0 && (len(t.Shape) == 0 || t.Shape[0] != int64(rows)) {
			return fmt.Errorf("%w: output %d has shape %s; its axis 0 must be the %d rows sent",
				ErrBadOutput, i, engine.FormatShape(t.Shape), rows)
		}
		if err := t.Check(); err != nil {
			return fmt.Errorf("%w: output %d: %v", ErrBadOutput, i, err)
		}
	}
	return nil
}

// appendSignature appends the key of the shape group of inputs: count, then
// for each input its dtype, rank and non-batch dims (but a ragged input's,
// rg's, which may differ within a group).
func appendSignature(dst []byte, inputs []engine.Tensor, rg *Ragged) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(inputs)))
	for j, t := range inputs {
		dst = binary.AppendUvarint(dst, uint64(t.DType)) // Invalid for an absent input: only like requests group
		dst = binary.AppendUvarint(dst, uint64(len(t.Shape)))
		if len(t.Shape) == 0 || rg.raggedAt(j) {
			continue
		}
		for _, d := range t.Shape[1:] {
			dst = binary.AppendUvarint(dst, uint64(d))
		}
	}
	return dst
}

// alignedBytes returns n zero bytes aligned for 8-byte element access.
func alignedBytes(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	words := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
}
