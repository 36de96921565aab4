package engine

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gateBackend is a Backend whose Run blocks until the test releases it, and
// which records any use after Close: the engine-call-after-free that a real
// backend would turn into a crash.
type gateBackend struct {
	entered chan struct{} // receives once per Run that starts
	gate    chan struct{} // Run returns once this is closed
	closed  atomic.Bool
	closes  atomic.Int32
	misuse  atomic.Int32 // Run calls that overlapped or followed Close
}

func newGateBackend() *gateBackend {
	return &gateBackend{entered: make(chan struct{}, 64), gate: make(chan struct{})}
}

func (g *gateBackend) Inputs() []TensorSpec  { return nil }
func (g *gateBackend) Outputs() []TensorSpec { return nil }

func (g *gateBackend) Run(ctx context.Context, in []Tensor) ([]Tensor, error) {
	if g.closed.Load() {
		g.misuse.Add(1)
	}
	g.entered <- struct{}{}
	<-g.gate
	if g.closed.Load() { // freed while this call was inside the engine
		g.misuse.Add(1)
	}
	return []Tensor{FromFloat32([]int64{1}, []float32{1})}, nil
}

func (g *gateBackend) Close() error {
	g.closes.Add(1)
	g.closed.Store(true)
	return nil
}

func oneRow() []Tensor { return []Tensor{FromFloat32([]int64{1}, []float32{1})} }

// waitFreed fails the test if the model is not freed within a deadline.
func waitFreed(t *testing.T, m *Model) {
	t.Helper()
	select {
	case <-m.Freed():
	case <-time.After(10 * time.Second):
		t.Fatal("the backend was not freed after Close and the last call")
	}
}

// TestCloseDuringRunWaitsForTheCall: Close racing an engine call in flight
// must not free the backend under it; the last call frees it as it returns.
func TestCloseDuringRunWaitsForTheCall(t *testing.T) {
	g := newGateBackend()
	m := &Model{backend: g}
	res := make(chan error, 1)
	go func() {
		_, err := m.Forward(context.Background(), oneRow())
		res <- err
	}()
	<-g.entered // the call is inside the engine
	if err := m.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if g.closes.Load() != 0 {
		t.Fatal("Close freed the backend while an engine call was running in it")
	}
	select {
	case <-m.Freed():
		t.Fatal("Freed closed while an engine call was running")
	default:
	}
	if _, err := m.Forward(context.Background(), oneRow()); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: got %v, want ErrClosed", err)
	}
	close(g.gate)
	if err := <-res; err != nil {
		t.Fatalf("the call running at Close failed: %v", err)
	}
	waitFreed(t, m)
	if n := g.closes.Load(); n != 1 {
		t.Fatalf("backend closed %d times, want 1", n)
	}
	if n := g.misuse.Load(); n != 0 {
		t.Fatalf("%d engine calls used the backend after it was freed", n)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// TestCloseRacingManyCalls hammers Forward from many goroutines while Close
// runs (under -race): no call may run in a freed backend, each call either
// succeeds or fails with ErrClosed, and the backend is freed exactly once.
func TestCloseRacingManyCalls(t *testing.T) {
	g := newGateBackend()
	close(g.gate) // calls do not block here
	g.entered = make(chan struct{}, 1<<16)
	m := &Model{backend: g}
	var wg sync.WaitGroup
	start := make(chan struct{})
	var bad atomic.Int32
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for j := 0; j < 200; j++ {
				if _, err := m.Forward(context.Background(), oneRow()); err != nil && !errors.Is(err, ErrClosed) {
					bad.Add(1)
				}
			}
		}()
	}
	close(start)
	m.Close()
	wg.Wait()
	waitFreed(t, m)
	if n := bad.Load(); n != 0 {
		t.Fatalf("%d calls failed with something other than ErrClosed", n)
	}
	if n := g.closes.Load(); n != 1 {
		t.Fatalf("backend closed %d times, want 1", n)
	}
	if n := g.misuse.Load(); n != 0 {
		t.Fatalf("%d engine calls used the backend after it was freed", n)
	}
}

// TestClosedBackendsRefuseRun: both real backends answer a Run after their
// Close with an error instead of calling into freed engine memory (the ONNX
// Runtime one dereferenced a nil session).
func TestClosedBackendsRefuseRun(t *testing.T) {
	for _, name := range []string{"digits_cnn.onnx", "digits_cnn.ts.pt"} {
		t.Run(name, func(t *testing.T) {
			if filepath.Ext(name) == ".pt" {
				torchAvailable(t)
			}
			m := mustLoad(t, filepath.Join(modelsDir(t), name), Options{})
			in, err := m.ExampleInputs(1)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.backend.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := m.backend.Run(context.Background(), in); err == nil {
				t.Fatal("Run after Close succeeded")
			}
		})
	}
}
