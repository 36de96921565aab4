package pybackend

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fw-serve/fw/engine"
)

// senderModel is a non-decoupled async model whose requests say, by
// INPUT0's first element, how each is answered: returned (0), sent during
// execute (1), sent from a thread after execute returned (2), sent by an
// asyncio task after execute returned (3), sent twice (4: the second send
// raises), the final flag alone (5: raises), the sender dropped unsent
// (6), the sender kept unsent (7: only cancellation ends it), sent
// during execute and returned too (8: the returned one is dropped), and
// sys.exit (9).
const senderModel = `
import asyncio, threading, time
import numpy as np
import triton_python_backend_utils as pb_utils

def answer(mode):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.full((1, 4), mode, np.float32))])

class TritonPythonModel:
    kept = []
    tasks = set()

    async def execute(self, requests):
        out = []
        for r in requests:
            mode = int(pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy().flat[0])
            s = r.get_response_sender()
            ret = None
            if mode == 0:
                ret = answer(0)
            elif mode in (1, 8):
                s.send(answer(mode), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                if mode == 8:
                    ret = answer(-8)
            elif mode == 2:
                def later(s=s):
                    time.sleep(0.2)
                    s.send(answer(2), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                threading.Thread(target=later).start()
            elif mode == 3:
                async def later_async(s=s):
                    await asyncio.sleep(0.2)
                    s.send(answer(3))
                    s.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                t = asyncio.create_task(later_async())
                TritonPythonModel.tasks.add(t)
                t.add_done_callback(TritonPythonModel.tasks.discard)
            elif mode == 4:
                s.send(answer(4))
                s.send(answer(40))
            elif mode == 5:
                s.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            elif mode == 7:
                TritonPythonModel.kept.append(s)
            elif mode == 9:
                raise SystemExit(9)
            out.append(ret)
        return out
`

