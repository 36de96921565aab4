package sequence

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
)

// batchLog is a fake engine behind a real batcher.Batcher: it records
// every call's rows and accumulates each row as engineLog does.
type batchLog struct {
	mu      sync.Mutex
	calls   [][]seen
	padding int // rows reported as padding (batcher.PaddedStats)
	block   chan struct{}
}

func (e *batchLog) run(_ context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
	if e.block != nil {
		<-e.block
	}
	k := int(in[0].Shape[0])
	for i := range k {
		if int32(binary.LittleEndian.Uint32(in[0].Data[4*i:])) == 666 {
			return nil, errors.New("666 is refused")
		}
	}
	rows := make([]seen, k)
	acc := make([]byte, 4*k)
	for i := range k {
		s := seen{
			input: int32(binary.LittleEndian.Uint32(in[0].Data[4*i:])), start: int32(binary.LittleEndian.Uint32(in[1].Data[4*i:])),
			ready: in[3].Data[i] == 1, corrid: binary.LittleEndian.Uint64(in[4].Data[8*i:]), accIn: int32(binary.LittleEndian.Uint32(in[5].Data[4*i:])),
		}
		rows[i] = s
		a := s.accIn + s.input
		if s.start == 1 {
			a = s.input
		}
		binary.LittleEndian.PutUint32(acc[4*i:], uint32(a))
	}
	e.mu.Lock()
	e.calls = append(e.calls, rows)
	e.mu.Unlock()
	out := engine.Tensor{DType: engine.Int32, Shape: []int64{int64(k), 1}, Data: acc}
	return []engine.Tensor{out, out}, nil
}

func (e *batchLog) BatchRun(int, int, time.Duration, time.Duration, error) {}
func (e *batchLog) QueueDepth(int)                                         {}
func (e *batchLog) BatchRunPadded(_, padding, _ int, _, _ time.Duration, _ error) {
	e.mu.Lock()
	e.padding += padding
	e.mu.Unlock()
}

// sizes are the rows of each call so far.
func (e *batchLog) sizes() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	var n []int
	for _, c := range e.calls {
		n = append(n, len(c))
	}
	return n
}

// directBatcher is a sequence batcher with a slot scheduler over a real
// dynamic batcher of groups instances of size rows, and its submit.
func directBatcher(t *testing.T, d DirectConfig) (*Batcher, *batchLog, SubmitFunc) {
	t.Helper()
	e := &batchLog{}
	runs := make([]batcher.RunFunc, d.Groups)
	for i := range runs {
		runs[i] = e.run
	}
	db := batcher.NewPool(runs, batcher.Config{MaxBatchRows: d.Size, MaxDelay: 0, Instances: d.Groups}, e)
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	cfg := config(0)
	cfg.Direct = &d
	b := newBatcher(t, cfg)
	return b, e, func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, batcher.Timing, error) {
		return db.SubmitTimed(ctx, in)
	}
}

// step is one request of a sequence: its flags and value.
type step struct {
	start, end bool
	x          int32
}

// sendAll admits every step of each sequence in order (as a stream does),
// runs them all at once, and returns each sequence's answers in order.
func sendAll(t *testing.T, b *Batcher, submit SubmitFunc, seqs map[uint64][]step) map[uint64][]int32 {
	t.Helper()
	got := map[uint64][]int32{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, steps := range seqs {
		tickets := make([]*Ticket, len(steps))
		for i, s := range steps {
			tk, err := b.Enter(ID{N: id}, s.start, s.end)
			if err != nil {
				t.Fatal(err)
			}
			tickets[i] = tk
		}
		got[id] = make([]int32, len(steps))
		for i, tk := range tickets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, _, err := tk.Run(context.Background(), []engine.Tensor{i32(steps[i].x)}, submit)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("sequence %d step %d: %v", id, i, err)
					return
				}
				got[id][i] = val(out[0])
			}()
		}
	}
	wg.Wait()
	return got
}

// Triton's test_full_batch: four sequences of three requests, all queued
// before the first batch (the delay hook), run as three batches of four,
// each sequence in the same row of every batch.
func TestDirectFullBatches(t *testing.T) {
	b, e, submit := directBatcher(t, DirectConfig{Groups: 1, Size: 4, DelayScheduler: 12})
	seqs := map[uint64][]step{}
	for id := uint64(1); id <= 4; id++ {
		v := int32(id * 10)
		seqs[id] = []step{{start: true, x: v}, {x: v + 1}, {end: true, x: v + 2}}
	}
	got := sendAll(t, b, submit, seqs)
	for id := uint64(1); id <= 4; id++ {
		v := int32(id * 10)
		if want := []int32{v, 2*v + 1, 3*v + 3}; !slices.Equal(got[id], want) {
			t.Errorf("sequence %d: %v, want %v", id, got[id], want)
		}
	}
	if s := e.sizes(); !slices.Equal(s, []int{4, 4, 4}) {
		t.Fatalf("batch sizes %v, want 4, 4, 4", s)
	}
	for row := range 4 {
		id := e.calls[0][row].corrid
		for c, call := range e.calls {
			if call[row].corrid != id || !call[row].ready {
				t.Fatalf("call %d row %d: %+v, want sequence %d in its row", c, row, call[row], id)
			}
		}
	}
}

