package batcher

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fw-serve/fw/engine"
)

// recorder is a Stats that keeps every batch it is told about.
type recorder struct {
	mu      sync.Mutex
	batches []batchRec
}

type batchRec struct {
	rows, requests int
	err            error
}

func (s *recorder) BatchRun(rows, requests int, _, _ time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, batchRec{rows, requests, err})
}

func (s *recorder) QueueDepth(int) {}

func (s *recorder) all() []batchRec {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]batchRec(nil), s.batches...)
}

// gate makes a RunFunc wait until the test lets each call through, and tells
// the test when a call has started.
type gate struct {
	started chan []engine.Tensor
	release chan struct{}
}

func newGate() *gate {
	return &gate{started: make(chan []engine.Tensor, 100), release: make(chan struct{}, 100)}
}

// wrap returns a RunFunc that reports its start, waits for release, then
// calls next.
func (g *gate) wrap(next RunFunc) RunFunc {
	return func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
		g.started <- in
		select {
		case <-g.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return next(ctx, in)
	}
}

// open lets every future call through.
func (g *gate) open() {
	for i := 0; i < cap(g.release); i++ {
		g.release <- struct{}{}
	}
}

// affine computes out = in*2 + 1 ([N,K] -> [N,K]) and the row sums ([N,1]).
func affine(_ context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
	x := in[0].Float32s()
	n, k := in[0].Shape[0], in[0].Shape[1]
	out := make([]float32, len(x))
	sums := make([]float32, n)
	for i := range x {
		out[i] = x[i]*2 + 1
		sums[int64(i)/k] += x[i]
	}
	return []engine.Tensor{
		engine.FromFloat32([]int64{n, k}, out),
		engine.FromFloat32([]int64{n, 1}, sums),
	}, nil
}

// rowsTensor builds a float32 [rows, k] tensor whose element (r, c) is
// id*1000 + r*10 + c.
func rowsTensor(id, rows, k int) engine.Tensor {
	v := make([]float32, rows*k)
	for r := 0; r < rows; r++ {
		for c := 0; c < k; c++ {
			v[r*k+c] = float32(id*1000 + r*10 + c)
		}
	}
	return engine.FromFloat32([]int64{int64(rows), int64(k)}, v)
}

// checkAffine verifies that out is affine applied to rowsTensor(id, rows, k).
func checkAffine(id, rows, k int, out []engine.Tensor) error {
	if len(out) != 2 {
		return fmt.Errorf("request %d: %d outputs, want 2", id, len(out))
	}
	if got := out[0].Shape; len(got) != 2 || got[0] != int64(rows) || got[1] != int64(k) {
		return fmt.Errorf("request %d: output 0 shape %v, want [%d %d]", id, got, rows, k)
	}
	if got := out[1].Shape; len(got) != 2 || got[0] != int64(rows) || got[1] != 1 {
		return fmt.Errorf("request %d: output 1 shape %v, want [%d 1]", id, got, rows)
	}
	o, s := out[0].Float32s(), out[1].Float32s()
	if len(o) != rows*k || len(s) != rows {
		return fmt.Errorf("request %d: output lengths %d and %d", id, len(o), len(s))
	}
	for r := 0; r < rows; r++ {
		var sum float32
		for c := 0; c < k; c++ {
			x := float32(id*1000 + r*10 + c)
			sum += x
			if want := x*2 + 1; o[r*k+c] != want {
				return fmt.Errorf("request %d: out[%d][%d] = %v, want %v", id, r, c, o[r*k+c], want)
			}
		}
		if s[r] != sum {
			return fmt.Errorf("request %d: sum[%d] = %v, want %v", id, r, s[r], sum)
		}
	}
	return nil
}

// waitFor polls cond until it holds; it is a wait, not an assertion on time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func closeOK(t *testing.T, b *Batcher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

type result struct {
	out []engine.Tensor
	err error
}

// submitAsync submits in a goroutine and returns the channel of its result.
func submitAsync(ctx context.Context, b *Batcher, in ...engine.Tensor) <-chan result {
	ch := make(chan result, 1)
	go func() {
		out, err := b.Submit(ctx, in)
		ch <- result{out, err}
	}()
	return ch
}

// queueInOrder submits each input set in order, waiting for each to be queued
// before the next, so the queue order is known.
func queueInOrder(t *testing.T, b *Batcher, inputs ...[]engine.Tensor) []<-chan result {
	t.Helper()
	var chans []<-chan result
	for _, in := range inputs {
		want := b.QueueDepth() + 1
		chans = append(chans, submitAsync(context.Background(), b, in...))
		waitFor(t, fmt.Sprintf("queue depth %d", want), func() bool { return b.QueueDepth() == want })
	}
	return chans
}

