package pybackend

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fw-serve/fw/engine"
)

// readyModel's is_ready() (a coroutine) answers what the last request set:
// 1 False, 2 an exception, 3 a string, 4 True; 5 makes execute take 2 s.
const readyModel = `
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    state = 4

    def execute(self, requests):
        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            v = int(a.flat[0])
            if v == 5:
                time.sleep(2)
            else:
                TritonPythonModel.state = v
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a)]))
        return out

    async def is_ready(self):
        s = TritonPythonModel.state
        if s == 2:
            raise RuntimeError("the check failed")
        if s == 3:
            return "ready"
        return s == 4
`

func TestReady(t *testing.T) {
	b, _ := start(t, readyModel, nil)
	ctx := context.Background()
	set := func(v float32) {
		t.Helper()
		x := engine.FromFloat32([]int64{1, 4}, []float32{v, 0, 0, 0})
		if _, err := b.Run(ctx, []engine.Tensor{x, x}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Ready(ctx); err != nil {
		t.Fatalf("ready: %v", err)
	}
	for v, want := range map[float32]string{1: "returned False", 2: "the check failed", 3: "must return a boolean value"} {
		set(v)
		if err := b.Ready(ctx); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("state %v: %v, want %q", v, err, want)
		}
	}
	set(4)
	if err := b.Ready(ctx); err != nil {
		t.Fatalf("ready again: %v", err)
	}
	// is_ready() answers while execute runs.
	done := make(chan error, 1)
	go func() {
		x := engine.FromFloat32([]int64{1, 4}, []float32{5, 0, 0, 0})
		_, err := b.Run(ctx, []engine.Tensor{x, x})
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	if err := b.Ready(ctx); err != nil {
		t.Fatalf("ready during execute: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("is_ready() waited for execute (%v)", err)
	default:
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A process killed from outside is not healthy; the probe starts it
	// again, and it is ready once it has.
	b.mu.Lock()
	for p := range b.all {
		_ = p.cmd.Process.Kill()
	}
	b.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	sawDead := false
	for {
		err := b.Ready(ctx)
		if err != nil && strings.Contains(err.Error(), "Stub process 'add_sub_0_0' is not healthy") {
			sawDead = true
		}
		if err == nil && sawDead {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready again after the kill (saw it dead: %v): %v", sawDead, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	set(4)
}