func TestNonDecoupledResponseSender(t *testing.T) {
	b, _ := start(t, senderModel, nil)
	req := func(mode float32) []engine.Tensor {
		x := engine.FromFloat32([]int64{1, 4}, []float32{mode, 0, 0, 0})
		return []engine.Tensor{x, x}
	}
	// One execute call, each request answered its own way, in order.
	modes := []float32{0, 1, 2, 3, 8}
	ctxs := make([]context.Context, len(modes))
	reqs := make([][]engine.Tensor, len(modes))
	for i, m := range modes {
		ctxs[i], reqs[i] = context.Background(), req(m)
	}
	outs, errs, err := b.RunEach(context.Background(), ctxs, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range modes {
		if errs[i] != nil || outs[i][0].Float32s()[0] != m {
			t.Errorf("mode %v: %v, %v", m, outs[i], errs[i])
		}
	}
	// A second send raises in execute: the first stands.
	out, err := b.Run(context.Background(), req(4))
	if err != nil || out[0].Float32s()[0] != 4 {
		t.Fatalf("sent twice: %v, %v", out, err)
	}
	// With a request of the same call that no send answered, that one
	// gets execute's exception.
	_, errs, err = b.RunEach(context.Background(), []context.Context{context.Background(), context.Background()}, [][]engine.Tensor{req(4), req(7)})
	if err != nil || errs[0] != nil || errs[1] == nil || !strings.Contains(errs[1].Error(), "cannot send more than one response") {
		t.Fatalf("sent twice beside another request: %v, %v", errs, err)
	}
	if _, err := b.Run(context.Background(), req(5)); err == nil || !strings.Contains(err.Error(), "cannot send complete final before sending a response") {
		t.Fatalf("final flag alone: %v", err)
	}
	// sys.exit in a coroutine fails its call; the event loop serves on.
	if _, err := b.Run(context.Background(), req(9)); err == nil || !strings.Contains(err.Error(), "sys.exit(9)") {
		t.Fatalf("sys.exit in async execute: %v", err)
	}
	if _, err := b.Run(context.Background(), req(6)); err == nil || !strings.Contains(err.Error(), "dropped its response sender") {
		t.Fatalf("dropped sender: %v", err)
	}
	// A request whose sender the model keeps, unsent, ends when it is
	// cancelled, and the instance serves on.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	_, errs, err = b.RunEach(context.Background(), []context.Context{ctx}, [][]engine.Tensor{req(7)})
	var me *ModelError
	if err != nil || !errors.As(errs[0], &me) || me.Code != codeCancelled {
		t.Fatalf("kept sender, cancelled: %v, %v", errs, err)
	}
	if out, err := b.Run(context.Background(), req(0)); err != nil || out[0].Float32s()[0] != 0 {
		t.Fatalf("after: %v, %v", out, err)
	}
}

// asyncDecoupled's execute is a coroutine: request 1 waits for an event
// that request 2, a later execute call, sets; -1 raises without a response.
const asyncDecoupled = `
import asyncio
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.go = None

    async def execute(self, requests):
        if self.go is None:
            self.go = asyncio.Event()
        for r in requests:
            x = r.inputs()[0].as_numpy().reshape(-1)
            s = r.get_response_sender()
            if x[0] < 0:
                raise ValueError("no negative waits")
            if x[0] == 1:
                await self.go.wait()
            else:
                self.go.set()
            s.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([x[0]], np.float32))]), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
`

// A decoupled model's async execute runs in the background: the next call
// starts while one awaits, as in Triton.
func TestAsyncDecoupledExecuteConcurrent(t *testing.T) {
	b := startModel(t, asyncDecoupled, Config{Name: "async_decoupled", Decoupled: true,
		Inputs:  []engine.TensorSpec{{Name: "IN", DType: engine.Float32, Shape: []int64{-1}}},
		Outputs: []engine.TensorSpec{{Name: "OUT", DType: engine.Float32, Shape: []int64{1}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var order []float32
	run := func(v float32) error {
		return streamOne(b, ctx, []engine.Tensor{engine.FromFloat32([]int64{1}, []float32{v})}, func(outs []engine.Tensor, err error, final bool) error {
			if outs != nil {
				mu.Lock()
				order = append(order, outs[0].Float32s()[0])
				mu.Unlock()
			}
			return err
		})
	}
	first := make(chan error, 1)
	go func() { first <- run(1) }()
	time.Sleep(200 * time.Millisecond) // its execute is awaiting
	if err := run(2); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the first request: %v (the second execute did not run beside it)", err)
	}
	if len(order) != 2 || order[0]+order[1] != 3 {
		t.Fatalf("responses %v", order)
	}
	// An exception from the background execute ends its request with it.
	var last error
	err := streamOne(b, ctx, []engine.Tensor{engine.FromFloat32([]int64{1}, []float32{-1})}, func(outs []engine.Tensor, err error, final bool) error {
		if final {
			last = err
		}
		return nil
	})
	if err != nil || last == nil || !strings.Contains(last.Error(), "no negative waits") {
		t.Fatalf("background execute raised: %v, %v", last, err)
	}
}

// argsModel checks pb_utils' argument validation from inside execute, as
// Triton's L0_backend_python/argument_validation does, and answers the
// checks that did not raise what Triton's raises (OUTPUT1, one string).
const argsModel = `
import numpy as np
import triton_python_backend_utils as pb_utils

def bad():
    t = pb_utils.Tensor("X", np.array([1], np.int32))
    E, T = pb_utils.TritonModelException, TypeError
    return [
        (E, lambda: pb_utils.InferenceRequest(model_name="m", inputs=[None], requested_output_names=[])),
        (T, lambda: pb_utils.InferenceRequest(model_name="m", inputs=None, requested_output_names=[])),
        (T, lambda: pb_utils.InferenceRequest(model_name=None, inputs=[t], requested_output_names=[])),
        (T, lambda: pb_utils.InferenceRequest(model_name="m", inputs=[t], requested_output_names=[None])),
        (T, lambda: pb_utils.InferenceRequest(model_name="m", inputs=[t], requested_output_names=["a"], correlation_id=None)),
        (T, lambda: pb_utils.InferenceRequest(model_name="m", inputs=[t], requested_output_names=["a"], request_id=None)),
        (T, lambda: pb_utils.InferenceRequest(model_name="m", inputs=[t], requested_output_names=["a"], flags=None)),
        (E, lambda: pb_utils.InferenceResponse(output_tensors=[None])),
        (T, lambda: pb_utils.InferenceResponse(output_tensors=None)),
        (T, lambda: pb_utils.Tensor(None, np.array([1]))),
        (T, lambda: pb_utils.Tensor("X", None)),
        (E, lambda: pb_utils.Tensor.from_dlpack("", None)),
        (E, lambda: pb_utils.Tensor.from_dlpack("X", None)),
        (T, lambda: pb_utils.Logger.log("x", 1)),
        (T, lambda: pb_utils.Logger.log_info(None)),
    ]

class TritonPythonModel:
    def execute(self, requests):
        missed = []
        for i, (want, f) in enumerate(bad()):
            try:
                f()
                missed.append(f"{i}: nothing raised")
            except want:
                pass
            except Exception as e:
                missed.append(f"{i}: {type(e).__name__} {e}")
        r = pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[], correlation_id="s-5")
        if r.correlation_id() != "s-5" or requests[0].model_name() != "add_sub":
            missed.append("correlation_id or model_name")
        pb_utils.Logger.log("fine", pb_utils.LogLevel.WARNING)
        pb_utils.InferenceResponse([])
        x = pb_utils.get_input_tensor_by_name(requests[0], "INPUT0").as_numpy()
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT1", np.array([["; ".join(missed)] * 4], dtype=object))])]
`

func TestArgumentValidation(t *testing.T) {
	b, _ := start(t, argsModel, nil)
	x := engine.FromFloat32([]int64{1, 4}, []float32{0, 0, 0, 0})
	out, err := b.Run(context.Background(), []engine.Tensor{x, x})
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := out[1].Strings(); len(s) != 4 || string(s[0]) != "" {
		t.Fatalf("checks that did not raise as Triton's: %q", s)
	}
}

// BLS is refused in initialize (and finalize), with Triton's sentence: the
// load fails.
func TestBLSOnlyDuringExecute(t *testing.T) {
	dir := t.TempDir()
	src := `
import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def initialize(self, args):
        pb_utils.InferenceRequest(model_name="m", inputs=[pb_utils.Tensor("IN", np.array([1], np.int32))], requested_output_names=["OUT"]).exec()
    def execute(self, requests):
        return None
`
	if err := os.WriteFile(filepath.Join(dir, "model.py"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	call := func(context.Context, string, string, map[string]engine.Tensor, []string) (map[string]engine.Tensor, error) {
		return nil, errors.New("BLS reached fw")
	}
	_, err := Start(context.Background(), Config{
		Python: python(t), File: filepath.Join(dir, "model.py"), Dir: dir, Name: "bls_init", Call: call,
		Outputs: []engine.TensorSpec{{Name: "OUT", DType: engine.Float32, Shape: []int64{1}}},
	})
	if err == nil || !strings.Contains(err.Error(), "BLS is only supported during the 'execute' function.") {
		t.Fatalf("BLS in initialize: %v", err)
	}
}
