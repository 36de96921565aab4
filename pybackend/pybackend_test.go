package pybackend

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/internal/testmodels"
)

func python(t *testing.T) string { return testmodels.NumpyPython(t) }

const addSub = `
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        cfg = json.loads(args["model_config"])
        self.out_dtype = pb_utils.triton_string_to_numpy(pb_utils.get_output_config_by_name(cfg, "OUTPUT0")["data_type"])
        print("initialized", args["model_instance_name"])

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            if a.sum() < 0:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("negative input")))
                continue
            if a.sum() == 1000:
                import os
                os._exit(3)
            if a.sum() == 999:
                raise pb_utils.TritonError("bad request", pb_utils.TritonError.INVALID_ARG)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", (a + b).astype(self.out_dtype)),
                pb_utils.Tensor("OUTPUT1", np.array([[str(x).encode() for x in row] for row in (a - b)], dtype=object)),
            ]))
        return responses

    def finalize(self):
        print("finalized")
`

func start(t *testing.T, src string, call Call) (*Backend, *strings.Builder) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.py"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	cfg := Config{
		Python: python(t), File: filepath.Join(dir, "model.py"), Dir: dir, Name: "add_sub", Version: "1",
		Args:    map[string]string{"model_name": "add_sub", "model_version": "1", "model_config": `{"name":"add_sub","output":[{"name":"OUTPUT0","data_type":"TYPE_FP32"},{"name":"OUTPUT1","data_type":"TYPE_STRING"}]}`},
		Inputs:  []engine.TensorSpec{{Name: "INPUT0", DType: engine.Float32, Shape: []int64{-1, 4}}, {Name: "INPUT1", DType: engine.Float32, Shape: []int64{-1, 4}}},
		Outputs: []engine.TensorSpec{{Name: "OUTPUT0", DType: engine.Float32, Shape: []int64{-1, 4}}, {Name: "OUTPUT1", DType: engine.String, Shape: []int64{-1, 4}}},
		Call:    call,
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, &logs
}

func TestAddSub(t *testing.T) {
	b, _ := start(t, addSub, nil)
	ctx := context.Background()
	a := engine.FromFloat32([]int64{2, 4}, []float32{1, 2, 3, 4, 5, 6, 7, 8})
	c := engine.FromFloat32([]int64{2, 4}, []float32{1, 1, 1, 1, 2, 2, 2, 2})
	out, err := b.Run(ctx, []engine.Tensor{a, c})
	if err != nil {
		t.Fatal(err)
	}
	if got := out[0].Float32s(); got[0] != 2 || got[7] != 10 {
		t.Fatalf("OUTPUT0 %v", got)
	}
	strs, err := out[1].Strings()
	if err != nil || len(strs) != 8 || string(strs[0]) != "0.0" || string(strs[7]) != "6.0" {
		t.Fatalf("OUTPUT1 %q %v", strs, err)
	}

	// An error response fails the call with the model's message; the
	// process keeps serving.
	neg := engine.FromFloat32([]int64{1, 4}, []float32{-1, -1, -1, -1})
	one := engine.FromFloat32([]int64{1, 4}, []float32{1, 1, 1, 1})
	_, err = b.Run(ctx, []engine.Tensor{neg, one})
	var me *ModelError
	if !errors.As(err, &me) || !strings.Contains(err.Error(), "negative input") {
		t.Fatalf("error response: %v", err)
	}
	// INVALID_ARG is the request's fault.
	bad := engine.FromFloat32([]int64{1, 4}, []float32{999, 0, 0, 0})
	_, err = b.Run(ctx, []engine.Tensor{bad, one})
	var ie *engine.InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "bad request") {
		t.Fatalf("INVALID_ARG: %v", err)
	}
	// A process that dies fails its call with why, and the next call
	// starts a fresh one.
	crash := engine.FromFloat32([]int64{1, 4}, []float32{1000, 0, 0, 0})
	_, err = b.Run(ctx, []engine.Tensor{crash, one})
	if err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("crash: %v", err)
	}
	for range 3 {
		if _, err := b.Run(ctx, []engine.Tensor{a, c}); err != nil {
			t.Fatalf("after a crash: %v", err)
		}
	}
}

