package batcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fw-serve/fw/engine"
)

// matmul42 is Triton's nobatch sample as an engine would run it: x [4] ->
// y [2] = x @ [[1,0],[0,1],[1,1],[2,-1]]. Like ONNX Runtime on a graph with
// fixed shapes, it refuses any other input shape.
func matmul42(_ context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
	if len(in) != 1 || engine.FormatShape(in[0].Shape) != "[4]" {
		return nil, fmt.Errorf("got input shape %s, the model takes [4]", engine.FormatShape(in[0].Shape))
	}
	x := in[0].Float32s()
	return []engine.Tensor{engine.FromFloat32([]int64{2}, []float32{x[0] + x[2] + 2*x[3], x[1] + x[2] - x[3]})}, nil
}

// double1 is the fixed_batch1 sample: x [1,16] -> y = 2x [1,16]; a joined
// batch [k,16] is refused, as ONNX Runtime refuses it.
func double1(_ context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
	if len(in) != 1 || engine.FormatShape(in[0].Shape) != "[1, 16]" {
		return nil, fmt.Errorf("got input shape %s, the model takes [1, 16]", engine.FormatShape(in[0].Shape))
	}
	y := make([]float32, 16)
	for i, v := range in[0].Float32s() {
		y[i] = 2 * v
	}
	return []engine.Tensor{engine.FromFloat32([]int64{1, 16}, y)}, nil
}