// A free slot below an occupied one is a null request: READY false,
// correlation ID 0, START off, reported as padding; its output dropped.
func TestDirectNullRow(t *testing.T) {
	b, e, submit := directBatcher(t, DirectConfig{Groups: 1, Size: 3})
	run := func(id uint64, s step) int32 {
		tk, err := b.Enter(ID{N: id}, s.start, s.end)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := tk.Run(context.Background(), []engine.Tensor{i32(s.x)}, submit)
		if err != nil {
			t.Fatal(err)
		}
		return val(out[0])
	}
	run(1, step{start: true, x: 1})            // slot 0
	run(2, step{start: true, end: true, x: 2}) // slot 1, free again at its END
	run(3, step{start: true, x: 3})            // slot 1
	run(4, step{start: true, x: 4})            // slot 2
	e.mu.Lock()
	e.calls, e.padding = nil, 0
	e.mu.Unlock()
	if got := run(4, step{end: true, x: 5}); got != 9 {
		t.Fatalf("sequence 4: %d, want 9", got)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.calls) != 1 || len(e.calls[0]) != 3 {
		t.Fatalf("calls %+v, want one of 3 rows (slots 0 and 1 without a request)", e.calls)
	}
	for _, r := range e.calls[0][:2] {
		if r.ready || r.corrid != 0 || r.start != 0 {
			t.Fatalf("null row %+v", r)
		}
	}
	if r := e.calls[0][2]; !r.ready || r.corrid != 4 || r.accIn != 4 {
		t.Fatalf("row of sequence 4: %+v", r)
	}
	if e.padding != 2 {
		t.Fatalf("padding %d, want 2", e.padding)
	}
}

// With every slot taken a new sequence waits in the backlog; the END that
// frees a slot hands it over as it joins a batch, so the next batch holds
// the waiting sequence.
func TestDirectBacklog(t *testing.T) {
	b, e, submit := directBatcher(t, DirectConfig{Groups: 1, Size: 1, DelayScheduler: 2, BacklogDelay: 2})
	got := sendAll(t, b, submit, map[uint64][]step{
		1: {{start: true, x: 1}, {end: true, x: 2}},
		2: {{start: true, x: 10}, {end: true, x: 20}},
	})
	if !slices.Equal(got[1], []int32{1, 3}) || !slices.Equal(got[2], []int32{10, 30}) {
		t.Fatalf("answers %v", got)
	}
	if s := e.sizes(); !slices.Equal(s, []int{1, 1, 1, 1}) {
		t.Fatalf("batch sizes %v", s)
	}
	first := e.calls[0][0].corrid
	if e.calls[1][0].corrid != first || e.calls[2][0].corrid == first {
		t.Fatalf("a sequence runs to its END before the backlog's: %+v", e.calls)
	}
}

// Two instances are two groups of slots, each with engine calls of its own:
// one row from each is never joined into a call of two.
func TestDirectGroupsNotJoined(t *testing.T) {
	b, e, submit := directBatcher(t, DirectConfig{Groups: 2, Size: 2, DelayScheduler: 4})
	got := sendAll(t, b, submit, map[uint64][]step{ // slot 0 of each group
		1: {{start: true, x: 1}, {end: true, x: 1}},
		2: {{start: true, x: 2}, {end: true, x: 2}},
	})
	if !slices.Equal(got[1], []int32{1, 2}) || !slices.Equal(got[2], []int32{2, 4}) {
		t.Fatalf("answers %v", got)
	}
	if s := e.sizes(); !slices.Equal(s, []int{1, 1, 1, 1}) {
		t.Fatalf("batch sizes %v, want four of 1", s)
	}
}