func TestWrongOutputs(t *testing.T) {
	for name, body := range map[string]string{
		"twice":   `return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a), pb_utils.Tensor("OUTPUT0", a)]) for r in requests]`,
		"unknown": `return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a), pb_utils.Tensor("OUTPUT1", s), pb_utils.Tensor("X", a)]) for r in requests]`,
		"count":   `return []`,
		"type":    `return ["no"]`,
	} {
		t.Run(name, func(t *testing.T) {
			src := "import numpy as np\nimport triton_python_backend_utils as pb_utils\nclass TritonPythonModel:\n    def execute(self, requests):\n" +
				"        a = requests[0].inputs()[0].as_numpy()\n        s = np.array([[b'x'] * 4] * len(a), dtype=object)\n        " + body + "\n"
			b, _ := start(t, src, nil)
			a := engine.FromFloat32([]int64{1, 4}, []float32{1, 2, 3, 4})
			_, err := b.Run(context.Background(), []engine.Tensor{a, a})
			var me *ModelError
			if !errors.As(err, &me) {
				t.Fatalf("got %v, want a ModelError", err)
			}
			t.Log(err)
		})
	}
}

// A response may leave a declared output out (Triton's Python backend
// allows it): it comes back as the zero Tensor, the others as sent.
func TestPartialResponse(t *testing.T) {
	src := "import triton_python_backend_utils as pb_utils\nclass TritonPythonModel:\n    def execute(self, requests):\n" +
		"        return [pb_utils.InferenceResponse([pb_utils.Tensor(\"OUTPUT0\", r.inputs()[0].as_numpy())]) for r in requests]\n"
	b, _ := start(t, src, nil)
	a := engine.FromFloat32([]int64{1, 4}, []float32{1, 2, 3, 4})
	out, err := b.Run(context.Background(), []engine.Tensor{a, a})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0].Float32s()[3] != 4 || !out[1].Absent() {
		t.Fatalf("got %v, want OUTPUT0 and OUTPUT1 left out", out)
	}
}

// TestRelativeInterpreter: --python relative to fw's working directory
// works though the processes run in the version directory.
func TestRelativeInterpreter(t *testing.T) {
	abs, err := exec.LookPath(python(t))
	if err == nil {
		abs, err = filepath.Abs(abs)
	}
	if err != nil {
		t.Skip(err)
	}
	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, abs)
	if err != nil || !strings.Contains(rel, "/") {
		t.Skipf("no relative path to %s", abs)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.py"), []byte("class TritonPythonModel:\n    pass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := Start(context.Background(), Config{Python: rel, File: filepath.Join(dir, "model.py"), Dir: dir, Name: "m"})
	if err != nil {
		t.Fatalf("Start with %s: %v", rel, err)
	}
	_ = b.Close()
}

