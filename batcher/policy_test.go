package batcher

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fw-serve/fw/engine"
)

// callLog is a RunFunc recording the request IDs (rowsTensor's id) of each
// engine call's rows, in call order.
type callLog struct {
	mu    sync.Mutex
	calls [][]int
}

func (l *callLog) run(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
	x, k := in[0].Float32s(), int(in[0].Shape[1])
	var ids []int
	for r := 0; r*k < len(x); r++ {
		ids = append(ids, int(x[r*k])/1000)
	}
	l.mu.Lock()
	l.calls = append(l.calls, ids)
	l.mu.Unlock()
	return affine(ctx, in)
}

func (l *callLog) all() [][]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// withOpts submits id's rows with queue options, in a goroutine.
func withOpts(b *Batcher, id, rows int, o QueueOptions) <-chan result {
	return submitAsync(WithQueueOptions(context.Background(), o), b, rowsTensor(id, rows, 4))
}

// busy starts a batcher whose first engine call (request 0) waits for
// release, so that what the test submits next queues.
func busy(t *testing.T, cfg Config) (*Batcher, *callLog, chan struct{}, <-chan result) {
	t.Helper()
	log := &callLog{}
	run, started, release := blockFirst(1, log.run)
	b := New(run, cfg, nil)
	first := submitAsync(context.Background(), b, rowsTensor(0, 1, 4))
	<-started
	return b, log, release, first
}

func mustOK(t *testing.T, id, rows int, ch <-chan result) {
	t.Helper()
	r := <-ch
	if r.err != nil {
		t.Fatalf("request %d: %v", id, r.err)
	}
	if err := checkAffine(id, rows, 4, r.out); err != nil {
		t.Fatal(err)
	}
}

// A request of a higher priority level (1) is batched before the requests
// of lower ones that came before it; within a level, arrival order. A
// request without a priority, or with a level the model lacks, takes the
// default level.
func TestPriorityLevels(t *testing.T) {
	b, log, release, first := busy(t, Config{MaxBatchRows: 1, MaxDelay: time.Hour, Queues: Queues{Levels: 3, DefaultLevel: 2}})
	defer closeOK(t, b)
	var chans []<-chan result
	for _, q := range []struct {
		id       int
		priority uint64
	}{{1, 3}, {2, 0}, {3, 1}, {4, 2}, {5, 9}, {6, 1}} {
		want := b.QueueDepth() + 1
		chans = append(chans, withOpts(b, q.id, 1, QueueOptions{Priority: q.priority}))
		waitFor(t, "queued", func() bool { return b.QueueDepth() == want })
	}
	close(release)
	mustOK(t, 0, 1, first)
	for i, ch := range chans {
		mustOK(t, i+1, 1, ch)
	}
	// level 1: 3, 6; level 2 (default): 2, 4, 5 (9 is no level); level 3: 1
	if got, want := log.all(), [][]int{{0}, {3}, {6}, {2}, {4}, {5}, {1}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("engine calls %v, want %v", got, want)
	}
}

// Under REJECT, a request still queued at its timeout fails with
// ErrQueueTimeout at that time, not when the engine frees; it no longer
// counts against its level's MaxQueue, and the others run.
func TestQueueTimeoutRejects(t *testing.T) {
	const timeout = 50 * time.Millisecond
	b, _, release, first := busy(t, Config{MaxBatchRows: 8, MaxDelay: time.Hour, Queues: Queues{Policy: QueuePolicy{Timeout: timeout, MaxQueue: 1}}})
	defer closeOK(t, b)
	start := time.Now()
	r := <-withOpts(b, 1, 1, QueueOptions{})
	if !errors.Is(r.err, ErrQueueTimeout) {
		t.Fatalf("a request queued past its timeout: %v, want ErrQueueTimeout", r.err)
	}
	if d := time.Since(start); d < timeout {
		t.Fatalf("rejected after %v, before its %v timeout", d, timeout)
	}
	if b.QueueDepth() != 0 {
		t.Fatalf("queue depth %d after the rejection", b.QueueDepth())
	}
	// Its place is free: the next one queues, and runs once the engine frees.
	next := withOpts(b, 2, 1, QueueOptions{})
	waitFor(t, "queued", func() bool { return b.QueueDepth() == 1 })
	if _, err := b.Submit(context.Background(), []engine.Tensor{rowsTensor(3, 1, 4)}); !errors.Is(err, ErrQueueFull) || !strings.Contains(err.Error(), "Exceeds maximum queue size") {
		t.Fatalf("a second request with MaxQueue 1: %v, want Triton's \"Exceeds maximum queue size\"", err)
	}
	close(release)
	mustOK(t, 0, 1, first)
	mustOK(t, 2, 1, next)
}

