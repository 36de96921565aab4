package batcher

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/fw-serve/fw/engine"
)

// raggedRun is a RunFunc for a model taking X (ragged, flat) and the made
// inputs: it records its inputs and answers Y = X (scattered back) and
// E = the made input at position 2 when echo, else the input at position
// 1 (either cut by rows).
type raggedRun struct {
	mu    sync.Mutex
	calls [][]engine.Tensor
	echo  bool
}

func (r *raggedRun) run(_ context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
	r.mu.Lock()
	cp := make([]engine.Tensor, len(in))
	for i, t := range in {
		cp[i] = engine.Tensor{DType: t.DType, Shape: append([]int64(nil), t.Shape...), Data: append([]byte(nil), t.Data...)}
	}
	r.calls = append(r.calls, cp)
	r.mu.Unlock()
	y := engine.Tensor{DType: in[0].DType, Shape: append([]int64(nil), in[0].Shape...), Data: append([]byte(nil), in[0].Data...)}
	src := in[1]
	if r.echo {
		src = in[2]
	}
	e := engine.Tensor{DType: src.DType, Shape: append([]int64(nil), src.Shape...), Data: append([]byte(nil), src.Data...)}
	return []engine.Tensor{y, e}, nil
}

func f32s(t engine.Tensor) []float32 { return append([]float32(nil), t.Float32s()...) }

func ints(t engine.Tensor) []int64 {
	if t.DType == engine.Int64 {
		return t.Int64s()
	}
	out := make([]int64, t.Len())
	for i := range out {
		out[i] = int64(t.At(i))
	}
	return out
}

