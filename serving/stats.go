package serving

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/reqtrace"
)

// Stats are a model's cumulative inference statistics as Triton's
// statistics extension reports them (GET /v2/models/{m}/stats, the
// ModelStatistics gRPC call): requests that succeeded and failed with their
// time in the server, the successful ones' time split by stage, and the
// engine calls by batch size. Both transports record into one Stats; the
// batcher reports engine calls through BatchRun. Safe for concurrent use.
type Stats struct {
	success, fail                      duration
	failReasons                        [NumFailureReasons]atomic.Uint64 // failed requests by FailureReason
	queue, computeInput, computeInfer  duration
	computeOutput                      duration
	cacheHit, cacheMiss                duration
	inferences, executions, lastMillis atomic.Uint64

	mu      sync.Mutex
	batches map[int]*BatchStat
}

type duration struct{ count, ns atomic.Uint64 }

func (d *duration) add(t time.Duration) {
	d.count.Add(1)
	d.ns.Add(uint64(max(t, 0)))
}

func (d *duration) get() Duration { return Duration{Count: d.count.Load(), NS: d.ns.Load()} }

// Duration is a count and the total time, in nanoseconds, of what it counts.
type Duration struct {
	Count uint64 `json:"count"`
	NS    uint64 `json:"ns"`
}

// BatchStat is the engine calls of one batch size (rows).
type BatchStat struct {
	BatchSize     uint64   `json:"batch_size"`
	ComputeInput  Duration `json:"compute_input"`
	ComputeInfer  Duration `json:"compute_infer"`
	ComputeOutput Duration `json:"compute_output"`
}

// Request is one inference request as a transport saw it: when it began
// (its body read), when its inputs were decoded and submitted, when its
// encoded answer was ready, and the batcher's timing.
type Request struct {
	Began, Submitted, Encoded time.Time
	Timing                    batcher.Timing
	OK                        bool
	// Err is why a request that is not OK failed (its failure reason in
	// the statistics); nil counts as OTHER.
	Err error
	// ID is the request's "id", when it gave one (for its trace).
	ID string
	// TraceBegun says the tracer sampled it as it went in (reqtrace's
	// Begin), Trace being the ID it gave (0: not traced).
	TraceBegun bool
	Trace      uint64
}

// NumFailureReasons is how many of Triton's failure reasons there are.
const NumFailureReasons = 4

// FailureReason is Triton's failure reason i, as its
// nv_inference_request_failure metric labels them: REJECTED (the queue
// would not take it), CANCELED (its client or the server ended it),
// BACKEND (the model or its engine failed, or the model answered an
// error), OTHER (everything else: a request fw refused before the model).
func FailureReason(i int) string {
	return [NumFailureReasons]string{"REJECTED", "CANCELED", "BACKEND", "OTHER"}[i]
}

// StepFailure is an error of one step of an ensemble's pipeline (a
// request the ensemble made to another model): the ensemble's own
// request counts it as OTHER, whatever the step's reason, as Triton's.
type StepFailure interface {
	error
	EnsembleStep() int
	// EnsembleName is the ensemble whose step failed.
	EnsembleName() string
	// Unwrap is the step's own error.
	Unwrap() error
}

// failureReason is the index (FailureReason) of why err failed a request.
func failureReason(err error) int {
	switch {
	case err == nil:
		return 3
	case errors.Is(err, context.Canceled):
		return 1
	case errors.As(err, new(StepFailure)): // the ensemble's own queue took it: as Triton, OTHER
		return 3
	}
	switch Classify(err, 0).Kind {
	case KindOverloaded:
		return 0
	case KindEngine, KindAnswered:
		return 2
	}
	return 3
}

// TraceOf is the trace record (reqtrace) of request r to inst.
func TraceOf(inst *Instance, r Request) reqtrace.Request {
	return reqtrace.Request{Model: inst.Name(), Version: inst.Version(), ID: r.ID, Began: r.Began, Submitted: r.Submitted,
		Encoded: r.Encoded, Queue: r.Timing.Queue, Compute: r.Timing.Infer, Begun: r.TraceBegun, Trace: r.Trace}
}

// Record adds one request. A failed request counts only in fail.
func (s *Stats) Record(r Request) {
	total := r.Encoded.Sub(r.Began)
	if !r.OK {
		s.fail.add(total)
		s.failReasons[failureReason(r.Err)].Add(1)
		return
	}
	s.success.add(total)
	s.queue.add(r.Timing.Queue)
	s.computeInput.add(r.Submitted.Sub(r.Began))
	s.computeInfer.add(r.Timing.Infer)
	// The rest of the request's time: after its engine call, splitting the
	// outputs and encoding the answer.
	s.computeOutput.add(r.Encoded.Sub(r.Submitted) - r.Timing.Queue - r.Timing.Infer)
	s.lastMillis.Store(uint64(r.Encoded.UnixMilli()))
}