// Under concurrency an unbatched model's requests are never joined: every
// engine call holds one request, counted as one row, and none fails (a
// joined [k,16] batch of a fixed-batch-1 model failed and was retried alone:
// right answers, but fw_batch_errors_total rose).
func TestUnbatchedNeverJoined(t *testing.T) {
	const clients, each = 32, 60
	for _, instances := range []int{1, 3} {
		for _, model := range []struct {
			name  string
			run   RunFunc
			input func(id int) engine.Tensor
			check func(id int, out []engine.Tensor) error
		}{
			{"nobatch", matmul42, func(id int) engine.Tensor {
				return engine.FromFloat32([]int64{4}, []float32{float32(id), 1, -2, 0.5})
			}, func(id int, out []engine.Tensor) error {
				want := []float32{float32(id) - 2 + 1, 1 - 2 - 0.5}
				if got := out[0].Float32s(); len(out) != 1 || engine.FormatShape(out[0].Shape) != "[2]" || got[0] != want[0] || got[1] != want[1] {
					return fmt.Errorf("request %d: %s %v, want [2] %v", id, engine.FormatShape(out[0].Shape), got, want)
				}
				return nil
			}},
			{"fixed_batch1", double1, func(id int) engine.Tensor {
				return rowsTensor(id, 1, 16)
			}, func(id int, out []engine.Tensor) error {
				x := rowsTensor(id, 1, 16).Float32s()
				got := out[0].Float32s()
				if len(out) != 1 || engine.FormatShape(out[0].Shape) != "[1, 16]" || len(got) != 16 {
					return fmt.Errorf("request %d: output shape %s", id, engine.FormatShape(out[0].Shape))
				}
				for i := range x {
					if got[i] != 2*x[i] {
						return fmt.Errorf("request %d: y[%d] = %g, want %g", id, i, got[i], 2*x[i])
					}
				}
				return nil
			}},
		} {
			t.Run(fmt.Sprintf("%s/instances=%d", model.name, instances), func(t *testing.T) {
				stats := &recorder{}
				var inFlight, most atomic.Int32
				run := func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
					n := inFlight.Add(1)
					defer inFlight.Add(-1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(20 * time.Microsecond) // let the others queue up behind this call
					return model.run(ctx, in)
				}
				b := New(run, Config{MaxBatchRows: 64, MaxDelay: time.Millisecond, Instances: instances, Unbatched: true}, stats)
				defer closeOK(t, b)
				errs := make(chan error, clients*each)
				var wg sync.WaitGroup
				for c := 0; c < clients; c++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for k := 0; k < each; k++ {
							id := c*each + k
							out, timing, err := b.SubmitTimed(context.Background(), []engine.Tensor{model.input(id)})
							if err == nil {
								err = model.check(id, out)
							}
							if err == nil && timing.BatchRows != 1 {
								err = fmt.Errorf("request %d: Timing.BatchRows %d, want 1", id, timing.BatchRows)
							}
							if err != nil {
								errs <- err
							}
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
				calls := stats.all()
				if len(calls) != clients*each {
					t.Errorf("%d engine calls for %d requests, want one each", len(calls), clients*each)
				}
				for _, c := range calls {
					if c.rows != 1 || c.requests != 1 || c.err != nil {
						t.Errorf("engine call of %d rows from %d requests (err %v); want 1 row from 1 request, no error", c.rows, c.requests, c.err)
					}
				}
				if m := most.Load(); m > int32(instances) {
					t.Errorf("%d engine calls ran at once with %d instances", m, instances)
				}
			})
		}
	}
}

// Queued requests of an unbatched model wait in arrival order and run one
// per call; MaxQueue still bounds them.
func TestUnbatchedQueue(t *testing.T) {
	g := newGate()
	b := New(g.wrap(double1), Config{MaxDelay: time.Hour, MaxQueue: 3, Unbatched: true}, nil)
	defer closeOK(t, b)
	first := submitAsync(context.Background(), b, rowsTensor(0, 1, 16))
	<-g.started
	chans := queueInOrder(t, b, []engine.Tensor{rowsTensor(1, 1, 16)}, []engine.Tensor{rowsTensor(2, 1, 16)}, []engine.Tensor{rowsTensor(3, 1, 16)})
	if _, err := b.Submit(context.Background(), []engine.Tensor{rowsTensor(4, 1, 16)}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("a fourth queued request: %v, want ErrQueueFull", err)
	}
	g.open()
	for i, ch := range append([]<-chan result{first}, chans...) {
		r := <-ch
		if r.err != nil {
			t.Fatalf("request %d: %v", i, r.err)
		}
		if got, want := r.out[0].Float32s()[1], 2*rowsTensor(i, 1, 16).Float32s()[1]; got != want {
			t.Errorf("request %d: y[1] = %g, want %g", i, got, want)
		}
	}
	for i := 1; i < 4; i++ {
		in := <-g.started // MaxDelay an hour: an unbatched request never waits for company
		if engine.FormatShape(in[0].Shape) != "[1, 16]" || in[0].Float32s()[0] != float32(i*1000) {
			t.Errorf("engine call %d got %s starting %g; want request %d alone", i, engine.FormatShape(in[0].Shape), in[0].Float32s()[0], i)
		}
	}
}

// Whole tensors: a scalar input is accepted, an output's axis 0 is not
// compared with the rows, but its bytes must still fit its shape.
func TestUnbatchedShapes(t *testing.T) {
	scalarIn := []engine.Tensor{engine.FromFloat32([]int64{}, []float32{3})}
	echo := func(_ context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
		return []engine.Tensor{engine.FromFloat32([]int64{}, []float32{in[0].Float32s()[0] + 1}), engine.FromFloat32([]int64{5}, make([]float32, 5))}, nil
	}
	b := New(echo, Config{Unbatched: true}, nil)
	defer closeOK(t, b)
	out, err := b.Submit(context.Background(), scalarIn)
	if err != nil {
		t.Fatal(err)
	}
	if len(out[0].Shape) != 0 || out[0].Float32s()[0] != 4 {
		t.Errorf("scalar output %s %v, want [] [4]", engine.FormatShape(out[0].Shape), out[0].Float32s())
	}
	short := New(func(context.Context, []engine.Tensor) ([]engine.Tensor, error) {
		return []engine.Tensor{engine.FromFloat32([]int64{2}, []float32{1})}, nil
	}, Config{Unbatched: true}, nil)
	defer closeOK(t, short)
	if _, err := short.Submit(context.Background(), scalarIn); !errors.Is(err, ErrBadOutput) {
		t.Errorf("output [2] holding one float: %v, want ErrBadOutput", err)
	}
	var ie *engine.InputError
	if _, err := b.Submit(context.Background(), []engine.Tensor{engine.FromFloat32([]int64{2}, []float32{1})}); !errors.As(err, &ie) {
		t.Errorf("input [2] holding one float: %v, want an *engine.InputError", err)
	}
}

// A model without inputs (a Python model's) is unbatched: each request runs
// alone, through Submit and SubmitChecked. A batched one is refused.
func TestUnbatchedNoInputs(t *testing.T) {
	seven := func(_ context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
		return []engine.Tensor{engine.FromFloat32([]int64{1}, []float32{float32(len(in)) + 7})}, nil
	}
	b := New(seven, Config{Unbatched: true}, nil)
	defer closeOK(t, b)
	out, err := b.Submit(context.Background(), nil)
	if err != nil || out[0].Float32s()[0] != 7 {
		t.Fatalf("Submit: %v, %v", out, err)
	}
	if out, _, err = b.SubmitChecked(context.Background(), nil, 1); err != nil || out[0].Float32s()[0] != 7 {
		t.Fatalf("SubmitChecked: %v, %v", out, err)
	}
	batched := New(seven, Config{}, nil)
	defer closeOK(t, batched)
	var ie *engine.InputError
	if _, err := batched.Submit(context.Background(), nil); !errors.As(err, &ie) {
		t.Fatalf("a batched model without inputs: %v, want an *engine.InputError", err)
	}
}