// A request given up while queued leaves its slot's queue; the sequence
// goes on from the state before it.
func TestDirectCancelQueued(t *testing.T) {
	b, e, submit := directBatcher(t, DirectConfig{Groups: 1, Size: 1})
	e.block = make(chan struct{})
	t1, _ := b.Enter(ID{N: 1}, true, false)
	t2, _ := b.Enter(ID{N: 1}, false, false)
	t3, _ := b.Enter(ID{N: 1}, false, true)
	done1 := make(chan int32)
	go func() {
		out, _, err := t1.Run(context.Background(), []engine.Tensor{i32(5)}, submit)
		if err != nil {
			t.Error(err)
		}
		done1 <- val(out[0])
	}()
	ctx, cancel := context.WithCancel(context.Background())
	err2 := make(chan error)
	go func() {
		_, _, err := t2.Run(ctx, []engine.Tensor{i32(100)}, submit)
		err2 <- err
	}()
	time.Sleep(50 * time.Millisecond) // t1 in the engine, t2 queued
	cancel()
	if err := <-err2; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	close(e.block)
	if v := <-done1; v != 5 {
		t.Fatalf("first: %d", v)
	}
	out, _, err := t3.Run(context.Background(), []engine.Tensor{i32(1)}, submit)
	if err != nil || val(out[0]) != 6 {
		t.Fatalf("after the cancelled one: %v %v, want 6", out, err)
	}
}

// direct's minimum_slot_utilization with max_queue_delay: one request of
// four slots waits out the delay; two (half) go at once.
func TestDirectMinUtilization(t *testing.T) {
	b, _, submit := directBatcher(t, DirectConfig{Groups: 1, Size: 4, MinUtilization: 0.5, MaxDelay: 300 * time.Millisecond})
	start := time.Now()
	got := sendAll(t, b, submit, map[uint64][]step{1: {{start: true, end: true, x: 1}}})
	if d := time.Since(start); got[1][0] != 1 || d < 250*time.Millisecond {
		t.Fatalf("one request ran after %v, want the 300ms delay", d)
	}
	start = time.Now()
	sendAll(t, b, submit, map[uint64][]step{2: {{start: true, end: true, x: 1}}, 3: {{start: true, end: true, x: 1}}})
	if d := time.Since(start); d > 250*time.Millisecond {
		t.Fatalf("two requests (half the slots) waited %v", d)
	}
}

// Requests whose tensors differ in shape are not rows of one call: the
// later one waits for a batch of its own, its row a null request meanwhile.
func TestDirectShapesApart(t *testing.T) {
	b, e, submit := directBatcher(t, DirectConfig{Groups: 1, Size: 2, DelayScheduler: 2})
	wide := engine.Tensor{DType: engine.Int32, Shape: []int64{1, 2}, Data: make([]byte, 8)}
	var wg sync.WaitGroup
	for id, in := range map[uint64]engine.Tensor{1: i32(1), 2: wide} {
		tk, err := b.Enter(ID{N: id}, true, true)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, _ = tk.Run(context.Background(), []engine.Tensor{in}, submit)
		}()
	}
	wg.Wait()
	// The fake engine reads the first element of each row: the call
	// sizes are what matter.
	if s := e.sizes(); len(s) != 2 {
		t.Fatalf("batch sizes %v, want two calls", s)
	}
}

// Close fails the requests still queued in a slot with batcher.ErrClosed;
// a batch already in the engine finishes and answers.
func TestDirectClose(t *testing.T) {
	b, e, submit := directBatcher(t, DirectConfig{Groups: 1, Size: 1})
	e.block = make(chan struct{})
	t1, _ := b.Enter(ID{N: 1}, true, false)
	t2, _ := b.Enter(ID{N: 1}, false, true)
	res := make(chan error, 2)
	var v1 int32
	go func() {
		out, _, err := t1.Run(context.Background(), []engine.Tensor{i32(7)}, submit)
		if err == nil {
			v1 = val(out[0])
		}
		res <- err
	}()
	time.Sleep(30 * time.Millisecond) // t1 in the engine
	go func() {
		_, _, err := t2.Run(context.Background(), []engine.Tensor{i32(1)}, submit)
		res <- err
	}()
	time.Sleep(30 * time.Millisecond) // t2 queued behind it
	b.Close()
	if err := <-res; !errors.Is(err, batcher.ErrClosed) {
		t.Fatalf("queued request at Close: %v", err)
	}
	close(e.block)
	if err := <-res; err != nil || v1 != 7 {
		t.Fatalf("request in the engine at Close: %d %v", v1, err)
	}
}