func TestSplitOneToOneUnderConcurrency(t *testing.T) {
	for _, cfg := range []Config{
		{MaxBatchRows: 16, MaxDelay: time.Millisecond, Instances: 2},
		{MaxBatchRows: 64, MaxDelay: 0, Instances: 1},
		{MaxBatchRows: 8, MaxDelay: 200 * time.Microsecond, Instances: 3},
		{MaxBatchRows: 16, MaxDelay: time.Millisecond, Instances: 1, CallerRuns: true},
		{MaxBatchRows: 64, MaxDelay: 0, Instances: 1, CallerRuns: true},
	} {
		t.Run(fmt.Sprintf("rows=%d/delay=%v/instances=%d/callerruns=%v", cfg.MaxBatchRows, cfg.MaxDelay, cfg.Instances, cfg.CallerRuns), func(t *testing.T) {
			stats := &recorder{}
			b := New(affine, cfg, stats)
			defer closeOK(t, b)
			const n, k = 200, 4
			errs := make(chan error, n)
			var wg sync.WaitGroup
			for id := 0; id < n; id++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rows := 1 + id%7
					in := rowsTensor(id, rows, k)
					out, err := b.Submit(context.Background(), []engine.Tensor{in})
					if err != nil {
						errs <- fmt.Errorf("request %d: %w", id, err)
						return
					}
					if err := checkAffine(id, rows, k, out); err != nil {
						errs <- err
						return
					}
					// The input must be untouched.
					if err := checkSame(in, rowsTensor(id, rows, k)); err != nil {
						errs <- fmt.Errorf("request %d input: %w", id, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			total := 0
			for _, r := range stats.all() {
				if r.err != nil {
					t.Errorf("batch failed: %v", r.err)
				}
				if r.rows > cfg.MaxBatchRows {
					t.Errorf("batch of %d rows exceeds MaxBatchRows %d", r.rows, cfg.MaxBatchRows)
				}
				total += r.requests
			}
			if total != n {
				t.Errorf("stats saw %d requests, want %d", total, n)
			}
		})
	}
}

func checkSame(a, b engine.Tensor) error {
	if string(a.Data) != string(b.Data) {
		return errors.New("data differs")
	}
	return nil
}

func TestCoalescing(t *testing.T) {
	g := newGate()
	stats := &recorder{}
	b := New(g.wrap(affine), Config{MaxDelay: 0, Instances: 1}, stats)
	defer closeOK(t, b)

	queueBehindOne(t, b, g)
	got := stats.all()
	if len(got) != 2 || got[1].requests != 3 || got[1].rows != 6 {
		t.Fatalf("batches %+v, want [1 row/1 req, 6 rows/3 reqs]", got)
	}
}

// queueBehindOne submits request 0 (1 row), waits for its call to start
// behind g, queues requests 1, 2 and 3 (1, 2 and 3 rows), lets every call
// through and checks each answer.
func queueBehindOne(t *testing.T, b *Batcher, g *gate) {
	t.Helper()
	first := submitAsync(context.Background(), b, rowsTensor(0, 1, 4))
	<-g.started // request 0's call runs
	chans := queueInOrder(t, b,
		[]engine.Tensor{rowsTensor(1, 1, 4)},
		[]engine.Tensor{rowsTensor(2, 2, 4)},
		[]engine.Tensor{rowsTensor(3, 3, 4)})
	g.open()
	if r := <-first; r.err != nil {
		t.Fatal(r.err)
	}
	for i, ch := range chans {
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		if err := checkAffine(i+1, i+1, 4, r.out); err != nil {
			t.Error(err)
		}
	}
}

// blockFirst returns a RunFunc whose first n calls wait for release (keeping
// every engine slot busy) and whose later calls run next at once; started
// receives one value per blocked call.
func blockFirst(n int32, next RunFunc) (RunFunc, chan struct{}, chan struct{}) {
	started, release := make(chan struct{}, n), make(chan struct{})
	var calls atomic.Int32
	return func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
		if calls.Add(1) <= n {
			started <- struct{}{}
			<-release
		}
		return next(ctx, in)
	}, started, release
}

// Requests that queue while every engine slot is busy form one batch.
func TestQueuedRequestsFormOneBatchWhileBusy(t *testing.T) {
	stats := &recorder{}
	run, started, release := blockFirst(2, affine)
	b := New(run, Config{MaxBatchRows: 4, MaxDelay: time.Hour, Instances: 2}, stats)
	defer closeOK(t, b)
	// Full batches start at once even while the other worker is busy.
	busy := []<-chan result{submitAsync(context.Background(), b, rowsTensor(98, 4, 4))}
	<-started
	busy = append(busy, submitAsync(context.Background(), b, rowsTensor(99, 4, 4)))
	<-started
	var ins [][]engine.Tensor
	for id := 0; id < 4; id++ {
		ins = append(ins, []engine.Tensor{rowsTensor(id, 1, 4)})
	}
	chans := queueInOrder(t, b, ins...)
	close(release)
	for id, ch := range chans {
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		if err := checkAffine(id, 1, 4, r.out); err != nil {
			t.Error(err)
		}
	}
	for _, ch := range busy {
		if r := <-ch; r.err != nil {
			t.Fatal(r.err)
		}
	}
	found := false
	for _, got := range stats.all() {
		found = found || (got.rows == 4 && got.requests == 4)
	}
	if len(stats.all()) != 3 {
		t.Fatalf("batches %+v, want 3 engine calls", stats.all())
	}
	if !found {
		t.Fatalf("batches %+v, want one of 4 rows from 4 requests", stats.all())
	}
}

// With no engine call running, a batch starts at once whatever MaxDelay says.
func TestIdleEngineDoesNotWait(t *testing.T) {
	stats := &recorder{}
	b := New(affine, Config{MaxBatchRows: 64, MaxDelay: time.Hour}, stats)
	defer closeOK(t, b)
	for i := 0; i < 3; i++ {
		out, err := b.Submit(context.Background(), []engine.Tensor{rowsTensor(i, 2, 4)})
		if err != nil {
			t.Fatal(err)
		}
		if err := checkAffine(i, 2, 4, out); err != nil {
			t.Fatal(err)
		}
	}
	if got := stats.all(); len(got) != 3 {
		t.Fatalf("batches %+v, want 3 calls", got)
	}
}

// Close runs what is queued without waiting out MaxDelay.
func TestCloseRunsQueuedWithoutWaitingForDelay(t *testing.T) {
	run, started, release := blockFirst(1, affine)
	b := New(run, Config{MaxBatchRows: 64, MaxDelay: time.Hour, Instances: 1}, nil)
	busy := submitAsync(context.Background(), b, rowsTensor(99, 1, 4))
	<-started
	ch := queueInOrder(t, b, []engine.Tensor{rowsTensor(7, 2, 4)})[0]
	closed := make(chan error, 1)
	go func() { closed <- b.Close(context.Background()) }()
	close(release)
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := checkAffine(7, 2, 4, r.out); err != nil {
		t.Error(err)
	}
	if r := <-busy; r.err != nil {
		t.Fatal(r.err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

func TestMaxBatchRows(t *testing.T) {
	g := newGate()
	stats := &recorder{}
	b := New(g.wrap(affine), Config{MaxBatchRows: 4, MaxDelay: 0}, stats)
	defer closeOK(t, b)

	first := submitAsync(context.Background(), b, rowsTensor(0, 1, 4))
	<-g.started
	sizes := []int{2, 1, 2, 6, 1, 1}
	var ins [][]engine.Tensor
	for i, n := range sizes {
		ins = append(ins, []engine.Tensor{rowsTensor(i+1, n, 4)})
	}
	chans := queueInOrder(t, b, ins...)
	g.open()
	if r := <-first; r.err != nil {
		t.Fatal(r.err)
	}
	for i, ch := range chans {
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		if err := checkAffine(i+1, sizes[i], 4, r.out); err != nil {
			t.Error(err)
		}
	}
	// Arrival order is kept: [2 1] (adding 2 would make 5), [2] (6 does not
	// fit), [6] alone although it exceeds the bound, [1 1].
	want := []batchRec{{1, 1, nil}, {3, 2, nil}, {2, 1, nil}, {6, 1, nil}, {2, 2, nil}}
	got := stats.all()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("batches %+v, want %+v", got, want)
	}
}

func TestShapeGroupsNeverMix(t *testing.T) {
	g := newGate()
	stats := &recorder{}
	var mu sync.Mutex
	var seen []string
	run := func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
		t := in[0]
		if want := engine.NumElements(t.Shape) * int64(t.DType.Size()); int64(len(t.Data)) != want {
			return nil, fmt.Errorf("input of shape %v holds %d bytes", t.Shape, len(t.Data))
		}
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s%v", t.DType, t.Shape[1:]))
		mu.Unlock()
		// Echo the input, copied.
		out := engine.Tensor{DType: t.DType, Shape: append([]int64(nil), t.Shape...), Data: append([]byte(nil), t.Data...)}
		return []engine.Tensor{out}, nil
	}
	b := New(g.wrap(run), Config{MaxDelay: 0}, stats)
	defer closeOK(t, b)

	first := submitAsync(context.Background(), b, rowsTensor(0, 1, 3))
	<-g.started
	i64 := func(id, rows, k int) engine.Tensor {
		v := make([]int64, rows*k)
		for i := range v {
			v[i] = int64(id*1000 + i)
		}
		return engine.FromInt64([]int64{int64(rows), int64(k)}, v)
	}
	ins := [][]engine.Tensor{
		{rowsTensor(1, 1, 3)}, {rowsTensor(2, 2, 5)}, {i64(3, 1, 3)},
		{rowsTensor(4, 3, 3)}, {rowsTensor(5, 1, 5)}, {i64(6, 2, 3)},
		{rowsTensor(7, 2, 3)}, {rowsTensor(8, 2, 5)},
	}
	chans := queueInOrder(t, b, ins...)
	g.open()
	if r := <-first; r.err != nil {
		t.Fatal(r.err)
	}
	for i, ch := range chans {
		r := <-ch
		if r.err != nil {
			t.Fatalf("request %d: %v", i+1, r.err)
		}
		in := ins[i][0]
		if fmt.Sprint(r.out[0].Shape) != fmt.Sprint(in.Shape) || r.out[0].DType != in.DType || string(r.out[0].Data) != string(in.Data) {
			t.Errorf("request %d: got %s%v, want its own input back", i+1, r.out[0].DType, r.out[0].Shape)
		}
	}
	got := stats.all()
	if len(got) != 4 {
		t.Fatalf("batches %+v, want 4 (one before the gate opened, one per shape group)", got)
	}
	byGroup := map[string]int{}
	mu.Lock()
	for i, s := range seen[1:] {
		byGroup[s] = got[i+1].requests
	}
	mu.Unlock()
	want := map[string]int{"float32[3]": 3, "float32[5]": 3, "int64[3]": 2}
	if fmt.Sprint(byGroup) != fmt.Sprint(want) {
		t.Fatalf("requests per group %v, want %v", byGroup, want)
	}
}

var errPoison = errors.New("poisoned row")

func TestPoisonedRequestFailsAlone(t *testing.T) {
	for _, mode := range []string{"error", "panic"} {
		t.Run(mode, func(t *testing.T) {
			g := newGate()
			stats := &recorder{}
			run := func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
				for _, v := range in[0].Float32s() {
					if v < 0 {
						if mode == "panic" {
							panic("negative input")
						}
						return nil, errPoison
					}
				}
				return affine(ctx, in)
			}
			b := New(g.wrap(run), Config{MaxDelay: 0}, stats)
			defer closeOK(t, b)

			first := submitAsync(context.Background(), b, rowsTensor(0, 1, 4))
			<-g.started
			poisoned := rowsTensor(2, 2, 4)
			poisoned.Float32s()[5] = -1
			ins := [][]engine.Tensor{{rowsTensor(1, 1, 4)}, {poisoned}, {rowsTensor(3, 3, 4)}, {rowsTensor(4, 1, 4)}}
			chans := queueInOrder(t, b, ins...)
			g.open()
			if r := <-first; r.err != nil {
				t.Fatal(r.err)
			}
			for i, ch := range chans {
				r := <-ch
				id := i + 1
				if id == 2 {
					want := errPoison
					if mode == "panic" {
						want = ErrPanic
					}
					if !errors.Is(r.err, want) {
						t.Errorf("poisoned request: err %v, want %v", r.err, want)
					}
					continue
				}
				if r.err != nil {
					t.Errorf("request %d: %v", id, r.err)
					continue
				}
				if err := checkAffine(id, []int{0, 1, 2, 3, 1}[id], 4, r.out); err != nil {
					t.Error(err)
				}
			}
			got := stats.all()
			// The first request, the failed batch of 4, then 4 retries alone.
			if len(got) != 6 || got[1].requests != 4 || got[1].err == nil {
				t.Fatalf("batches %+v", got)
			}
			for i, r := range got[2:] {
				if r.requests != 1 || (r.err != nil) != (i == 1) {
					t.Errorf("retry %d: %+v", i, r)
				}
			}
			// The batcher keeps working.
			out, err := b.Submit(context.Background(), []engine.Tensor{rowsTensor(9, 2, 4)})
			if err != nil {
				t.Fatal(err)
			}
			if err := checkAffine(9, 2, 4, out); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestPanicAlone(t *testing.T) {
	calls := 0
	run := func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
		calls++ // one worker: calls are serial
		if calls == 1 {
			panic(fmt.Sprintf("boom %d", calls))
		}
		return affine(ctx, in)
	}
	b := New(run, Config{MaxDelay: 0}, nil)
	defer closeOK(t, b)
	_, err := b.Submit(context.Background(), []engine.Tensor{rowsTensor(1, 1, 4)})
	if !errors.Is(err, ErrPanic) {
		t.Fatalf("err %v, want ErrPanic", err)
	}
	out, err := b.Submit(context.Background(), []engine.Tensor{rowsTensor(2, 1, 4)})
	if err != nil {
		t.Fatal(err)
	}
	if err := checkAffine(2, 1, 4, out); err != nil {
		t.Error(err)
	}
}

func TestQueueFull(t *testing.T) {
	g := newGate()
	b := New(g.wrap(affine), Config{MaxDelay: 0, MaxQueue: 2}, nil)
	defer closeOK(t, b)

	first := submitAsync(context.Background(), b, rowsTensor(0, 1, 4))
	<-g.started // running, so not counted as waiting
	chans := queueInOrder(t, b, []engine.Tensor{rowsTensor(1, 1, 4)}, []engine.Tensor{rowsTensor(2, 1, 4)})
	_, err := b.Submit(context.Background(), []engine.Tensor{rowsTensor(3, 1, 4)})
	if !errors.Is(err, ErrQueueFull) {
		t.Fatalf("err %v, want ErrQueueFull", err)
	}
	g.open()
	for i, ch := range append([]<-chan result{first}, chans...) {
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		if err := checkAffine(i, 1, 4, r.out); err != nil {
			t.Error(err)
		}
	}
	if d := b.QueueDepth(); d != 0 {
		t.Errorf("queue depth %d after draining", d)
	}
}

func TestCloseDrains(t *testing.T) {
	g := newGate()
	b := New(g.wrap(affine), Config{MaxDelay: 0, Instances: 2}, nil)

	first := submitAsync(context.Background(), b, rowsTensor(0, 1, 4))
	<-g.started
	second := submitAsync(context.Background(), b, rowsTensor(1, 2, 4))
	<-g.started // both workers busy
	chans := queueInOrder(t, b, []engine.Tensor{rowsTensor(2, 3, 4)}, []engine.Tensor{rowsTensor(3, 1, 4)})
	closed := make(chan error, 1)
	go func() { closed <- b.Close(context.Background()) }()
	waitFor(t, "Close to start", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.closed
	})
	if _, err := b.Submit(context.Background(), []engine.Tensor{rowsTensor(9, 1, 4)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Submit after Close: %v, want ErrClosed", err)
	}
	g.open()
	rows := []int{1, 2, 3, 1}
	for i, ch := range append([]<-chan result{first, second}, chans...) {
		r := <-ch
		if r.err != nil {
			t.Fatalf("request %d: %v", i, r.err)
		}
		if err := checkAffine(i, rows[i], 4, r.out); err != nil {
			t.Error(err)
		}
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestCloseTimeoutAbandons(t *testing.T) {
	g := newGate() // never released: calls end only when their ctx is cancelled
	b := New(g.wrap(affine), Config{MaxDelay: 0}, nil)
	running := submitAsync(context.Background(), b, rowsTensor(0, 1, 4))
	<-g.started
	queued := queueInOrder(t, b, []engine.Tensor{rowsTensor(1, 1, 4)})[0]

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close with a done ctx: %v, want context.Canceled", err)
	}
	if r := <-running; !errors.Is(r.err, context.Canceled) {
		t.Errorf("running request: %v, want the engine's context error", r.err)
	}
	if r := <-queued; !errors.Is(r.err, ErrClosed) {
		t.Errorf("queued request: %v, want ErrClosed", r.err)
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestCancelWhileQueued(t *testing.T) {
	g := newGate()
	var mu sync.Mutex
	var ran []float32
	run := func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
		mu.Lock()
		for r := int64(0); r < in[0].Shape[0]; r++ {
			ran = append(ran, in[0].Float32s()[r*in[0].Shape[1]])
		}
		mu.Unlock()
		return affine(ctx, in)
	}
	b := New(g.wrap(run), Config{MaxDelay: 0}, nil)
	defer closeOK(t, b)

	first := submitAsync(context.Background(), b, rowsTensor(0, 1, 4))
	<-g.started
	ctx, cancel := context.WithCancel(context.Background())
	doomed := submitAsync(ctx, b, rowsTensor(5, 1, 4))
	waitFor(t, "the request to queue", func() bool { return b.QueueDepth() == 1 })
	kept := queueInOrder(t, b, []engine.Tensor{rowsTensor(6, 1, 4)})[0]
	cancel()
	if r := <-doomed; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled request: %v, want context.Canceled", r.err)
	}
	if d := b.QueueDepth(); d != 1 {
		t.Errorf("queue depth %d after cancel, want 1", d)
	}
	g.open()
	if r := <-first; r.err != nil {
		t.Fatal(r.err)
	}
	if r := <-kept; r.err != nil {
		t.Fatal(r.err)
	} else if err := checkAffine(6, 1, 4, r.out); err != nil {
		t.Error(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, v := range ran {
		if v == 5000 {
			t.Fatalf("the cancelled request ran (engine saw rows %v)", ran)
		}
	}
}

func TestCancelWhileRunning(t *testing.T) {
	g := newGate()
	b := New(g.wrap(affine), Config{MaxDelay: 0}, nil)
	defer closeOK(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	ch := submitAsync(ctx, b, rowsTensor(1, 1, 4))
	<-g.started
	cancel()
	if r := <-ch; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled while the engine still runs", r.err)
	}
	g.open()
	out, err := b.Submit(context.Background(), []engine.Tensor{rowsTensor(2, 1, 4)})
	if err != nil {
		t.Fatal(err)
	}
	if err := checkAffine(2, 1, 4, out); err != nil {
		t.Error(err)
	}
}

func TestCancelledBeforeSubmit(t *testing.T) {
	b := New(func(context.Context, []engine.Tensor) ([]engine.Tensor, error) {
		return nil, errors.New("must not run")
	}, Config{}, nil)
	defer closeOK(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Submit(ctx, []engine.Tensor{rowsTensor(1, 1, 4)}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

func TestMaxDelayZero(t *testing.T) {
	stats := &recorder{}
	b := New(affine, Config{MaxDelay: 0, MaxBatchRows: 64}, stats)
	defer closeOK(t, b)
	for id := 0; id < 20; id++ {
		out, err := b.Submit(context.Background(), []engine.Tensor{rowsTensor(id, 1+id%3, 4)})
		if err != nil {
			t.Fatal(err)
		}
		if err := checkAffine(id, 1+id%3, 4, out); err != nil {
			t.Fatal(err)
		}
	}
	// Sequential callers never overlap, so nothing ever waited for company.
	for _, r := range stats.all() {
		if r.requests != 1 {
			t.Fatalf("batch %+v: sequential requests were coalesced", r)
		}
	}
}

func TestBadOutputFailsBatch(t *testing.T) {
	g := newGate()
	run := func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
		return []engine.Tensor{engine.FromFloat32([]int64{1, 1}, []float32{0})}, nil // always one row
	}
	stats := &recorder{}
	b := New(g.wrap(run), Config{MaxDelay: 0}, stats)
	defer closeOK(t, b)
	first := submitAsync(context.Background(), b, rowsTensor(0, 2, 4))
	<-g.started
	chans := queueInOrder(t, b, []engine.Tensor{rowsTensor(1, 1, 4)}, []engine.Tensor{rowsTensor(2, 1, 4)})
	g.open()
	for i, ch := range append([]<-chan result{first}, chans...) {
		if r := <-ch; !errors.Is(r.err, ErrBadOutput) {
			t.Errorf("request %d: %v, want ErrBadOutput", i, r.err)
		}
	}
	if got := stats.all(); len(got) != 2 {
		t.Fatalf("batches %+v: a bad output must fail the batch without retries", got)
	}
}

func TestInvalidInputs(t *testing.T) {
	b := New(affine, Config{}, nil)
	defer closeOK(t, b)
	f := func(name string, in []engine.Tensor) {
		t.Helper()
		_, err := b.Submit(context.Background(), in)
		var ie *engine.InputError
		if !errors.As(err, &ie) {
			t.Errorf("%s: err %v, want *engine.InputError", name, err)
		}
	}
	f("no inputs", nil)
	f("scalar", []engine.Tensor{engine.FromFloat32(nil, []float32{1})})
	f("zero rows", []engine.Tensor{engine.FromFloat32([]int64{0, 4}, nil)})
	f("short data", []engine.Tensor{engine.FromFloat32([]int64{2, 4}, make([]float32, 7))})
	f("batch sizes differ", []engine.Tensor{rowsTensor(1, 2, 4), rowsTensor(1, 3, 4)})
}

func TestDefaults(t *testing.T) {
	b := New(affine, Config{}, nil)
	defer closeOK(t, b)
	want := Config{MaxBatchRows: 64, MaxDelay: 0, Instances: 1, MaxQueue: 1024}
	if got := b.Config(); !reflect.DeepEqual(got, want) {
		t.Errorf("Config() = %+v, want %+v", got, want)
	}
	if got := DefaultConfig(); got.MaxDelay != time.Millisecond || got.MaxBatchRows != 64 {
		t.Errorf("DefaultConfig() = %+v", got)
	}
}

func BenchmarkSubmit(b *testing.B) {
	// The engine does next to nothing, so the figure is the batcher's
	// overhead per request (plus the output allocation).
	run := func(_ context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
		t := in[0]
		out := engine.Tensor{DType: t.DType, Shape: append([]int64(nil), t.Shape...), Data: make([]byte, len(t.Data))}
		copy(out.Data, t.Data)
		return []engine.Tensor{out}, nil
	}
	for _, delay := range []time.Duration{0, 100 * time.Microsecond} {
		b.Run(fmt.Sprintf("delay=%v", delay), func(b *testing.B) {
			bt := New(run, Config{MaxBatchRows: 64, MaxDelay: delay, MaxQueue: 1 << 16}, nil)
			defer bt.Close(context.Background())
			b.SetParallelism(32)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				in := []engine.Tensor{engine.FromFloat32([]int64{1, 16}, make([]float32, 16))}
				for pb.Next() {
					out, err := bt.Submit(context.Background(), in)
					if err != nil || len(out) != 1 || math.IsNaN(float64(out[0].Float32s()[0])) {
						b.Fatalf("Submit: %v", err)
					}
				}
			})
		})
	}
}

// NewPool gives each worker its own engine: two calls in flight at once run
// on the two run functions, one each (as two model instances would).
func TestPoolWorkersUseTheirOwnEngine(t *testing.T) {
	started := make(chan int, 2)
	release := make(chan struct{})
	engineOf := func(id int) RunFunc {
		return func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
			started <- id
			<-release
			return affine(ctx, in)
		}
	}
	b := NewPool([]RunFunc{engineOf(1), engineOf(2)}, Config{MaxBatchRows: 4, MaxDelay: time.Hour}, nil)
	defer closeOK(t, b)
	if got := b.Config().Instances; got != 2 {
		t.Fatalf("Instances = %d, want 2 (one per engine)", got)
	}
	first := submitAsync(context.Background(), b, rowsTensor(1, 4, 4))
	second := submitAsync(context.Background(), b, rowsTensor(2, 4, 4))
	seen := map[int]bool{}
	for range 2 {
		select {
		case id := <-started:
			seen[id] = true
		case <-time.After(30 * time.Second):
			t.Fatal("two full batches did not run at once on two engines")
		}
	}
	if !seen[1] || !seen[2] {
		t.Fatalf("engines used: %v, want both", seen)
	}
	close(release)
	for i, ch := range []<-chan result{first, second} {
		if r := <-ch; r.err != nil {
			t.Fatal(r.err)
		} else if err := checkAffine(i+1, 4, 4, r.out); err != nil {
			t.Error(err)
		}
	}
}

// A request that would still be queued when its deadline passes, by the pace
// of the recent engine calls, is refused at once with ErrQueueFull instead of
// waiting in the queue to time out; one with time enough is queued. With
// nothing waiting, nothing is refused.
func TestRefusesWhatCannotBeServedInTime(t *testing.T) {
	var calls atomic.Int32
	started, release := make(chan struct{}, 64), make(chan struct{})
	run := func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
		if calls.Add(1) > 1 { // the first call only sets the pace
			started <- struct{}{}
			<-release
		}
		time.Sleep(50 * time.Millisecond)
		return affine(ctx, in)
	}
	b := New(run, Config{MaxBatchRows: 1, MaxDelay: time.Hour, MaxQueue: 100}, nil)
	defer closeOK(t, b)
	if _, err := b.Submit(context.Background(), []engine.Tensor{rowsTensor(0, 1, 4)}); err != nil {
		t.Fatal(err)
	}
	busy := submitAsync(context.Background(), b, rowsTensor(1, 1, 4))
	<-started // one call runs (held); everything else queues behind it
	var chans []<-chan result
	for id := 2; id < 12; id++ {
		chans = append(chans, submitAsync(context.Background(), b, rowsTensor(id, 1, 4)))
	}
	deadline := time.Now().Add(30 * time.Second)
	for b.QueueDepth() < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("%d queued, want 10", b.QueueDepth())
		}
		time.Sleep(time.Millisecond)
	}
	// 10 calls of ~50 ms ahead: 100 ms is not enough, a minute is.
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	// (Waiting would end in context.DeadlineExceeded instead.)
	if _, err := b.Submit(short, []engine.Tensor{rowsTensor(20, 1, 4)}); !errors.Is(err, ErrQueueFull) || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("a request that cannot be served in time: %v, want ErrQueueFull at once", err)
	}
	long, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	chans = append(chans, submitAsync(long, b, rowsTensor(21, 1, 4)))
	close(release)
	for _, ch := range append(chans, busy) {
		if r := <-ch; r.err != nil {
			t.Fatalf("a request with time enough: %v", r.err)
		}
	}
}

// With PreferredSizes (Triton's preferred_batch_size) an idle engine holds
// a batch short of it for MaxDelay, and sends it at once when it has them;
// a request held so counts as waiting, so MaxQueue refuses the next one
// (Triton's queue policy answers UNAVAILABLE so).
func TestPreferredSizesHoldAnIdleBatch(t *testing.T) {
	const delay = 300 * time.Millisecond
	stats := &recorder{}
	b := New(affine, Config{MaxBatchRows: 8, MaxDelay: delay, PreferredSizes: []int{4}}, stats)
	defer closeOK(t, b)
	start := time.Now()
	out, err := b.Submit(context.Background(), []engine.Tensor{rowsTensor(0, 1, 4)})
	if err != nil || checkAffine(0, 1, 4, out) != nil {
		t.Fatalf("held request: %v", err)
	}
	if d := time.Since(start); d < delay {
		t.Fatalf("a lone request ran after %v, not held for %v", d, delay)
	}
	// Four rows at once: sent as soon as they are queued.
	start = time.Now()
	var chans []<-chan result
	for i := 1; i <= 4; i++ {
		chans = append(chans, submitAsync(context.Background(), b, rowsTensor(i, 1, 4)))
	}
	for i, ch := range chans {
		r := <-ch
		if r.err != nil || checkAffine(i+1, 1, 4, r.out) != nil {
			t.Fatalf("request %d: %v", i+1, r.err)
		}
	}
	if d := time.Since(start); d >= delay {
		t.Fatalf("a preferred batch waited %v", d)
	}
	if got := stats.all(); len(got) != 2 || got[1].rows != 4 {
		t.Fatalf("batches %+v, want 1 then 4 rows", got)
	}

	q := New(affine, Config{MaxBatchRows: 8, MaxDelay: delay, PreferredSizes: []int{8}, MaxQueue: 1}, nil)
	defer closeOK(t, q)
	held := submitAsync(context.Background(), q, rowsTensor(0, 1, 4))
	for q.QueueDepth() != 1 {
		time.Sleep(time.Millisecond)
	}
	if _, err := q.Submit(context.Background(), []engine.Tensor{rowsTensor(1, 1, 4)}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("a second request while one is held: %v, want ErrQueueFull", err)
	}
	if r := <-held; r.err != nil {
		t.Fatal(r.err)
	}
}

// SubmitChecked takes the rows the caller's check counted and runs the
// request as Submit would; a count no check could give is refused.
func TestSubmitChecked(t *testing.T) {
	b := New(affine, Config{MaxBatchRows: 64, MaxDelay: time.Millisecond}, &recorder{})
	defer closeOK(t, b)
	out, _, err := b.SubmitChecked(context.Background(), []engine.Tensor{rowsTensor(7, 3, 4)}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkAffine(7, 3, 4, out); err != nil {
		t.Fatal(err)
	}
	for _, rows := range []int64{0, -1, math.MaxInt64} {
		var ie *engine.InputError
		if _, _, err := b.SubmitChecked(context.Background(), []engine.Tensor{rowsTensor(1, 3, 4)}, rows); !errors.As(err, &ie) {
			t.Fatalf("rows %d: %v, want an InputError", rows, err)
		}
	}
	if _, _, err := b.SubmitChecked(context.Background(), nil, 1); err == nil {
		t.Fatal("no inputs accepted")
	}
}

type ctxKey struct{}

// RequestContext: an engine call of one request runs with that request's
// context (its values reach the run), cancelled as well when the batcher
// closes under it; without it, the batcher's own context.
func TestRequestContext(t *testing.T) {
	for _, withReq := range []bool{true, false} {
		seen := make(chan any, 1)
		release := make(chan struct{})
		run := func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
			seen <- ctx.Value(ctxKey{})
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return in, nil
		}
		b := New(run, Config{Instances: 1, MaxBatchRows: 8, MaxQueue: 4, RequestContext: withReq}, nil)
		ctx := context.WithValue(context.Background(), ctxKey{}, "request")
		done := make(chan error, 1)
		go func() {
			_, err := b.Submit(ctx, []engine.Tensor{rowsTensor(1, 1, 2)})
			done <- err
		}()
		got := <-seen
		if withReq && got != "request" || !withReq && got != nil {
			t.Fatalf("RequestContext %v: the run saw %v", withReq, got)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// Closed with a run in flight that waits on its context: the
		// close's deadline cancels it, request context or not.
		release = make(chan struct{})
		go func() {
			_, err := b.Submit(ctx, []engine.Tensor{rowsTensor(2, 1, 2)})
			done <- err
		}()
		<-seen
		cctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_ = b.Close(cctx)
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("RequestContext %v: a run on the request's context outlived the batcher's close", withReq)
		}
	}
}

// paddingRecorder is a recorder that is told the padding rows too.
type paddingRecorder struct {
	recorder
	padding atomic.Int64
}

func (s *paddingRecorder) BatchRunPadded(rows, padding, requests int, q, d time.Duration, err error) {
	s.padding.Add(int64(padding))
	s.BatchRun(rows, requests, q, d, err)
}

// A WithWhole request is an engine call of its own: requests that queue
// behind a busy engine, which would form one batch, run apart; its padding
// rows are reported to a PaddedStats with the call.
func TestWholeRequestsRunAlone(t *testing.T) {
	stats := &paddingRecorder{}
	run, started, release := blockFirst(1, affine)
	b := New(run, Config{MaxBatchRows: 8, MaxDelay: time.Hour}, stats)
	defer closeOK(t, b)
	busy := submitAsync(context.Background(), b, rowsTensor(99, 1, 4))
	<-started
	var chans []<-chan result
	for id := range 3 {
		ctx := WithWhole(context.Background(), id) // 0, 1 and 2 rows of padding
		chans = append(chans, submitAsync(ctx, b, rowsTensor(id, 2, 4)))
	}
	waitFor(t, "three queued", func() bool { return b.QueueDepth() == 3 })
	close(release)
	for id, ch := range chans {
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		if err := checkAffine(id, 2, 4, r.out); err != nil {
			t.Error(err)
		}
	}
	if r := <-busy; r.err != nil {
		t.Fatal(r.err)
	}
	if all := stats.all(); len(all) != 4 {
		t.Fatalf("calls %+v, want 4: the whole requests one each", all)
	}
	for _, c := range stats.all()[1:] {
		if c.rows != 2 || c.requests != 1 {
			t.Fatalf("calls %+v", stats.all())
		}
	}
	if p := stats.padding.Load(); p != 3 {
		t.Fatalf("padding %d, want 3", p)
	}
	b.mu.Lock()
	groups := len(b.groups)
	b.mu.Unlock()
	if groups != 1 { // the plain request's; the whole ones' are dropped once empty
		t.Fatalf("%d shape groups kept", groups)
	}
}