func TestInitializeFails(t *testing.T) {
	dir := t.TempDir()
	src := "class TritonPythonModel:\n    def initialize(self, args):\n        raise ValueError('no weights here')\n"
	if err := os.WriteFile(filepath.Join(dir, "model.py"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Start(context.Background(), Config{Python: python(t), File: filepath.Join(dir, "model.py"), Dir: dir, Name: "m"})
	if err == nil || !strings.Contains(err.Error(), "no weights here") {
		t.Fatalf("got %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.py"), []byte("import sys\nsys.exit(7)\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Start(context.Background(), Config{Python: python(t), File: filepath.Join(dir, "model.py"), Dir: dir, Name: "m"})
	if err == nil {
		t.Fatal("a model.py that exits loaded")
	}
	t.Log(err)
}

// TestRestartStopsWhenNobodyWaits: a process that dies is restarted on the
// next call; when that restart's initialize hangs, it lasts only while a
// request of the call still waits (the call's own context is the server's
// lifetime), and a later call restarts again.
func TestRestartStopsWhenNobodyWaits(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "started")
	src := `
import os, time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        marker = os.path.join(os.path.dirname(__file__), "started")
        if os.path.exists(marker) and os.path.exists(marker + ".hang"):
            time.sleep(3600)
        open(marker, "w").close()

    def execute(self, requests):
        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            if a.sum() == 1000:
                os._exit(3)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a)]))
        return out
`
	if err := os.WriteFile(filepath.Join(dir, "model.py"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := []engine.TensorSpec{{Name: "INPUT0", DType: engine.Float32, Shape: []int64{-1, 4}}}
	out := []engine.TensorSpec{{Name: "OUTPUT0", DType: engine.Float32, Shape: []int64{-1, 4}}}
	b, err := Start(context.Background(), Config{Python: python(t), File: filepath.Join(dir, "model.py"), Dir: dir, Name: "m", Inputs: spec, Outputs: out})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	one := engine.FromFloat32([]int64{1, 4}, []float32{1, 1, 1, 1})
	if _, err := b.Run(context.Background(), []engine.Tensor{engine.FromFloat32([]int64{1, 4}, []float32{1000, 0, 0, 0})}); err == nil {
		t.Fatal("the crash answered")
	}
	if err := os.WriteFile(marker+".hang", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// The call's context is the server's (never ends); the request's ends.
	rctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := b.RunEach(context.Background(), []context.Context{rctx}, [][]engine.Tensor{{one}})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "restart") {
			t.Fatalf("a restart nobody waits for: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a hanging restart outlived its only request by 29 s")
	}
	if err := os.Remove(marker + ".hang"); err != nil {
		t.Fatal(err)
	}
	got, err := b.Run(context.Background(), []engine.Tensor{one})
	if err != nil || got[0].Float32s()[0] != 1 {
		t.Fatalf("after the stopped restart: %v %v", got, err)
	}
}

// TestOutputDatatypeAsSent: an output's datatype is its array's, as
// Triton's Python backend sends it, even where the configuration declares
// another.
func TestOutputDatatypeAsSent(t *testing.T) {
	src := "import numpy as np\nimport triton_python_backend_utils as pb_utils\nclass TritonPythonModel:\n    def execute(self, requests):\n" +
		"        a = requests[0].inputs()[0].as_numpy()\n        s = np.array([[b'x'] * 4] * len(a), dtype=object)\n" +
		"        return [pb_utils.InferenceResponse([pb_utils.Tensor('OUTPUT0', a.astype(np.int64)), pb_utils.Tensor('OUTPUT1', s)]) for r in requests]\n"
	b, _ := start(t, src, nil)
	a := engine.FromFloat32([]int64{1, 4}, []float32{1, 2, 3, 4})
	out, err := b.Run(context.Background(), []engine.Tensor{a, a})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].DType != engine.Int64 || out[0].Int64s()[3] != 4 {
		t.Fatalf("%v %v", out[0].DType, out[0].Int64s())
	}
}

func TestBLS(t *testing.T) {
	src := `
import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = r.inputs()[0].as_numpy()
            resp = pb_utils.InferenceRequest(model_name="double", inputs=[pb_utils.Tensor("X", x)], requested_output_names=["Y"]).exec()
            if resp.has_error():
                raise pb_utils.TritonModelException(resp.error().message())
            y = pb_utils.get_output_tensor_by_name(resp, "Y").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y), pb_utils.Tensor("OUTPUT1", np.array([[b"ok"] * 4] * len(y), dtype=object))]))
        return out
`
	var called string
	b, _ := start(t, src, func(ctx context.Context, model, version string, ins map[string]engine.Tensor, outs []string) (map[string]engine.Tensor, error) {
		called = model
		x := ins["X"].Float32s()
		y := make([]float32, len(x))
		for i, v := range x {
			y[i] = 2 * v
		}
		return map[string]engine.Tensor{"Y": engine.FromFloat32(ins["X"].Shape, y)}, nil
	})
	a := engine.FromFloat32([]int64{1, 4}, []float32{1, 2, 3, 4})
	out, err := b.Run(context.Background(), []engine.Tensor{a, a})
	if err != nil {
		t.Fatal(err)
	}
	if called != "double" || out[0].Float32s()[3] != 8 {
		t.Fatalf("called %q, got %v", called, out[0].Float32s())
	}
}

func TestCloseRunsFinalizeAndCancelKills(t *testing.T) {
	src := "import time\nclass TritonPythonModel:\n    def execute(self, requests):\n        time.sleep(60)\n"
	b, _ := start(t, src, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	a := engine.FromFloat32([]int64{1, 4}, []float32{1, 2, 3, 4})
	began := time.Now()
	_, err := b.Run(ctx, []engine.Tensor{a, a})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(began) > 10*time.Second {
		t.Fatalf("got %v after %s", err, time.Since(began))
	}
	began = time.Now()
	if err := b.Close(); err != nil || time.Since(began) > 15*time.Second {
		t.Fatalf("close: %v after %s", err, time.Since(began))
	}
}

// repeat answers IN's elements one response each (OUT, IDX), from a thread
// of its own after execute returned, then the final flag alone; an input
// starting with -1 gets an error response.
const repeat = `
import threading, time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            x = r.inputs()[0].as_numpy().reshape(-1)
            sender = r.get_response_sender()
            if x[0] == -3:
                raise pb_utils.TritonModelException("execute failed")
            if x[0] == -4:  # many responses before execute returns
                for i in range(200):
                    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i], dtype=np.float32)), pb_utils.Tensor("IDX", np.array([i], dtype=np.float32))]))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            def run(x=x, sender=sender):
                if x[0] == -2:
                    raise RuntimeError("the thread died")
                if x[0] == -1:
                    sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("no negative counts")), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                    return
                for i, v in enumerate(x):
                    time.sleep(0.01)
                    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([v], dtype=np.float32)), pb_utils.Tensor("IDX", np.array([i], dtype=np.float32))]))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                try:
                    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                except pb_utils.TritonModelException as e:
                    print("closed:", e)
            threading.Thread(target=run).start()
        return None
`

// startModel starts src as the model.py of cfg (its Python, File and Dir
// filled in), closed when the test ends.
func startModel(t *testing.T, src string, cfg Config) *Backend {
	t.Helper()
	cfg.Dir = t.TempDir()
	cfg.File, cfg.Python = filepath.Join(cfg.Dir, "model.py"), python(t)
	if err := os.WriteFile(cfg.File, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// streamOutputs are the outputs of the decoupled test models.
var streamOutputs = []engine.TensorSpec{{Name: "OUT", DType: engine.Float32, Shape: []int64{1}}, {Name: "IDX", DType: engine.Float32, Shape: []int64{1}}}

func TestDecoupledStream(t *testing.T) {
	b := startModel(t, repeat, Config{Name: "repeat", Decoupled: true,
		Inputs: []engine.TensorSpec{{Name: "IN", DType: engine.Float32, Shape: []int64{-1}}}, Outputs: streamOutputs})
	// Two requests at once on one instance: the second's execute runs
	// while the first still streams.
	var wg sync.WaitGroup
	for k := range 2 {
		wg.Go(func() {
			var got []float32
			finals := 0
			err := streamOne(b, context.Background(), []engine.Tensor{engine.FromFloat32([]int64{4}, []float32{10 * float32(k), 1, 2, 3})}, func(outs []engine.Tensor, err error, final bool) error {
				if err != nil {
					return err
				}
				if final {
					finals++
					if outs != nil {
						t.Errorf("the final flag came with outputs")
					}
					return nil
				}
				got = append(got, outs[0].Float32s()[0])
				return nil
			})
			if err != nil || finals != 1 || len(got) != 4 || got[0] != 10*float32(k) || got[3] != 3 {
				t.Errorf("request %d: %v, %d finals, %v", k, got, finals, err)
			}
		})
	}
	wg.Wait()
	var modelErr error
	err := streamOne(b, context.Background(), []engine.Tensor{engine.FromFloat32([]int64{1}, []float32{-1})}, func(outs []engine.Tensor, err error, final bool) error {
		if err != nil && final {
			modelErr = err
		}
		return nil
	})
	if err != nil || modelErr == nil || !strings.Contains(modelErr.Error(), "no negative counts") {
		t.Fatalf("error response: %v, %v", err, modelErr)
	}
	// A sender dropped without the final flag (its thread died) ends the
	// request with an error instead of leaving it waiting.
	modelErr = nil
	err = streamOne(b, context.Background(), []engine.Tensor{engine.FromFloat32([]int64{1}, []float32{-2})}, func(outs []engine.Tensor, err error, final bool) error {
		if err != nil && final {
			modelErr = err
		}
		return nil
	})
	if err != nil || modelErr == nil || !strings.Contains(modelErr.Error(), "dropped the request's response sender") {
		t.Fatalf("dropped sender: %v, %v", err, modelErr)
	}
	// Many responses sent inside execute, read by a slow client: the
	// channel's reader never waits for it.
	n := 0
	err = streamOne(b, context.Background(), []engine.Tensor{engine.FromFloat32([]int64{1}, []float32{-4})}, func(outs []engine.Tensor, err error, final bool) error {
		if outs != nil {
			n++
			time.Sleep(time.Millisecond)
		}
		return err
	})
	if err != nil || n != 200 {
		t.Fatalf("200 responses from execute: got %d, %v", n, err)
	}
	// An exception from execute ends the request with it, not with the
	// dropped sender's error.
	modelErr = nil
	err = streamOne(b, context.Background(), []engine.Tensor{engine.FromFloat32([]int64{1}, []float32{-3})}, func(outs []engine.Tensor, err error, final bool) error {
		if err != nil && final {
			modelErr = err
		}
		return nil
	})
	if err != nil || modelErr == nil || !strings.Contains(modelErr.Error(), "execute failed") {
		t.Fatalf("execute raised: %v, %v", err, modelErr)
	}
	// A client that stops reading ends its request; the model keeps serving.
	ctx, cancel := context.WithCancel(context.Background())
	err = streamOne(b, ctx, []engine.Tensor{engine.FromFloat32([]int64{3}, []float32{1, 2, 3})}, func([]engine.Tensor, error, bool) error {
		cancel()
		return errors.New("client gone")
	})
	if err == nil {
		t.Fatal("a send that failed did not end the request")
	}
	if _, err := b.Run(context.Background(), []engine.Tensor{engine.FromFloat32([]int64{1}, []float32{1})}); err == nil {
		t.Fatal("Run on a decoupled model answered")
	}
}

// untilCancelled waits in execute for a request whose INPUT0 starts with 0
// until it is cancelled, and counts those it saw cancelled; other requests
// answer the process's pid (OUTPUT0) and that count (OUTPUT1).
const untilCancelled = `
import os, time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    seen = 0
    def execute(self, requests):
        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            if a.flat[0] == 0:
                for _ in range(1500):
                    if r.is_cancelled():
                        break
                    time.sleep(0.01)
                TritonPythonModel.seen += int(r.is_cancelled())
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("cancelled", pb_utils.TritonError.CANCELLED)))
                continue
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", np.full(a.shape, os.getpid(), np.float32)),
                pb_utils.Tensor("OUTPUT1", np.full(a.shape, str(TritonPythonModel.seen).encode(), dtype=object)),
            ]))
        return out
`

// A request given up during execute is told so (is_cancelled()), and a
// model that returns keeps its process.
func TestCancelledRequestIsTold(t *testing.T) {
	b, _ := start(t, untilCancelled, nil)
	one := engine.FromFloat32([]int64{1, 4}, []float32{1, 1, 1, 1})
	zero := engine.FromFloat32([]int64{1, 4}, []float32{0, 0, 0, 0})
	probe := func() (pid float32, seen string) {
		t.Helper()
		out, err := b.Run(context.Background(), []engine.Tensor{one, one})
		if err != nil {
			t.Fatal(err)
		}
		s, err := out[1].Strings()
		if err != nil {
			t.Fatal(err)
		}
		return out[0].Float32s()[0], string(s[0])
	}
	pid, seen := probe()
	if seen != "0" {
		t.Fatalf("seen %q before any cancellation", seen)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	began := time.Now()
	// The model ends the request itself, with CANCELLED, soon after.
	_, err := b.Run(ctx, []engine.Tensor{zero, zero})
	var me *ModelError
	if !errors.As(err, &me) || me.Code != codeCancelled || time.Since(began) > 2*time.Second {
		t.Fatalf("a request past its deadline: %v after %s", err, time.Since(began))
	}
	// The instance is free once execute returned, well before cancelGrace.
	pid2, seen := probe()
	if pid2 != pid || seen != "1" || time.Since(began) > cancelGrace {
		t.Fatalf("after the cancellation: pid %v (was %v), seen %q, %s", pid2, pid, seen, time.Since(began))
	}
}

// cancelStream sends a response every 10 ms until its request is
// cancelled, then CANCELLED as the final response (x[0] == 1) or, after
// execute returned, counts it (x[0] == 2); x[0] == 3 answers that count.
const cancelStream = `
import threading, time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    seen = 0
    def execute(self, requests):
        for r in requests:
            x = r.inputs()[0].as_numpy().reshape(-1)
            sender = r.get_response_sender()
            def out(v):
                return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([v], dtype=np.float32)), pb_utils.Tensor("IDX", np.array([0], dtype=np.float32))])
            if x[0] == 1:  # inside execute, as Triton's response_sender_until_cancelled
                for i in range(1000):
                    if sender.is_cancelled():
                        sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("request has been cancelled", pb_utils.TritonError.CANCELLED)), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                        break
                    sender.send(out(i))
                    time.sleep(0.01)
            elif x[0] == 2:
                def run(r=r, sender=sender):
                    for i in range(1000):
                        if r.is_cancelled():
                            TritonPythonModel.seen += 1
                            return
                        sender.send(out(i))
                        time.sleep(0.01)
                threading.Thread(target=run).start()
            elif x[0] == 5:  # dies mid-stream
                import os
                sender.send(out(0))
                os._exit(7)
            else:
                sender.send(out(TritonPythonModel.seen), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
`

// A decoupled request is told it was cancelled both ways: softly (a BLS
// caller's cancel(): its responses, the final CANCELLED one too, still
// come) and by its client leaving after execute returned.
func TestDecoupledCancellation(t *testing.T) {
	b := startModel(t, cancelStream, Config{Name: "cancel_stream", Decoupled: true,
		Inputs: []engine.TensorSpec{{Name: "IN", DType: engine.Float32, Shape: []int64{-1}}}, Outputs: streamOutputs})
	// A process that dies mid-stream ends the request with its exit
	// status, after the response it had sent.
	var got []engine.Response
	err := streamOne(b, context.Background(), []engine.Tensor{engine.FromFloat32([]int64{1}, []float32{5})}, func(outs []engine.Tensor, err error, final bool) error {
		got = append(got, engine.Response{Outs: outs, Err: err, Final: final})
		return nil
	})
	if err != nil || len(got) != 2 || got[0].Outs == nil || got[1].Err == nil || !strings.Contains(got[1].Err.Error(), "exit status 7") {
		t.Fatalf("a process that died mid-stream: %+v, %v", got, err)
	}
	ctx, stop := withCancelRequest(context.Background())
	n := 0
	var last error
	err = streamOne(b, ctx, []engine.Tensor{engine.FromFloat32([]int64{1}, []float32{1})}, func(outs []engine.Tensor, err error, final bool) error {
		if outs != nil {
			n++
		}
		if n == 3 {
			stop()
		}
		if final {
			last = err
		}
		return nil
	})
	var me *ModelError
	if err != nil || !errors.As(last, &me) || me.Code != codeCancelled || errorCode(last) != codeCancelled || n < 3 || n > 50 {
		t.Fatalf("soft cancellation: %d responses, final %v, %v", n, last, err)
	}

	hard, cancel := context.WithCancel(context.Background())
	n = 0
	err = streamOne(b, hard, []engine.Tensor{engine.FromFloat32([]int64{1}, []float32{2})}, func(outs []engine.Tensor, err error, final bool) error {
		if n++; n == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a client that left: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var seen float32 = -1
		err := streamOne(b, context.Background(), []engine.Tensor{engine.FromFloat32([]int64{1}, []float32{3})}, func(outs []engine.Tensor, err error, final bool) error {
			if outs != nil {
				seen = outs[0].Float32s()[0]
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if seen == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the model's thread never saw its request cancelled (seen %v)", seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// streamOne runs one request of a decoupled model as serving.InferStream
// does without a batcher: RunEach with the request's engine.Responses,
// each response handed to send as it comes, until the final one.
func streamOne(b *Backend, ctx context.Context, inputs []engine.Tensor, send func([]engine.Tensor, error, bool) error) error {
	q := engine.NewResponses()
	started := make(chan error, 1)
	go func() {
		_, _, err := b.RunEach(ctx, []context.Context{engine.WithResponses(ctx, q)}, [][]engine.Tensor{inputs})
		started <- err
	}()
	return q.Forward(ctx, started, func(r engine.Response) error { return send(r.Outs, r.Err, r.Final) })
}

// A process's BLS calls in flight are bounded: past maxBLS a call is
// answered UNAVAILABLE at once instead of holding another goroutine.
func TestBLSCallsBounded(t *testing.T) {
	src := `
import threading
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        codes = []
        def call():
            x = pb_utils.Tensor("X", np.ones((1, 4), np.float32))
            r = pb_utils.InferenceRequest(model_name="slow", inputs=[x], requested_output_names=["Y"]).exec()
            codes.append(r.error().code() if r.has_error() else 0)
        threads = [threading.Thread(target=call) for _ in range(300)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        refused = sum(1 for c in codes if c == pb_utils.TritonError.UNAVAILABLE)
        return [pb_utils.InferenceResponse([
            pb_utils.Tensor("OUTPUT0", np.full((1, 4), refused, np.float32)),
            pb_utils.Tensor("OUTPUT1", np.array([[b"ok"] * 4], dtype=object)),
        ]) for _ in requests]
`
	var mu sync.Mutex
	running, most := 0, 0
	b, _ := start(t, src, func(ctx context.Context, model, version string, ins map[string]engine.Tensor, outs []string) (map[string]engine.Tensor, error) {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		time.Sleep(time.Second)
		mu.Lock()
		running--
		mu.Unlock()
		return map[string]engine.Tensor{"Y": ins["X"]}, nil
	})
	a := engine.FromFloat32([]int64{1, 4}, []float32{1, 2, 3, 4})
	out, err := b.Run(context.Background(), []engine.Tensor{a, a})
	if err != nil {
		t.Fatal(err)
	}
	refused := out[0].Float32s()[0]
	if most > maxBLS || refused == 0 || int(refused)+most > 300 {
		t.Fatalf("%d calls ran at once (limit %d), %v refused", most, maxBLS, refused)
	}
}

// A BLS request's ID and parameters are its own: a JSON object of scalars,
// or nothing.
func TestBLSRequestInfo(t *testing.T) {
	for params, want := range map[string]string{"": "", "{}": "", `{"a":1,"b":"x","c":true,"d":0.5}`: `{"a":1,"b":"x","c":true,"d":0.5}`} {
		info, err := blsRequestInfo(&message{Params: params, RequestID: "r"})
		if err != nil || info.Parameters != want || info.ID != "r" {
			t.Errorf("%q: %+v %v", params, info, err)
		}
	}
	for _, bad := range []string{"[1]", "x", `{"a":{"b":1}}`, `{"a":[1]}`, `{"a":null}`} {
		if _, err := blsRequestInfo(&message{Params: bad}); err == nil {
			t.Errorf("%q was taken", bad)
		}
	}
}
