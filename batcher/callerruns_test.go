package batcher

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fw-serve/fw/engine"
)

// where counts the engine calls made on a submitting goroutine
// (Config.CallerRuns) and on a worker's.
type where struct{ caller, worker atomic.Int32 }

// wrap returns a RunFunc that counts where each call runs, then calls next.
func (w *where) wrap(next RunFunc) RunFunc {
	return func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
		buf := make([]byte, 16<<10)
		stack := string(buf[:runtime.Stack(buf, false)])
		switch {
		case strings.Contains(stack, "(*Batcher).runHere"):
			w.caller.Add(1)
		case strings.Contains(stack, "(*Batcher).work"):
			w.worker.Add(1)
		default:
			panic("engine call from neither a Submit nor a worker:\n" + stack)
		}
		return next(ctx, in)
	}
}

// setPace makes the recent calls 1 µs for 1 row, so that lending does not
// depend on how long the test's calls happened to take.
func setPace(b *Batcher) {
	b.callNs.Store(1000)
	b.callRows.Store(1)
}

// waitParked waits until b's worker sleeps with nothing to do and may be
// lent to a Submit, after one request (run by the worker: no call has set
// the pace yet) when none has run.
func waitParked(t *testing.T, b *Batcher) {
	t.Helper()
	if b.callNs.Load() == 0 {
		if _, err := b.Submit(context.Background(), []engine.Tensor{rowsTensor(99, 1, 4)}); err != nil {
			t.Fatal(err)
		}
	}
	setPace(b)
	waitFor(t, "the worker to park", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.parked != nil
	})
}

// One request at a time runs on its own goroutine, the answers unchanged.
func TestCallerRunsOnTheCallersGoroutine(t *testing.T) {
	var at where
	stats := &recorder{}
	b := New(at.wrap(affine), Config{MaxDelay: time.Millisecond, CallerRuns: true}, stats)
	defer closeOK(t, b)
	waitParked(t, b)
	for id := 0; id < 20; id++ {
		out, tm, err := b.SubmitTimed(context.Background(), []engine.Tensor{rowsTensor(id, 1+id%3, 4)})
		if err != nil {
			t.Fatal(err)
		}
		if err := checkAffine(id, 1+id%3, 4, out); err != nil {
			t.Fatal(err)
		}
		if tm.BatchRows != 1+id%3 || tm.Infer <= 0 {
			t.Errorf("request %d: timing %+v", id, tm)
		}
	}
	if c, w := at.caller.Load(), at.worker.Load(); c != 20 || w != 1 {
		t.Fatalf("%d calls on the caller's goroutine and %d on the worker's, want 20 and 1 (the first, before any pace)", c, w)
	}
	if got := len(stats.all()); got != 21 {
		t.Fatalf("stats saw %d calls, want 21", got)
	}
}

// Requests that arrive while a caller runs its request queue and form one
// batch, run by the worker once the caller gives it back.
func TestCallerRunsBatchesWhatArrivesMeanwhile(t *testing.T) {
	var at where
	g := newGate()
	stats := &recorder{}
	b := New(at.wrap(g.wrap(affine)), Config{MaxDelay: time.Hour, CallerRuns: true}, stats)
	defer closeOK(t, b)
	g.release <- struct{}{} // the pace-setting first request
	waitParked(t, b)
	<-g.started
	queueBehindOne(t, b, g) // request 0 runs on its caller's goroutine
	got := stats.all()[1:]
	if len(got) != 2 || got[0].requests != 1 || got[1].requests != 3 || got[1].rows != 6 {
		t.Fatalf("batches %+v, want [1 row/1 req, 6 rows/3 reqs]", got)
	}
	if c, w := at.caller.Load(), at.worker.Load(); c != 1 || w != 2 {
		t.Fatalf("%d calls on a caller's goroutine and %d on the worker's, want 1 and 2", c, w)
	}
	// The worker is lent again once idle.
	waitParked(t, b) // sets the pace again: the gated call was slow
	if _, err := b.Submit(context.Background(), []engine.Tensor{rowsTensor(4, 1, 4)}); err != nil {
		t.Fatal(err)
	}
	if c := at.caller.Load(); c != 2 {
		t.Fatalf("%d calls on a caller's goroutine, want 2", c)
	}
}