// Under DELAY, a request past its timeout is not failed: it runs after
// the requests of its level that are not past theirs, even later ones.
func TestQueueTimeoutDelays(t *testing.T) {
	const timeout = 30 * time.Millisecond
	b, log, release, first := busy(t, Config{MaxBatchRows: 1, MaxDelay: time.Hour, Queues: Queues{Policy: QueuePolicy{Timeout: 10 * time.Second, AllowOverride: true, Delay: true}}})
	defer closeOK(t, b)
	late := withOpts(b, 1, 1, QueueOptions{Timeout: timeout})
	waitFor(t, "queued", func() bool { return b.QueueDepth() == 1 })
	time.Sleep(3 * timeout) // request 1 is now delayed
	second := withOpts(b, 2, 1, QueueOptions{})
	waitFor(t, "queued", func() bool { return b.QueueDepth() == 2 })
	close(release)
	mustOK(t, 0, 1, first)
	mustOK(t, 1, 1, late)
	mustOK(t, 2, 1, second)
	if got, want := log.all(), [][]int{{0}, {2}, {1}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("engine calls %v, want %v (the delayed request last)", got, want)
	}
}

// A request's own timeout shortens its policy's only with AllowOverride,
// and never lengthens it (Triton's rule).
func TestQueueTimeoutOverride(t *testing.T) {
	for _, c := range []struct {
		name  string
		p     QueuePolicy
		own   time.Duration
		wants time.Duration
	}{
		{"shorter, allowed", QueuePolicy{Timeout: time.Second, AllowOverride: true}, time.Millisecond, time.Millisecond},
		{"longer, allowed", QueuePolicy{Timeout: time.Second, AllowOverride: true}, time.Minute, time.Second},
		{"shorter, not allowed", QueuePolicy{Timeout: time.Second}, time.Millisecond, time.Second},
		{"no policy timeout", QueuePolicy{AllowOverride: true}, time.Millisecond, 0},
	} {
		if got := c.p.timeout(c.own); got != c.wants {
			t.Errorf("%s: timeout %v, want %v", c.name, got, c.wants)
		}
	}
	// End to end: the overridden timeout rejects.
	b, _, release, first := busy(t, Config{MaxBatchRows: 8, MaxDelay: time.Hour, Queues: Queues{Policy: QueuePolicy{Timeout: time.Hour, AllowOverride: true}}})
	defer closeOK(t, b)
	if r := <-withOpts(b, 1, 1, QueueOptions{Timeout: 20 * time.Millisecond}); !errors.Is(r.err, ErrQueueTimeout) {
		t.Fatalf("a 20 ms own timeout: %v, want ErrQueueTimeout", r.err)
	}
	close(release)
	mustOK(t, 0, 1, first)
}

