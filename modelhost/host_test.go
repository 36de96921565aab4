package modelhost

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/httpapi"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/serving"
	"github.com/prometheus/client_golang/prometheus"
)

// deadline bounds every wait in these tests, so a bug fails them instead of
// hanging them.
const deadline = 20 * time.Second

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func modelPath(t *testing.T) string {
	return filepath.Join(testmodels.Dir(t), "digits_mlp.onnx")
}

// startHost starts a host serving the small reference MLP and shuts it down
// at the end of the test. The host is also the slot a server reads (the
// second result, to read the tests as a server would).
func startHost(t *testing.T) (*Host, serving.Slot) {
	t.Helper()
	h := New(Config{Path: modelPath(t), Engine: engine.Options{Threads: 1}, Batcher: batcher.DefaultConfig(), SkipWarmup: true},
		httpapi.NewMetrics(prometheus.NewRegistry()), quietLog())
	if err := h.Start(context.Background()); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Shutdown(context.Background(), deadline); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return h, h
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(deadline):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// TestReloadWhileDrainingStaysNotReady: a reload that completes after the
// shutdown began must not make /health answer 200 again.
func TestReloadWhileDrainingStaysNotReady(t *testing.T) {
	h, srv := startHost(t)
	before := srv.Current()
	h.setState(serving.StateDraining, "shutting down") // as a drain begun elsewhere would
	if err := h.Reload(context.Background()); !errors.Is(err, ErrShuttingDown) {
		t.Errorf("reload while draining: got %v, want ErrShuttingDown", err)
	}
	if st, _ := srv.State(); st != serving.StateDraining {
		t.Fatalf("state after a reload during the drain is %s, want draining", st)
	}
	if srv.Current() != before {
		t.Fatal("a reload during the drain swapped in a new instance")
	}
}

// TestReloadRacingShutdownIsDiscarded: a reload that was loading when the
// shutdown began is not served; its model is closed, the state stays
// draining, and Shutdown drains everything.
func TestReloadRacingShutdownIsDiscarded(t *testing.T) {
	h, srv := startHost(t)
	before := srv.Current()
	loaded := make(chan *serving.Instance, 1)
	release := make(chan struct{})
	h.loaded = func(inst *serving.Instance) {
		loaded <- inst
		<-release
	}
	res := make(chan error, 1)
	go func() { res <- h.Reload(context.Background()) }()
	fresh := wait(t, loaded, "the reload to load its model")
	h.BeginShutdown()
	close(release)
	if err := wait(t, res, "the reload to return"); !errors.Is(err, ErrShuttingDown) {
		t.Errorf("reload racing the shutdown: got %v, want ErrShuttingDown", err)
	}
	if st, _ := srv.State(); st != serving.StateDraining {
		t.Fatalf("state after the racing reload is %s, want draining", st)
	}
	if srv.Current() != before {
		t.Fatal("the racing reload swapped in its instance")
	}
	wait(t, fresh.Model.Freed(), "the discarded model to be freed")
	if err := h.Shutdown(context.Background(), deadline); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	wait(t, before.Model.Freed(), "the serving model to be freed")
	if _, err := before.Batcher.Submit(context.Background(), nil); err == nil {
		t.Fatal("the batcher accepts work after shutdown")
	}
}

// TestReloadDrainsReplacedInstance: a reload swaps in a new instance, stays
// ready, and the old one is drained and freed (Shutdown waits for it).
func TestReloadDrainsReplacedInstance(t *testing.T) {
	h, srv := startHost(t)
	before := srv.Current()
	if err := h.Reload(context.Background()); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if st, _ := srv.State(); st != serving.StateReady {
		t.Fatalf("state after reload is %s, want ready", st)
	}
	if srv.Current() == before {
		t.Fatal("reload kept the old instance")
	}
	wait(t, before.Model.Freed(), "the replaced model to be freed")
}

// gatedInstance builds an instance of the reference MLP whose engine calls
// wait at a gate before entering the model. The call ignores the batcher's
// context, as a call already inside cgo does.
func gatedInstance(t *testing.T) (inst *serving.Instance, entered chan struct{}, gate chan struct{}) {
	t.Helper()
	m, err := engine.Load(context.Background(), modelPath(t), engine.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	entered, gate = make(chan struct{}, 1), make(chan struct{})
	run := func(_ context.Context, in []engine.Tensor) ([]engine.Tensor, error) {
		entered <- struct{}{}
		<-gate
		return m.Forward(context.Background(), in)
	}
	b := batcher.New(run, batcher.Config{Instances: 1}, nil)
	t.Cleanup(func() {
		b.Close(context.Background())
		m.Close()
	})
	return &serving.Instance{Model: m, Batcher: b}, entered, gate
}

func submit(t *testing.T, inst *serving.Instance) <-chan error {
	in, err := inst.Model.ExampleInputs(1)
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		_, err := inst.Batcher.Submit(context.Background(), in)
		res <- err
	}()
	return res
}

// TestDrainWaitsForRunningCall: Drain returns only once the engine call in
// flight has finished, and the request it carried succeeds.
func TestDrainWaitsForRunningCall(t *testing.T) {
	inst, entered, gate := gatedInstance(t)
	res := submit(t, inst)
	wait(t, entered, "the engine call to start")
	drained := make(chan error, 1)
	go func() { drained <- Drain(context.Background(), inst, deadline) }()
	select {
	case err := <-drained:
		t.Fatalf("Drain returned (%v) while an engine call was running", err)
	case <-inst.Model.Freed():
		t.Fatal("the model was freed while an engine call was running")
	default:
	}
	close(gate)
	if err := wait(t, res, "the request"); err != nil {
		t.Fatalf("the request running during the drain failed: %v", err)
	}
	if err := wait(t, drained, "Drain"); err != nil {
		t.Fatalf("drain: %v", err)
	}
	wait(t, inst.Model.Freed(), "the model to be freed")
}

// TestDrainDeadlineNeverFreesUnderACall: when the drain's own deadline passes
// with a worker still running, Drain says so, and the worker's engine call
// fails cleanly with engine.ErrClosed instead of running into a freed model
// (before the model was reference-counted it crashed in ONNX Runtime).
func TestDrainDeadlineNeverFreesUnderACall(t *testing.T) {
	inst, entered, gate := gatedInstance(t)
	res := submit(t, inst)
	wait(t, entered, "the engine call to start")
	err := Drain(context.Background(), inst, 10*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("drain past its deadline: got %v, want an error wrapping DeadlineExceeded", err)
	}
	close(gate)
	if err := wait(t, res, "the request"); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("the call released after the drain gave up: got %v, want engine.ErrClosed", err)
	}
	wait(t, inst.Model.Freed(), "the model to be freed")
}