// BatchRun implements batcher.Stats: one engine call of rows.
func (s *Stats) BatchRun(rows, requests int, queueWait, inference time.Duration, err error) {
	s.BatchRunPadded(rows, 0, requests, queueWait, inference, err)
}

// BatchRunPadded implements batcher.PaddedStats: rows of the call that
// were the sequence batcher's null requests count in its batch size, not
// in the inference count (Triton's statistics).
func (s *Stats) BatchRunPadded(rows, padding, _ int, _, inference time.Duration, err error) {
	if err != nil {
		return
	}
	s.executions.Add(1)
	s.inferences.Add(uint64(max(rows-padding, 0)))
	s.mu.Lock()
	if s.batches == nil {
		s.batches = make(map[int]*BatchStat)
	}
	b := s.batches[rows]
	if b == nil {
		b = &BatchStat{BatchSize: uint64(rows)}
		s.batches[rows] = b
	}
	b.ComputeInfer.Count++
	b.ComputeInfer.NS += uint64(max(inference, 0))
	// fw concatenates inputs and splits outputs around the engine call
	// without timing them apart: counted, with no time of their own.
	b.ComputeInput.Count++
	b.ComputeOutput.Count++
	s.mu.Unlock()
}

// cacheLookup counts a response cache lookup that found the answer (hit:
// the time to find and hand it over) or did not (the time to look and to
// keep the new answer), as Triton's cache_hit and cache_miss.
func (s *Stats) cacheLookup(hit bool, d time.Duration) {
	if hit {
		s.cacheHit.add(d)
	} else {
		s.cacheMiss.add(d)
	}
}

// QueueDepth implements batcher.Stats; the statistics do not keep it.
func (s *Stats) QueueDepth(int) {}

// Snapshot is the statistics at one moment.
type Snapshot struct {
	// LastInference is the last successful request's end, in milliseconds
	// since the Unix epoch (0: none yet).
	LastInference uint64
	// InferenceCount is rows inferred, ExecutionCount engine calls.
	InferenceCount, ExecutionCount                                  uint64
	Success, Fail, Queue, ComputeInput, ComputeInfer, ComputeOutput Duration
	CacheHit, CacheMiss                                             Duration
	// FailuresByReason counts the failed requests by FailureReason.
	FailuresByReason [NumFailureReasons]uint64
	Batches          []BatchStat
}

// Snapshot reads the statistics, batch sizes in increasing order.
func (s *Stats) Snapshot() Snapshot {
	snap := Snapshot{
		LastInference: s.lastMillis.Load(), InferenceCount: s.inferences.Load(), ExecutionCount: s.executions.Load(),
		Success: s.success.get(), Fail: s.fail.get(), Queue: s.queue.get(),
		ComputeInput: s.computeInput.get(), ComputeInfer: s.computeInfer.get(), ComputeOutput: s.computeOutput.get(),
		CacheHit: s.cacheHit.get(), CacheMiss: s.cacheMiss.get(),
	}
	for i := range s.failReasons {
		snap.FailuresByReason[i] = s.failReasons[i].Load()
	}
	s.mu.Lock()
	for _, b := range s.batches {
		snap.Batches = append(snap.Batches, *b)
	}
	s.mu.Unlock()
	slices.SortFunc(snap.Batches, func(a, b BatchStat) int { return int(a.BatchSize) - int(b.BatchSize) })
	return snap
}

// Tee is a batcher.Stats that reports to each of its members.
type Tee []batcher.Stats

// BatchRun implements batcher.Stats.
func (t Tee) BatchRun(rows, requests int, queueWait, inference time.Duration, err error) {
	for _, s := range t {
		s.BatchRun(rows, requests, queueWait, inference, err)
	}
}

// BatchRunPadded implements batcher.PaddedStats: BatchRunPadded for the
// members that take it, BatchRun (every row) for the others.
func (t Tee) BatchRunPadded(rows, padding, requests int, queueWait, inference time.Duration, err error) {
	for _, s := range t {
		if p, ok := s.(batcher.PaddedStats); ok {
			p.BatchRunPadded(rows, padding, requests, queueWait, inference, err)
		} else {
			s.BatchRun(rows, requests, queueWait, inference, err)
		}
	}
}

// QueueDepth implements batcher.Stats.
func (t Tee) QueueDepth(n int) {
	for _, s := range t {
		s.QueueDepth(n)
	}
}