// Each level has its own MaxQueue: a full level refuses with Triton's
// sentence while another still queues.
func TestQueueSizePerLevel(t *testing.T) {
	b, _, release, first := busy(t, Config{MaxBatchRows: 8, MaxDelay: time.Hour, Queues: Queues{Levels: 2, DefaultLevel: 2,
		Policy: QueuePolicy{MaxQueue: 1}, ByLevel: map[uint64]QueuePolicy{1: {MaxQueue: 2}}}})
	defer closeOK(t, b)
	var chans []<-chan result
	for _, p := range []uint64{2, 1, 1} {
		want := b.QueueDepth() + 1
		chans = append(chans, withOpts(b, len(chans)+1, 1, QueueOptions{Priority: p}))
		waitFor(t, "queued", func() bool { return b.QueueDepth() == want })
	}
	for _, p := range []uint64{2, 1} {
		_, err := b.Submit(WithQueueOptions(context.Background(), QueueOptions{Priority: p}), []engine.Tensor{rowsTensor(9, 1, 4)})
		if !errors.Is(err, ErrQueueFull) || !strings.Contains(err.Error(), "Exceeds maximum queue size") || !strings.Contains(err.Error(), "priority level") {
			t.Fatalf("level %d full: %v", p, err)
		}
	}
	close(release)
	mustOK(t, 0, 1, first)
	for i, ch := range chans {
		mustOK(t, i+1, 1, ch)
	}
}

// With preferred sizes, the first requests adding up to a preferred size
// are sent at once, the largest such run (not past the largest size), and
// a batch taken before MaxDelay holds at most the largest size's rows; a run
// adding up to no preferred size waits for MaxDelay (Triton's dynamic
// batcher, as L0_model_queue times it).
func TestPreferredSizes(t *testing.T) {
	const delay = 300 * time.Millisecond
	log := &callLog{}
	b := New(log.run, Config{MaxBatchRows: 32, MaxDelay: delay, PreferredSizes: []int{8, 4}}, nil)
	defer closeOK(t, b)

	// 2 + 2 rows: a preferred 4, sent without waiting.
	start := time.Now()
	a, c := withOpts(b, 1, 2, QueueOptions{}), withOpts(b, 2, 2, QueueOptions{})
	mustOK(t, 1, 2, a)
	mustOK(t, 2, 2, c)
	if d := time.Since(start); d >= delay {
		t.Fatalf("a preferred batch of 2+2 rows waited %v", d)
	}

	// 1, 2, 2 rows: sums 1, 3, 5 are no preferred size: held for MaxDelay,
	// then sent together.
	log.calls = nil
	start = time.Now()
	chans := queueInOrder(t, b,
		[]engine.Tensor{rowsTensor(3, 1, 4)},
		[]engine.Tensor{rowsTensor(4, 2, 4)},
		[]engine.Tensor{rowsTensor(5, 2, 4)})
	for i, ch := range chans {
		mustOK(t, i+3, []int{1, 2, 2}[i], ch)
	}
	if d := time.Since(start); d < delay {
		t.Fatalf("1+2+2 rows ran after %v, before MaxDelay", d)
	}
	if got, want := log.all(), [][]int{{3, 4, 4, 5, 5}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("engine calls %v, want %v", got, want)
	}

	// 12 single rows queued behind a held call of a preferred 4 rows: 8
	// of them (the largest preferred size) first, then 4 (a preferred
	// size) at once.
	log2 := &callLog{}
	run, started, release := blockFirst(1, log2.run)
	q := New(run, Config{MaxBatchRows: 32, MaxDelay: time.Hour, PreferredSizes: []int{4, 8}}, nil)
	defer closeOK(t, q)
	head := submitAsync(context.Background(), q, rowsTensor(0, 4, 4))
	<-started
	var more [][]engine.Tensor
	for id := 1; id <= 12; id++ {
		more = append(more, []engine.Tensor{rowsTensor(id, 1, 4)})
	}
	rest := queueInOrder(t, q, more...)
	close(release)
	mustOK(t, 0, 4, head)
	for i, ch := range rest {
		mustOK(t, i+1, 1, ch)
	}
	var sizes []int
	for _, c := range log2.all() {
		sizes = append(sizes, len(c))
	}
	if !slices.Equal(sizes, []int{4, 8, 4}) {
		t.Fatalf("engine calls of %v rows, want [4 8 4]", sizes)
	}
}