// A batch that fails for one request's sake is run again request by
// request: the others are answered.
func TestDirectPoisonedRowFailsAlone(t *testing.T) {
	b, e, submit := directBatcher(t, DirectConfig{Groups: 1, Size: 2, DelayScheduler: 2})
	type res struct {
		v   int32
		err error
	}
	out := map[uint64]chan res{1: make(chan res, 1), 2: make(chan res, 1)}
	for id, x := range map[uint64]int32{1: 5, 2: 666} {
		tk, err := b.Enter(ID{N: id}, true, true)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			o, _, err := tk.Run(context.Background(), []engine.Tensor{i32(x)}, submit)
			if err != nil {
				out[id] <- res{err: err}
				return
			}
			out[id] <- res{v: val(o[0])}
		}()
	}
	if r := <-out[1]; r.err != nil || r.v != 5 {
		t.Fatalf("the good request: %+v", r)
	}
	if r := <-out[2]; r.err == nil || !strings.Contains(r.err.Error(), "666") {
		t.Fatalf("the poisoned request: %+v", r)
	}
	if s := e.sizes(); !slices.Equal(s, []int{1}) {
		t.Fatalf("successful calls %v: the batch of 2 failed, then each alone", s)
	}
}

// The backlog is first come, first served: an END hands its slot to the
// oldest waiting sequence, and the END's own finish does not move the
// others back (a review found it did: B, C, D ran as B, D, C).
func TestDirectBacklogOrder(t *testing.T) {
	b, e, submit := directBatcher(t, DirectConfig{Groups: 1, Size: 1})
	e.block = make(chan struct{})
	var unblock sync.Once
	release := func() { unblock.Do(func() { close(e.block) }) }
	t.Cleanup(release)
	run := func(id uint64, start, end bool) <-chan error {
		tk, err := b.Enter(ID{N: id}, start, end)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, _, err := tk.Run(context.Background(), []engine.Tensor{i32(int32(id))}, submit)
			done <- err
		}()
		return done
	}
	backlogged := func(n int) {
		waitUntil(t, func() bool {
			b.mu.Lock()
			defer b.mu.Unlock()
			return len(b.dir.backlog) == n
		})
	}
	first := run(1, true, false) // sequence 1 holds the slot, its first request in the engine
	waitUntil(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		s := b.dir.occ[0]
		return s != nil && s.id.N == 1 && len(s.queue) == 0
	})
	var waits []<-chan error
	for i, id := range []uint64{2, 3, 4} {
		waits = append(waits, run(id, true, true))
		backlogged(i + 1)
	}
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-run(1, false, true); err != nil { // its END frees the slot
		t.Fatal(err)
	}
	for _, w := range waits {
		if err := <-w; err != nil {
			t.Fatal(err)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var order []uint64
	for _, c := range e.calls {
		order = append(order, c[0].corrid)
	}
	if fmt.Sprint(order) != "[1 1 2 3 4]" {
		t.Fatalf("sequences ran in the order %v, want 1 1 2 3 4", order)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("timed out waiting")
}

// Releasing a sequence whose slot is already free (its END's batch freed
// it; its finish releases again) leaves the backlog as it is: the oldest
// waiting sequence is next.
func TestDirectReleaseTwiceKeepsBacklogOrder(t *testing.T) {
	b, _, _ := directBatcher(t, DirectConfig{Groups: 1, Size: 1})
	b.mu.Lock()
	defer b.mu.Unlock()
	mk := func(n uint64) *seq {
		return &seq{id: ID{N: n}, pos: -1, queue: []*slotReq{{}}}
	}
	a, s2, s3, s4 := mk(1), mk(2), mk(3), mk(4)
	a.queue = nil
	b.placeLocked(a)
	for _, s := range []*seq{s2, s3, s4} {
		b.placeLocked(s)
	}
	b.releaseLocked(a) // the END's batch: the slot goes to 2
	b.releaseLocked(a) // its finish
	if b.dir.occ[0] != s2 || len(b.dir.backlog) != 2 || b.dir.backlog[0] != s3 || b.dir.backlog[1] != s4 {
		t.Fatalf("slot %v, backlog %v: want 2 in the slot, then 3, 4", b.dir.occ[0].id, b.dir.backlog)
	}
}

// A batch held for minimum_slot_utilization whose oldest request has
// waited exactly max_queue_delay is looked at again a moment later, not
// left until another request wakes its group (a review found it was).
func TestDirectHeldBatchAtTheDelay(t *testing.T) {
	b, _, _ := directBatcher(t, DirectConfig{Groups: 1, Size: 4, MinUtilization: 0.5, MaxDelay: time.Second})
	now := time.Unix(1000, 0)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.now = func() time.Time { return now }
	s := &seq{id: ID{N: 1}, pos: -1, queue: []*slotReq{{enq: now.Add(-time.Second)}}}
	b.placeLocked(s)
	if batch, wait := b.formLocked(0); batch != nil || wait <= 0 {
		t.Fatalf("batch %v wait %v: want held, with a timer", batch, wait)
	}
}