// Where a request must not run at once, or another instance may take it,
// the worker runs it.
func TestCallerRunsOnlyWhereItStartsAtOnce(t *testing.T) {
	for name, cfg := range map[string]Config{
		"instances=2":    {Instances: 2, CallerRuns: true},
		"preferred rows": {PreferredSizes: []int{2}, MaxDelay: time.Microsecond, CallerRuns: true},
		"off":            {},
		"slow calls":     {CallerRuns: true},
	} {
		t.Run(name, func(t *testing.T) {
			var at where
			run := affine
			if name == "slow calls" { // longer than callerRunsMax
				run = func(ctx context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
					time.Sleep(2 * callerRunsMax)
					return affine(ctx, in)
				}
			}
			b := New(at.wrap(run), cfg, nil)
			defer closeOK(t, b)
			for id := 0; id < 5; id++ {
				if name != "slow calls" {
					setPace(b)
				}
				time.Sleep(time.Millisecond) // let the workers sleep
				out, err := b.Submit(context.Background(), []engine.Tensor{rowsTensor(id, 1, 4)})
				if err != nil {
					t.Fatal(err)
				}
				if err := checkAffine(id, 1, 4, out); err != nil {
					t.Fatal(err)
				}
			}
			if c, w := at.caller.Load(), at.worker.Load(); c != 0 || w != 5 {
				t.Fatalf("%d calls on a caller's goroutine and %d on a worker's, want 0 and 5", c, w)
			}
		})
	}
}

// Close waits for a call running on its caller's goroutine; the worker
// then exits.
func TestCallerRunsClose(t *testing.T) {
	g := newGate()
	b := New(g.wrap(affine), Config{CallerRuns: true}, nil)
	g.release <- struct{}{} // the pace-setting first request
	waitParked(t, b)
	<-g.started
	running := submitAsync(context.Background(), b, rowsTensor(0, 2, 4))
	<-g.started
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
	select {
	case err := <-closed:
		t.Fatalf("Close returned %v while a call ran", err)
	case <-time.After(20 * time.Millisecond):
	}
	g.open()
	if r := <-running; r.err != nil {
		t.Fatal(r.err)
	} else if err := checkAffine(0, 2, 4, r.out); err != nil {
		t.Fatal(err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

// panicStats panics in its first n BatchRun calls: a panic outside the
// engine call, which the batcher does not recover.
type panicStats struct{ n atomic.Int32 }

func (s *panicStats) BatchRun(int, int, time.Duration, time.Duration, error) {
	if s.n.Add(-1) >= 0 {
		panic("stats")
	}
}
func (s *panicStats) QueueDepth(int) {}

// A panic on the caller's goroutine reaches the caller (whose server
// recovers it) and gives the worker back: later requests are served.
func TestCallerRunsPanicGivesTheWorkerBack(t *testing.T) {
	var at where
	stats := &panicStats{}
	b := New(at.wrap(affine), Config{CallerRuns: true}, stats)
	defer closeOK(t, b)
	waitParked(t, b)
	stats.n.Store(1)
	func() {
		defer func() {
			if p := recover(); p != "stats" {
				t.Fatalf("recovered %v, want the stats panic", p)
			}
		}()
		b.Submit(context.Background(), []engine.Tensor{rowsTensor(0, 1, 4)})
		t.Fatal("Submit returned instead of panicking")
	}()
	if c := at.caller.Load(); c != 1 {
		t.Fatalf("%d calls on a caller's goroutine, want the panicking one", c)
	}
	for id := 1; id < 4; id++ {
		out, err := b.Submit(context.Background(), []engine.Tensor{rowsTensor(id, 1, 4)})
		if err != nil {
			t.Fatal(err)
		}
		if err := checkAffine(id, 1, 4, out); err != nil {
			t.Fatal(err)
		}
	}
}

// A request whose ctx is done while its call runs on its own goroutine
// gets ctx.Err(), as one run by the worker does, once the call ends.
func TestCallerRunsCancelWhileRunning(t *testing.T) {
	var at where
	g := newGate()
	b := New(at.wrap(g.wrap(affine)), Config{CallerRuns: true}, nil)
	defer closeOK(t, b)
	g.release <- struct{}{} // the pace-setting first request
	waitParked(t, b)
	<-g.started
	ctx, cancel := context.WithCancel(context.Background())
	ch := submitAsync(ctx, b, rowsTensor(1, 1, 4))
	<-g.started
	cancel()
	g.release <- struct{}{}
	if r := <-ch; !errors.Is(r.err, context.Canceled) || r.out != nil {
		t.Fatalf("got %v %v, want context.Canceled and no outputs", r.out, r.err)
	}
	if c := at.caller.Load(); c != 1 {
		t.Fatalf("%d calls on a caller's goroutine, want 1", c)
	}
}