// submitAll submits each request on its own goroutine, in order (each
// queued before the next is sent: batcher.WithTurn), and returns the
// outputs in that order.
func submitAll(t *testing.T, b *Batcher, reqs [][]engine.Tensor) [][]engine.Tensor {
	t.Helper()
	outs := make([][]engine.Tensor, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	ctxs, _ := chain(len(reqs))
	for i, in := range reqs {
		ctx := ctxs[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = b.Submit(ctx, in)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	return outs
}

// Requests whose ragged input differs in shape join one call: the input
// flat, a made input for each kind, the scattered output back in each
// request's shape and the other one cut by rows.
func TestRaggedBatchJoinsShapesAndMakesBatchInputs(t *testing.T) {
	kinds := []struct {
		kind  BatchInputKind
		dt    engine.DType
		shape []int64
		want  []int64
	}{
		// Requests: X [1,2], [2,3], [1,1] (rows 1, 2, 1; elements 2, 6, 1).
		{ElementCount, engine.Float32, []int64{3}, []int64{2, 6, 1}},
		{AccumulatedElementCount, engine.Int32, []int64{3}, []int64{2, 8, 9}},
		{AccumulatedElementCountWithZero, engine.Int64, []int64{4}, []int64{0, 2, 8, 9}},
		{MaxElementCountAsShape, engine.Float32, []int64{6}, []int64{0, 0, 0, 0, 0, 0}},
		{ItemShape, engine.Int32, []int64{4, 1}, []int64{2, 3, 3, 1}},
		{ItemShapeFlatten, engine.Float32, []int64{4}, []int64{2, 3, 3, 1}},
	}
	for _, k := range kinds {
		rr := &raggedRun{echo: k.kind == ItemShape} // its rows are the batch's
		// Inputs: 0 X (ragged), 1 Z (plain, [rows, 1]), 2 the made input.
		b := New(rr.run, Config{MaxBatchRows: 4, MaxDelay: 5 * time.Second, PreferredSizes: []int{4}, Ragged: &Ragged{
			Inputs:  []bool{true, false, false},
			Made:    []MadeInput{{Index: 2, Kind: k.kind, Source: 0, DType: k.dt}},
			Scatter: []int{0, -1},
		}}, nil)
		x := func(rows, n int64, v float32) engine.Tensor {
			vals := make([]float32, rows*n)
			for i := range vals {
				vals[i] = v + float32(i)
			}
			return engine.FromFloat32([]int64{rows, n}, vals)
		}
		z := func(rows int64) engine.Tensor { return engine.FromFloat32([]int64{rows, 1}, make([]float32, rows)) }
		reqs := [][]engine.Tensor{{x(1, 2, 10), z(1), {}}, {x(2, 3, 20), z(2), {}}, {x(1, 1, 30), z(1), {}}}
		outs := submitAll(t, b, reqs)
		if len(rr.calls) != 1 {
			t.Fatalf("%v: %d engine calls; the three requests (4 rows, a preferred size) make one", k.kind, len(rr.calls))
		}
		call := rr.calls[0]
		if !reflect.DeepEqual(call[0].Shape, []int64{9}) || !reflect.DeepEqual(f32s(call[0]), []float32{10, 11, 20, 21, 22, 23, 24, 25, 30}) {
			t.Fatalf("%v: X reached the engine as %v %v; want the 9 elements flat, in queue order", k.kind, call[0].Shape, f32s(call[0]))
		}
		if !reflect.DeepEqual(call[1].Shape, []int64{4, 1}) {
			t.Fatalf("%v: Z reached the engine as %v; want [4 1]", k.kind, call[1].Shape)
		}
		if call[2].DType != k.dt || !reflect.DeepEqual(call[2].Shape, k.shape) || !reflect.DeepEqual(ints(call[2]), k.want) {
			t.Fatalf("%v: made input %s %v %v; want %s %v %v", k.kind, call[2].DType, call[2].Shape, ints(call[2]), k.dt, k.shape, k.want)
		}
		for i, o := range outs {
			if !reflect.DeepEqual(o[0].Shape, reqs[i][0].Shape) || !reflect.DeepEqual(f32s(o[0]), f32s(reqs[i][0])) {
				t.Fatalf("%v: request %d got Y %v %v; want its own X %v %v", k.kind, i, o[0].Shape, f32s(o[0]), reqs[i][0].Shape, f32s(reqs[i][0]))
			}
		}
		if k.kind == ItemShape { // cut by rows: each request its own items' shapes
			want := [][]int64{{2}, {3, 3}, {1}}
			for i, o := range outs {
				if got := ints(o[1]); !reflect.DeepEqual(got, want[i]) {
					t.Fatalf("request %d got item shapes %v, want %v", i, got, want[i])
				}
			}
		}
		if err := b.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// A request alone is flattened and scattered too: the model always sees
// the ragged form.
func TestRaggedBatchOfOne(t *testing.T) {
	rr := &raggedRun{echo: true}
	b := New(rr.run, Config{MaxBatchRows: 8, CallerRuns: true, Ragged: &Ragged{
		Inputs:  []bool{true, false, false},
		Made:    []MadeInput{{Index: 2, Kind: AccumulatedElementCount, Source: 0, DType: engine.Float32}},
		Scatter: []int{0},
	}}, nil)
	defer b.Close(context.Background())
	x := engine.FromFloat32([]int64{1, 3}, []float32{1, 2, 3})
	out, err := b.Submit(context.Background(), []engine.Tensor{x, engine.FromFloat32([]int64{1, 1}, []float32{0}), {}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rr.calls[0][0].Shape, []int64{3}) || !reflect.DeepEqual(out[0].Shape, []int64{1, 3}) || !reflect.DeepEqual(ints(out[1]), []int64{3}) {
		t.Fatalf("engine got %v, answer %v and %v", rr.calls[0][0].Shape, out[0].Shape, ints(out[1]))
	}
}

// A scattered output that does not hold the elements of its source is the
// model's error, reported as such, never cut wrongly.
func TestRaggedScatterChecksElementCount(t *testing.T) {
	run := func(_ context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
		return []engine.Tensor{engine.FromFloat32([]int64{2}, []float32{1, 2})}, nil
	}
	b := New(run, Config{MaxBatchRows: 8, Ragged: &Ragged{Inputs: []bool{true}, Scatter: []int{0}}}, nil)
	defer b.Close(context.Background())
	_, err := b.Submit(context.Background(), []engine.Tensor{engine.FromFloat32([]int64{1, 3}, []float32{1, 2, 3})})
	if !errors.Is(err, ErrBadOutput) {
		t.Fatalf("err = %v, want ErrBadOutput", err)
	}
}

// Requests whose plain (not ragged) inputs differ in shape still never
// join, and a ragged input's rank still groups.
func TestRaggedKeepsOtherShapesApart(t *testing.T) {
	rg := &Ragged{Inputs: []bool{true, false}}
	sig := func(in ...engine.Tensor) string { return string(appendSignature(nil, in, rg)) }
	a := sig(engine.FromFloat32([]int64{1, 2}, make([]float32, 2)), engine.FromFloat32([]int64{1, 4}, make([]float32, 4)))
	if b := sig(engine.FromFloat32([]int64{1, 5}, make([]float32, 5)), engine.FromFloat32([]int64{1, 4}, make([]float32, 4))); a != b {
		t.Fatal("a ragged input's size split the group")
	}
	if b := sig(engine.FromFloat32([]int64{1, 2}, make([]float32, 2)), engine.FromFloat32([]int64{1, 3}, make([]float32, 3))); a == b {
		t.Fatal("a plain input's size did not split the group")
	}
	if b := sig(engine.FromFloat32([]int64{1, 1, 2}, make([]float32, 2)), engine.FromFloat32([]int64{1, 4}, make([]float32, 4))); a == b {
		t.Fatal("a ragged input's rank did not split the group")
	}
}

// WithTurn queues requests in the order of their chain whatever order
// their goroutines run in: the engine sees them so.
func TestWithTurnQueuesInChainOrder(t *testing.T) {
	var mu sync.Mutex
	var seen []float32
	run := func(_ context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
		mu.Lock()
		seen = append(seen, in[0].Float32s()...)
		mu.Unlock()
		return []engine.Tensor{in[0]}, nil
	}
	const n = 8
	b := New(run, Config{MaxBatchRows: n, MaxDelay: 5 * time.Second, PreferredSizes: []int{n}}, nil)
	defer b.Close(context.Background())
	chans := make([]chan struct{}, n)
	for i := range chans {
		chans[i] = make(chan struct{})
	}
	var wg sync.WaitGroup
	for i := n - 1; i >= 0; i-- { // started last first
		var prev <-chan struct{}
		if i > 0 {
			prev = chans[i-1]
		}
		var once sync.Once
		ctx := WithTurn(context.Background(), prev, func() { once.Do(func() { close(chans[i]) }) })
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.Submit(ctx, []engine.Tensor{engine.FromFloat32([]int64{1}, []float32{float32(i)})}); err != nil {
				t.Error(err)
			}
		}()
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	if want := []float32{0, 1, 2, 3, 4, 5, 6, 7}; !reflect.DeepEqual(seen, want) {
		t.Fatalf("engine saw %v, want chain order %v", seen, want)
	}
}

// StartAfter (Triton's TRITONSERVER_DELAY_SCHEDULER) cuts no batch until
// that many requests are queued, then batches as configured.
func TestStartAfterHoldsTheFirstBatch(t *testing.T) {
	run, calls := rowsRun()
	b := New(run, Config{MaxBatchRows: 8, CallerRuns: true, StartAfter: 5}, nil)
	defer b.Close(context.Background())
	var wg sync.WaitGroup
	ctxs, queued := chain(5)
	for i := range 5 {
		ctx := ctxs[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.Submit(ctx, []engine.Tensor{engine.FromFloat32([]int64{1}, []float32{float32(i)})}); err != nil {
				t.Error(err)
			}
		}()
		if i < 4 {
			<-queued[i]
			time.Sleep(2 * time.Millisecond)
			if n := len(calls()); n != 0 {
				t.Fatalf("a batch ran with %d of 5 requests queued", i+1)
			}
		}
	}
	wg.Wait()
	if _, err := b.Submit(context.Background(), []engine.Tensor{engine.FromFloat32([]int64{1}, []float32{9})}); err != nil {
		t.Fatal(err)
	}
	if calls := calls(); !reflect.DeepEqual(calls, []int{5, 1}) {
		t.Fatalf("engine calls of %v rows, want [5 1]: the five queued requests at once, then as configured", calls)
	}
}

// A request whose batch input could not hold what its source says is the
// request's fault: refused before it joins a batch, the others answered.
func TestRaggedRefusesWhatABatchInputCannotHold(t *testing.T) {
	rr := &raggedRun{}
	b := New(rr.run, Config{MaxBatchRows: 8, Ragged: &Ragged{
		Inputs:  []bool{true, false, false},
		Made:    []MadeInput{{Index: 2, Kind: ItemShape, Source: 0, DType: engine.Int32}},
		Scatter: []int{0, -1},
	}}, nil)
	defer b.Close(context.Background())
	huge := engine.Tensor{DType: engine.Float32, Shape: []int64{1, 0, 1 << 40}, Data: []byte{}} // no elements, an item size past int32
	_, err := b.Submit(context.Background(), []engine.Tensor{huge, engine.FromFloat32([]int64{1, 1}, []float32{0}), {}})
	var ie *engine.InputError
	if !errors.As(err, &ie) {
		t.Fatalf("err = %v, want an input error", err)
	}
	if _, err := b.Submit(context.Background(), []engine.Tensor{{}, engine.FromFloat32([]int64{1, 1}, []float32{0}), {}}); !errors.As(err, &ie) {
		t.Fatalf("a request without the source: err = %v, want an input error", err)
	}
	ok := engine.FromFloat32([]int64{1, 2}, []float32{1, 2})
	if _, err := b.Submit(context.Background(), []engine.Tensor{ok, engine.FromFloat32([]int64{1, 1}, []float32{0}), {}}); err != nil {
		t.Fatal(err)
	}
}

// Short of a preferred size, a batch taken before its delay holds at most
// the largest preferred size; one taken after it grows to MaxBatchRows
// (Triton's L0_batcher test_multi_batch_delayed_use_max_batch).
func TestPastTheDelayABatchGrowsToMaxRows(t *testing.T) {
	run, calls := rowsRun()
	b := New(run, Config{MaxBatchRows: 8, MaxDelay: 50 * time.Millisecond, PreferredSizes: []int{2, 6}, StartAfter: 3}, nil)
	defer b.Close(context.Background())
	var wg sync.WaitGroup
	send := func(rows int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.Submit(context.Background(), []engine.Tensor{engine.FromFloat32([]int64{int64(rows)}, make([]float32, rows))}); err != nil {
				t.Error(err)
			}
		}()
	}
	send(3)
	send(4)
	time.Sleep(100 * time.Millisecond) // past the delay, held by StartAfter
	send(1)
	wg.Wait()
	if calls := calls(); !reflect.DeepEqual(calls, []int{8}) {
		t.Fatalf("engine calls of %v rows, want [8]", calls)
	}
}

// rowsRun is a RunFunc answering its first input, and what it saw: the
// rows of each call.
func rowsRun() (RunFunc, func() []int) {
	var mu sync.Mutex
	var calls []int
	run := func(_ context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
		mu.Lock()
		calls = append(calls, int(in[0].Shape[0]))
		mu.Unlock()
		return []engine.Tensor{in[0]}, nil
	}
	return run, func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), calls...)
	}
}

// chain makes n contexts whose requests queue in order (WithTurn), and
// the channels closed as each is queued.
func chain(n int) ([]context.Context, []chan struct{}) {
	ctxs := make([]context.Context, n)
	queued := make([]chan struct{}, n)
	var prev chan struct{}
	for i := range n {
		mine := make(chan struct{})
		var once sync.Once
		ctxs[i] = WithTurn(context.Background(), prev, func() { once.Do(func() { close(mine) }) })
		queued[i], prev = mine, mine
	}
	return ctxs, queued
}