// --instances N loads N engine instances of the file, one per batcher
// worker, serves through all of them, and closes every one on shutdown.
func TestInstancesAreSeparateEngines(t *testing.T) {
	bc := batcher.DefaultConfig()
	bc.Instances = 2
	h := New(Config{Path: modelPath(t), Engine: engine.Options{Threads: 1}, Batcher: bc, SkipWarmup: true},
		httpapi.NewMetrics(prometheus.NewRegistry()), quietLog())
	if err := h.Start(context.Background()); err != nil {
		t.Fatalf("start: %v", err)
	}
	inst := h.Current()
	all := inst.All()
	if len(all) != 2 || all[0] == all[1] || inst.Model != all[0] || inst.Batcher.Config().Instances != 2 {
		t.Fatalf("instances: %d models (distinct: %v), batcher workers %d", len(all), len(all) == 2 && all[0] != all[1], inst.Batcher.Config().Instances)
	}
	in, err := inst.Model.ExampleInputs(1)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := inst.Batcher.Submit(context.Background(), in); err != nil {
			t.Fatalf("predict: %v", err)
		}
	}
	if err := h.Shutdown(context.Background(), deadline); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	for i, m := range all {
		wait(t, m.Freed(), "engine instance to be freed")
		if _, err := m.Forward(context.Background(), in); !errors.Is(err, engine.ErrClosed) {
			t.Errorf("instance %d after shutdown: %v, want ErrClosed", i, err)
		}
	}
}

// TestQueueCapacityMetric: fw_queue_capacity reports the queue limit the
// host's batcher enforces (its default when unset), the denominator of the
// saturation alert in deploy/ (fw_queue_depth / fw_queue_capacity).
func TestQueueCapacityMetric(t *testing.T) {
	f := func(maxQueue int, want float64) {
		t.Helper()
		reg := prometheus.NewRegistry()
		h := New(Config{Path: modelPath(t), Engine: engine.Options{Threads: 1}, Batcher: batcher.Config{MaxQueue: maxQueue}, SkipWarmup: true}, httpapi.NewMetrics(reg), quietLog())
		if err := h.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer h.Shutdown(context.Background(), time.Minute)
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range families {
			if mf.GetName() == "fw_queue_capacity" {
				if got := mf.GetMetric()[0].GetGauge().GetValue(); got != want {
					t.Errorf("MaxQueue %d: fw_queue_capacity %v, want %v", maxQueue, got, want)
				}
				return
			}
		}
		t.Errorf("MaxQueue %d: no fw_queue_capacity", maxQueue)
	}
	f(7, 7)
	f(0, batcher.DefaultMaxQueue)
}