// Config checks: a preferred size past MaxBatchRows is dropped (it could
// never be sent), and a default level outside the levels is the lowest.
func TestQueueConfigDefaults(t *testing.T) {
	b := New(affine, Config{MaxBatchRows: 8, PreferredSizes: []int{16, 4, 4}, Queues: Queues{Levels: 3}}, nil)
	defer closeOK(t, b)
	c := b.Config()
	if !slices.Equal(c.PreferredSizes, []int{4}) || c.Queues.DefaultLevel != 3 {
		t.Fatalf("preferred %v, default level %d", c.PreferredSizes, c.Queues.DefaultLevel)
	}
}

// A request leaving the queue (its client gave up) can make what is left
// a preferred batch: it is sent then, not at MaxDelay.
func TestAbandonReleasesAPreferredBatch(t *testing.T) {
	b := New(affine, Config{MaxBatchRows: 8, MaxDelay: time.Hour, PreferredSizes: []int{3, 5}}, nil)
	defer closeOK(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	first := submitAsync(context.Background(), b, rowsTensor(1, 1, 4))
	waitFor(t, "queued", func() bool { return b.QueueDepth() == 1 })
	gone := submitAsync(ctx, b, rowsTensor(2, 1, 4))
	waitFor(t, "queued", func() bool { return b.QueueDepth() == 2 })
	third := submitAsync(context.Background(), b, rowsTensor(3, 2, 4))
	waitFor(t, "queued", func() bool { return b.QueueDepth() == 3 }) // 1+1+2: no preferred size
	cancel()
	if r := <-gone; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the cancelled request: %v", r.err)
	}
	select { // 1+2 rows: a preferred 3, sent without waiting the hour
	case r := <-first:
		if r.err != nil || checkAffine(1, 1, 4, r.out) != nil {
			t.Fatalf("request 1: %v", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("1+2 rows, a preferred size, still held after the cancelled request left")
	}
	mustOK(t, 3, 2, third)
}

// MaxDelay runs from the oldest request of a batch, not from a newer one
// of a higher level that went ahead of it.
func TestMaxDelayFromTheOldest(t *testing.T) {
	const delay = time.Second
	b := New(affine, Config{MaxBatchRows: 8, MaxDelay: delay, PreferredSizes: []int{8}, Queues: Queues{Levels: 2, DefaultLevel: 2}}, nil)
	defer closeOK(t, b)
	start := time.Now()
	low := withOpts(b, 1, 1, QueueOptions{Priority: 2})
	time.Sleep(delay * 6 / 10)
	high := withOpts(b, 2, 1, QueueOptions{Priority: 1})
	mustOK(t, 1, 1, low)
	mustOK(t, 2, 1, high)
	if d := time.Since(start); d > delay*14/10 {
		t.Fatalf("the batch went %v after its oldest request: MaxDelay (%v) ran from the newer one", d, delay)
	}
}

// PreserveOrdering: a request whose call ended on another instance is
// answered only after the request queued before it, still running; a
// cancelled earlier request does not hold the later ones. Without it, the
// later request is answered first.
func TestPreserveOrdering(t *testing.T) {
	for _, preserve := range []bool{true, false} {
		stats := &recorder{}
		run, started, release := blockFirst(1, affine)
		b := New(run, Config{MaxBatchRows: 1, Instances: 2, PreserveOrdering: preserve}, stats)
		first := submitAsync(context.Background(), b, rowsTensor(1, 1, 4))
		<-started // request 1 holds instance one
		var order []int
		var mu sync.Mutex
		second := make(chan result, 1)
		go func() {
			out, err := b.Submit(context.Background(), []engine.Tensor{rowsTensor(2, 1, 4)})
			mu.Lock()
			order = append(order, 2)
			mu.Unlock()
			second <- result{out, err}
		}()
		waitFor(t, "request 2's call", func() bool { return len(stats.all()) == 1 })
		time.Sleep(50 * time.Millisecond) // time to be answered, if it may
		mu.Lock()
		answered := len(order) == 1
		mu.Unlock()
		if answered == preserve {
			t.Fatalf("PreserveOrdering %v: request 2 answered while request 1 still ran: %v, want %v", preserve, answered, !preserve)
		}
		close(release)
		mustOK(t, 1, 1, first)
		mustOK(t, 2, 1, second)
		closeOK(t, b)
	}

	// A cancelled earlier request lets the later ones go.
	run, started, release := blockFirst(1, affine)
	b := New(run, Config{MaxBatchRows: 1, Instances: 1, MaxDelay: time.Hour, PreserveOrdering: true}, nil)
	defer closeOK(t, b)
	first := submitAsync(context.Background(), b, rowsTensor(1, 1, 4))
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	gone := submitAsync(ctx, b, rowsTensor(2, 1, 4))
	waitFor(t, "queued", func() bool { return b.QueueDepth() == 1 })
	third := submitAsync(context.Background(), b, rowsTensor(3, 1, 4))
	waitFor(t, "queued", func() bool { return b.QueueDepth() == 2 })
	cancel()
	if r := <-gone; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled: %v", r.err)
	}
	close(release)
	mustOK(t, 1, 1, first)
	mustOK(t, 3, 1, third)
}

// order: requests finished out of order release the waiters in order.
func TestOrderReleasesInOrder(t *testing.T) {
	o := newOrder()
	a, b, c := o.take(), o.take(), o.take()
	got := make(chan uint64, 3)
	for _, s := range []uint64{c, b} {
		go func() {
			if err := o.wait(context.Background(), context.Background(), s); err == nil {
				got <- s
				o.finish(s)
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	select {
	case s := <-got:
		t.Fatalf("request %d went before request %d finished", s, a)
	default:
	}
	o.finish(a)
	if first, second := <-got, <-got; first != b || second != c {
		t.Fatalf("released %d then %d, want %d then %d", first, second, b, c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := o.take()
	e := o.take()
	cancel()
	if err := o.wait(ctx, context.Background(), e); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait: %v", err)
	}
	o.finish(e)
	o.finish(d)
	if o.through != e || len(o.waiters) != 0 || len(o.done) != 0 {
		t.Fatalf("through %d, waiters %d, done %d", o.through, len(o.waiters), len(o.done))
	}
}

// A batch held for a preferred size goes as soon as a request of another
// shape, which cannot join it, is queued after it (Triton's pending batch);
// the newer one waits its own MaxDelay.
func TestAnotherShapeSendsTheBatch(t *testing.T) {
	b := New(affine, Config{MaxBatchRows: 8, MaxDelay: time.Hour, PreferredSizes: []int{8}}, nil)
	held := submitAsync(context.Background(), b, rowsTensor(1, 1, 4))
	waitFor(t, "queued", func() bool { return b.QueueDepth() == 1 })
	other := submitAsync(context.Background(), b, rowsTensor(2, 1, 8))
	select {
	case r := <-held:
		if r.err != nil || checkAffine(1, 1, 4, r.out) != nil {
			t.Fatalf("request 1: %v", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a held batch still waits after a request of another shape was queued")
	}
	if b.QueueDepth() != 1 {
		t.Fatalf("queue depth %d: the newer shape's request should wait for its own batch", b.QueueDepth())
	}
	closeOK(t, b) // runs what is queued
	if r := <-other; r.err != nil || checkAffine(2, 1, 8, r.out) != nil {
		t.Fatalf("request 2: %v", r.err)
	}
}

// With priority levels, PreserveOrdering keeps the order requests were
// taken in, not the order they came: a high-priority request taken first
// is answered without waiting for a low-priority one queued before it.
func TestPreserveOrderingFollowsPriority(t *testing.T) {
	var mu sync.Mutex
	var answered []int
	slowLow := func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
		if int(in[0].Float32s()[0])/1000 == 1 {
			time.Sleep(300 * time.Millisecond) // the low-priority request's call is slow
		}
		return affine(ctx, in)
	}
	run, started, release := blockFirst(1, slowLow)
	b := New(run, Config{MaxBatchRows: 1, MaxDelay: time.Hour, PreserveOrdering: true, Queues: Queues{Levels: 2, DefaultLevel: 2}}, nil)
	defer closeOK(t, b)
	first := submitAsync(context.Background(), b, rowsTensor(0, 1, 4))
	<-started
	submit := func(id int, p uint64) <-chan result {
		ch := make(chan result, 1)
		go func() {
			out, err := b.Submit(WithQueueOptions(context.Background(), QueueOptions{Priority: p}), []engine.Tensor{rowsTensor(id, 1, 4)})
			mu.Lock()
			answered = append(answered, id)
			mu.Unlock()
			ch <- result{out, err}
		}()
		return ch
	}
	low := submit(1, 2)
	waitFor(t, "queued", func() bool { return b.QueueDepth() == 1 })
	high := submit(2, 1)
	waitFor(t, "queued", func() bool { return b.QueueDepth() == 2 })
	close(release)
	mustOK(t, 0, 1, first)
	mustOK(t, 2, 1, high)
	mustOK(t, 1, 1, low)
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(answered, []int{2, 1}) {
		t.Fatalf("answered %v, want the high-priority request (2) first", answered)
	}
}

// MinRows (Triton's minimum_slot_utilization) holds a batch, idle engine
// or not, until that many rows are queued, then sends all of them up to
// MaxBatchRows; short of it, the batch goes after MaxDelay.
func TestMinRows(t *testing.T) {
	const delay = 300 * time.Millisecond
	log := &callLog{}
	b := New(log.run, Config{MaxBatchRows: 4, MaxDelay: delay, MinRows: 2}, nil)
	defer closeOK(t, b)

	// One row: below MinRows, held for MaxDelay although the engine is idle.
	start := time.Now()
	mustOK(t, 1, 1, withOpts(b, 1, 1, QueueOptions{}))
	if d := time.Since(start); d < delay {
		t.Fatalf("a lone row ran after %v, before MaxDelay", d)
	}

	// A second row joins the held one: MinRows reached, both sent in one
	// call without waiting for MaxDelay.
	log.mu.Lock()
	log.calls = nil
	log.mu.Unlock()
	start = time.Now()
	first := withOpts(b, 2, 1, QueueOptions{})
	waitFor(t, "one row held", func() bool { return b.QueueDepth() == 1 })
	second := withOpts(b, 3, 1, QueueOptions{})
	mustOK(t, 2, 1, first)
	mustOK(t, 3, 1, second)
	if d := time.Since(start); d >= delay {
		t.Fatalf("two rows with MinRows 2 waited %v", d)
	}
	if got := log.all(); len(got) != 1 || !slices.Equal(got[0], []int{2, 3}) {
		t.Fatalf("engine calls %v, want one of requests [2 3]", got)
	}

	// MinRows is dropped where it cannot hold: no delay, an unbatched model,
	// preferred sizes, and clamped to MaxBatchRows.
	for _, c := range []Config{{MinRows: 2}, {MinRows: 2, MaxDelay: delay, Unbatched: true},
		{MinRows: 2, MaxDelay: delay, PreferredSizes: []int{4}}} {
		if got := c.withDefaults().MinRows; got != 0 {
			t.Errorf("%+v: MinRows %d, want 0", c, got)
		}
	}
	if got := (Config{MinRows: 9, MaxBatchRows: 4, MaxDelay: delay}).withDefaults().MinRows; got != 4 {
		t.Errorf("MinRows 9 of MaxBatchRows 4: %d", got)
	}
	if got := (Config{MinRows: 9, MaxBatchRows: 1, MaxDelay: delay}).withDefaults().MinRows; got != 0 {
		t.Errorf("MinRows 9 of MaxBatchRows 1 holds: %d", got)
	}
}