// A model without a batch axis gets an unbatched batcher (each request its
// own engine call), warms up without batches of 8 or MaxBatchRows rows it
// cannot take, and answers; a batched one keeps joining requests.
func TestUnbatchedModelGetsUnbatchedBatcher(t *testing.T) {
	for _, c := range []struct {
		path    string
		batched bool
	}{
		{testmodels.Triton(t, "fixed_batch1"), false},
		{testmodels.Triton(t, "nobatch"), false},
		{modelPath(t), true},
	} {
		t.Run(filepath.Base(filepath.Dir(filepath.Dir(c.path)))+"/"+filepath.Base(c.path), func(t *testing.T) {
			h := New(Config{Path: c.path, Engine: engine.Options{Threads: 1}, Batcher: batcher.DefaultConfig()},
				httpapi.NewMetrics(prometheus.NewRegistry()), quietLog())
			if err := h.Start(context.Background()); err != nil {
				t.Fatalf("start (warm-up included): %v", err)
			}
			defer func() {
				if err := h.Shutdown(context.Background(), deadline); err != nil {
					t.Errorf("shutdown: %v", err)
				}
			}()
			inst := h.Current()
			if got := inst.Batcher.Config().Unbatched; got == c.batched {
				t.Fatalf("Batcher.Unbatched = %v for a model with Batched() = %v", got, inst.Model.Batched())
			}
			if c.batched {
				return
			}
			spec := inst.Model.Inputs()[0]
			in, _ := engine.NewTensor(spec.DType, spec.Shape)
			out, _, err := serving.Infer(context.Background(), serving.One(h), inst, []engine.Tensor{in})
			if err != nil {
				t.Fatal(err)
			}
			if want := inst.Model.Outputs()[0].Shape; engine.FormatShape(out[0].Shape) != engine.FormatShape(want) {
				t.Errorf("output shape %s, want %s", engine.FormatShape(out[0].Shape), engine.FormatShape(want))
			}
		})
	}
}

// With TryOneThread, the first instance is timed against a one-thread
// session (engine.TryOneThread, real engine): every instance then has the
// thread count kept, whichever the machine made it, and serves.
func TestTryOneThreadKeepsOneCountForEveryInstance(t *testing.T) {
	for _, try := range []bool{false, true} {
		bc := batcher.DefaultConfig()
		bc.Instances = 2
		h := New(Config{Path: modelPath(t), Engine: engine.Options{Threads: 2}, Batcher: bc, TryOneThread: try},
			httpapi.NewMetrics(prometheus.NewRegistry()), quietLog())
		if err := h.Start(context.Background()); err != nil {
			t.Fatalf("start: %v", err)
		}
		all := h.Current().All()
		got := all[0].Threads()
		if all[1].Threads() != got || (!try && got != 2) || (got != 1 && got != 2) {
			t.Errorf("TryOneThread %v: instances have %d and %d threads", try, got, all[1].Threads())
		}
		in, err := all[0].ExampleInputs(3)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Current().Batcher.Submit(context.Background(), in); err != nil {
			t.Fatalf("predict: %v", err)
		}
		if err := h.Shutdown(context.Background(), deadline); err != nil {
			t.Fatal(err)
		}
	}
}

// When the trial picks one thread, the timed session is closed and the
// one-thread one serves; when that one fails its warm-up, or the trial
// fails, the timed session keeps serving. The outcome is decided here (the
// real engine decides by timing; see engine's tests).
func TestTryOneThreadOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		trial    func(context.Context, *engine.Model, int) (*engine.Model, engine.ThreadTrial, error)
		threads  int
		oldFreed bool
	}{
		{"one thread kept", func(ctx context.Context, m *engine.Model, _ int) (*engine.Model, engine.ThreadTrial, error) {
			one, err := engine.Load(ctx, m.Path, engine.Options{Threads: 1})
			return one, engine.ThreadTrial{Threads: 1}, err
		}, 1, true},
		{"many kept", func(context.Context, *engine.Model, int) (*engine.Model, engine.ThreadTrial, error) {
			return nil, engine.ThreadTrial{Threads: 2}, nil
		}, 2, false},
		{"trial failed", func(context.Context, *engine.Model, int) (*engine.Model, engine.ThreadTrial, error) {
			return nil, engine.ThreadTrial{Threads: 2}, errors.New("engine gone")
		}, 2, false},
		{"one-thread session fails its warm-up", func(ctx context.Context, m *engine.Model, _ int) (*engine.Model, engine.ThreadTrial, error) {
			one, err := engine.Load(ctx, m.Path, engine.Options{Threads: 1})
			if err == nil {
				one.Close() // its warm-up then fails with ErrClosed
			}
			return one, engine.ThreadTrial{Threads: 1}, err
		}, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bc := batcher.DefaultConfig()
			bc.Instances = 2
			h := New(Config{Path: modelPath(t), Engine: engine.Options{Threads: 2}, Batcher: bc, TryOneThread: true},
				httpapi.NewMetrics(prometheus.NewRegistry()), quietLog())
			var timed *engine.Model
			h.tryOneThread = func(ctx context.Context, m *engine.Model, rows int) (*engine.Model, engine.ThreadTrial, error) {
				timed = m
				return tc.trial(ctx, m, rows)
			}
			if err := h.Start(context.Background()); err != nil {
				t.Fatalf("start: %v", err)
			}
			defer h.Shutdown(context.Background(), deadline)
			all := h.Current().All()
			if all[0].Threads() != tc.threads || all[1].Threads() != tc.threads {
				t.Fatalf("instances have %d and %d threads, want %d", all[0].Threads(), all[1].Threads(), tc.threads)
			}
			if freed := timed != all[0]; freed != tc.oldFreed {
				t.Fatalf("the timed session serves: %v, want %v", !freed, !tc.oldFreed)
			}
			if tc.oldFreed {
				wait(t, timed.Freed(), "the timed session to be freed")
			}
			in, err := all[0].ExampleInputs(2)
			if err != nil {
				t.Fatal(err)
			}
			for range 4 {
				if _, err := h.Current().Batcher.Submit(context.Background(), in); err != nil {
					t.Fatalf("predict: %v", err)
				}
			}
		})
	}
}

// A ThreadMemo keeps what the trial chose for a file version: a second load
// of the same file (a repository's reload after an eviction) keeps the count
// without a trial; a changed file and a trial that failed are tried again.
func TestThreadMemoSkipsTheTrialForTheSameFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.onnx")
	data, err := os.ReadFile(modelPath(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var memo ThreadMemo
	trials := 0
	fail := false
	load := func() []*engine.Model {
		t.Helper()
		bc := batcher.DefaultConfig()
		bc.Instances = 2
		h := New(Config{Path: path, Engine: engine.Options{Threads: 2}, Batcher: bc, TryOneThread: true, Threads: &memo},
			httpapi.NewMetrics(prometheus.NewRegistry()), quietLog())
		h.tryOneThread = func(ctx context.Context, m *engine.Model, _ int) (*engine.Model, engine.ThreadTrial, error) {
			trials++
			if fail {
				return nil, engine.ThreadTrial{Threads: 2}, errors.New("engine gone")
			}
			one, err := engine.Load(ctx, m.Path, engine.Options{Threads: 1})
			return one, engine.ThreadTrial{Threads: 1}, err
		}
		if err := h.Start(context.Background()); err != nil {
			t.Fatalf("start: %v", err)
		}
		all := h.Current().All()
		t.Cleanup(func() { h.Shutdown(context.Background(), deadline) })
		return all
	}
	for i, want := range []int{1, 1} {
		all := load()
		if trials != 1 || all[0].Threads() != want || all[1].Threads() != want {
			t.Fatalf("load %d: %d trials, instances with %d and %d threads; want 1 trial, %d threads", i+1, trials, all[0].Threads(), all[1].Threads(), want)
		}
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(path, later, later); err != nil { // a new version of the file
		t.Fatal(err)
	}
	fail = true
	if all := load(); trials != 2 || all[0].Threads() != 2 {
		t.Fatalf("changed file: %d trials, %d threads; want a second trial, which failed: 2 threads", trials, all[0].Threads())
	}
	if load(); trials != 3 {
		t.Fatalf("a failed trial was remembered: %d trials, want 3", trials)
	}
}
