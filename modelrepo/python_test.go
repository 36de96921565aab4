package modelrepo

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/serving"
)

func pythonBin(t *testing.T) string { return testmodels.NumpyPython(t) }

// counting answers OUT = IN + the number of requests execute was given, and
// an error for a request whose first element is negative; finalize writes
// the file its parameter names.
const countingConfig = `backend: "python"
max_batch_size: 8
input [{ name: "IN", data_type: TYPE_INT32, dims: [ 2 ] }]
output [{ name: "OUT", data_type: TYPE_INT32, dims: [ 2 ] }]
dynamic_batching { preferred_batch_size: [ 8 ], max_queue_delay_microseconds: 3000000 }
parameters { key: "finalized", value: { string_value: "%s" } }
`

const countingModel = `
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        self.finalized = cfg["parameters"]["finalized"]["string_value"]
        assert args["model_name"] == "counting" and args["model_version"] == "1", args
        assert args["model_instance_name"] == "counting_0_0", args

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            if x.flat[0] < 0:
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("negative input: send numbers >= 0")))
                continue
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", (x + len(requests)).astype(np.int32))]))
        return out

    def finalize(self):
        open(self.finalized, "w").write("done")
`

const blsConfig = `backend: "python"
max_batch_size: 8
input [{ name: "INPUT0", data_type: TYPE_INT32, dims: [ 16 ] }, { name: "INPUT1", data_type: TYPE_INT32, dims: [ 16 ] }]
output [{ name: "SUM", data_type: TYPE_INT32, dims: [ 16 ] }]
`

// bls asks the ONNX model simple for the sum of its inputs (Triton's BLS).
const blsModel = `
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            resp = pb_utils.InferenceRequest(model_name="simple", inputs=r.inputs(), requested_output_names=["OUTPUT0"]).exec()
            if resp.has_error():
                raise pb_utils.TritonModelException(resp.error().message())
            s = pb_utils.get_output_tensor_by_name(resp, "OUTPUT0").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", s)]))
        return out
`

// completing has no config.pbtxt: its auto_complete_config lists its tensors.
const completingModel = `
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    @staticmethod
    def auto_complete_config(cfg):
        cfg.add_input({"name": "X", "data_type": "TYPE_STRING", "dims": [1]})
        cfg.add_output({"name": "Y", "data_type": "TYPE_STRING", "dims": [1]})
        cfg.set_max_batch_size(4)
        cfg.set_dynamic_batching()
        return cfg

    def execute(self, requests):
        out = []
        for r in requests:
            x = r.inputs()[0].as_numpy()
            y = np.array([[b.upper()] for b in x[:, 0]], dtype=object)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y)]))
        return out
`

func int32Tensor(rows int, vals ...int32) engine.Tensor {
	data := make([]byte, 0, 4*len(vals))
	for _, v := range vals {
		data = binary.LittleEndian.AppendUint32(data, uint32(v))
	}
	return engine.Tensor{DType: engine.Int32, Shape: []int64{int64(rows), int64(len(vals) / rows)}, Data: data}
}

func TestPythonModels(t *testing.T) {
	py := pythonBin(t)
	root := t.TempDir()
	copyModel(t, filepath.Join(samples(t), "simple"), root, "simple")
	finalized := filepath.Join(t.TempDir(), "finalized")
	testmodels.WritePython(t, root, "counting", strings.Replace(countingConfig, "%s", finalized, 1), countingModel)
	testmodels.WritePython(t, root, "bls", blsConfig, blsModel)
	testmodels.WritePython(t, root, "completing", "", completingModel)
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit, LoadModels: []string{"*"}, Python: py})
	r := f.repo
	ctx := context.Background()

	// Four concurrent requests of two rows make one execute call of four
	// requests (preferred batch 8): each answer says so, each its own.
	inst, err := r.Get("counting", "")
	if err != nil {
		t.Fatal(err)
	}
	if c := inst.Config; c.Backend != "python" || c.MaxBatchSize != 8 || c.DefaultModelFilename != "model.py" || c.Inputs[0].DataType != "TYPE_INT32" {
		t.Fatalf("config %+v", c)
	}
	var wg sync.WaitGroup
	outs := make([][]engine.Tensor, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Go(func() {
			outs[i], _, errs[i] = serving.Infer(ctx, r, inst, []engine.Tensor{int32Tensor(2, int32(10*i), 1, 2, 3)})
		})
	}
	wg.Wait()
	for i := range 4 {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		got := int32s(outs[i][0])
		if len(got) != 4 || got[0] != int32(10*i)+4 || got[3] != 3+4 {
			t.Fatalf("request %d: %v, want its own rows plus 4 (one execute of 4 requests)", i, got)
		}
	}
	if s := inst.Stats.Snapshot(); s.ExecutionCount != 1 || s.InferenceCount != 8 {
		t.Fatalf("statistics: %d executions of %d rows, want 1 of 8", s.ExecutionCount, s.InferenceCount)
	}

	// A request the model answers with an error fails alone; the one
	// batched with it gets its answer.
	var bad, good error
	var goodOut []engine.Tensor
	wg.Go(func() {
		_, _, bad = serving.Infer(ctx, r, inst, []engine.Tensor{int32Tensor(4, -1, 0, 0, 0, 0, 0, 0, 0)})
	})
	wg.Go(func() {
		goodOut, _, good = serving.Infer(ctx, r, inst, []engine.Tensor{int32Tensor(4, 5, 0, 0, 0, 0, 0, 0, 0)})
	})
	wg.Wait()
	if bad == nil || !strings.Contains(bad.Error(), "negative input") || good != nil || int32s(goodOut[0])[0] != 7 {
		t.Fatalf("bad %v, good %v %v", bad, good, goodOut)
	}

	// BLS: the Python model calls the ONNX model simple.
	binst, err := r.Get("bls", "")
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := serving.Infer(ctx, r, binst, simpleInputs(3))
	if err != nil {
		t.Fatal(err)
	}
	if sum := int32s(out[0]); len(sum) != 48 || sum[0] != 1 || sum[15] != 16 {
		t.Fatalf("bls: %v", sum)
	}

	// auto_complete_config completed a model without config.pbtxt.
	cinst, err := r.Get("completing", "")
	if err != nil {
		t.Fatal(err)
	}
	if c := cinst.Config; c.MaxBatchSize != 4 || len(c.Inputs) != 1 || c.Inputs[0].DataType != "TYPE_STRING" || c.Backend != "python" {
		t.Fatalf("auto-completed config %+v", c)
	}
	x, err := engine.FromStrings([]int64{2, 1}, []string{"ab", "cd"})
	if err != nil {
		t.Fatal(err)
	}
	out, _, err = serving.Infer(ctx, r, cinst, []engine.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	if ys, _ := out[0].Strings(); len(ys) != 2 || string(ys[0]) != "AB" || string(ys[1]) != "CD" {
		t.Fatalf("strings: %q", ys)
	}

	// Unloading runs finalize.
	if err := r.Unload(ctx, "counting", serving.UnloadOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(finalized); err == nil && string(b) == "done" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("finalize did not run at unload")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPythonReshape: a Python model gets its inputs in their reshape's
// shape and its outputs reach clients in the configuration's dims, as
// Triton's Python backend does; over a BLS call and a decoupled stream too.
func TestPythonReshape(t *testing.T) {
	py := pythonBin(t)
	root := t.TempDir()
	const model = `
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        import json
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"]))

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            shape = np.array(x.shape, dtype=np.int32).reshape(1, -1)
            resp = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", (x * 2).astype(np.int32)), pb_utils.Tensor("SHAPE", shape)])
            if self.decoupled:
                r.get_response_sender().send(resp, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                out.append(resp)
        return None if self.decoupled else out
`
	const tensors = `max_batch_size: 4
input [{ name: "IN", data_type: TYPE_INT32, dims: [ 4 ], reshape: { shape: [ 2, 2 ] } }]
output [{ name: "OUT", data_type: TYPE_INT32, dims: [ 4 ], reshape: { shape: [ 2, 2 ] } }, { name: "SHAPE", data_type: TYPE_INT32, dims: [ 3 ] }]
`
	testmodels.WritePython(t, root, "reshaped", "backend: \"python\"\n"+tensors, model)
	testmodels.WritePython(t, root, "streamed", "backend: \"python\"\nmodel_transaction_policy { decoupled: true }\n"+tensors, model)
	testmodels.WritePython(t, root, "caller", `backend: "python"
max_batch_size: 4
input [{ name: "IN", data_type: TYPE_INT32, dims: [ 4 ] }]
output [{ name: "OUT", data_type: TYPE_INT32, dims: [ 4 ] }]
`, `
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            resp = pb_utils.InferenceRequest(model_name="reshaped", inputs=r.inputs(), requested_output_names=["OUT"]).exec()
            if resp.has_error():
                raise pb_utils.TritonModelException(resp.error().message())
            out.append(pb_utils.InferenceResponse([pb_utils.get_output_tensor_by_name(resp, "OUT")]))
        return out
`)
	// Triton's scalar pattern: dims [1], reshape to no dims at all.
	testmodels.WritePython(t, root, "scalar", `backend: "python"
max_batch_size: 4
input [{ name: "IN", data_type: TYPE_INT32, dims: [ 1 ], reshape: { shape: [ ] } }]
output [{ name: "NDIM", data_type: TYPE_INT32, dims: [ 1 ] }]
`, `
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("NDIM", np.array([[pb_utils.get_input_tensor_by_name(r, "IN").as_numpy().ndim]], dtype=np.int32))]) for r in requests]
`)
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit, LoadModels: []string{"*"}, Python: py})
	r := f.repo
	ctx := context.Background()
	scalar, err := r.Get("scalar", "")
	if err != nil {
		t.Fatal(err)
	}
	if rs := scalar.Config.Inputs[0].Reshape; rs == nil || len(rs) != 0 {
		t.Fatalf("an empty reshape is described as %#v, want []", rs)
	}
	if outs, _, err := serving.Infer(ctx, r, scalar, []engine.Tensor{int32Tensor(1, 5)}); err != nil || fmt.Sprint(int32s(outs[0])) != "[1]" {
		t.Fatalf("scalar reshape: the model saw %v dims (%v), want 1 (the batch axis only)", outs, err)
	}
	inst, err := r.Get("reshaped", "")
	if err != nil {
		t.Fatal(err)
	}
	if c := inst.Config.Inputs[0]; fmt.Sprint(c.Dims, c.Reshape) != "[4] [2 2]" || fmt.Sprint(inst.Inputs()[0].Shape) != "[-1 4]" {
		t.Fatalf("config input %+v, served as %v", c, inst.Inputs()[0].Shape)
	}
	outs, _, err := serving.Infer(ctx, r, inst, []engine.Tensor{int32Tensor(2, 1, 2, 3, 4, 5, 6, 7, 8)})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(outs[0].Shape, int32s(outs[0]), int32s(outs[1])) != "[2 4] [2 4 6 8 10 12 14 16] [2 2 2]" {
		t.Fatalf("OUT %v %v, the model saw %v", outs[0].Shape, int32s(outs[0]), int32s(outs[1]))
	}
	if _, _, err := serving.Infer(ctx, r, inst, []engine.Tensor{int32Tensor(1, 1, 2, 3)}); err == nil || !strings.Contains(err.Error(), "wrong shape") {
		t.Fatalf("3 values for dims [4]: %v", err)
	}
	caller, err := r.Get("caller", "")
	if err != nil {
		t.Fatal(err)
	}
	outs, _, err = serving.Infer(ctx, r, caller, []engine.Tensor{int32Tensor(1, 1, 2, 3, 4)})
	if err != nil || fmt.Sprint(outs[0].Shape, int32s(outs[0])) != "[1 4] [2 4 6 8]" {
		t.Fatalf("through BLS: %v %v", outs, err)
	}
	streamed, err := r.Get("streamed", "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	err = serving.InferStream(ctx, streamed, []engine.Tensor{int32Tensor(1, 1, 2, 3, 4)}, func(outs []engine.Tensor, err error, final bool) error {
		if outs != nil {
			got = append(got, fmt.Sprint(outs[0].Shape, int32s(outs[0]), int32s(outs[1])))
		}
		return err
	})
	if err != nil || strings.Join(got, ";") != "[1 4] [2 4 6 8] [1 2 2]" {
		t.Fatalf("decoupled: %q %v", got, err)
	}
}

func TestPythonRefusals(t *testing.T) {
	py := pythonBin(t)
	const model = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
	const tensors = "input [{ name: \"X\", data_type: TYPE_FP32, dims: [ 1 ] }]\noutput [{ name: \"Y\", data_type: TYPE_FP32, dims: [ 1 ] }]\n"
	for name, tc := range map[string]struct{ config, src, want string }{
		"platform":            {"backend: \"python\"\nplatform: \"onnxruntime_onnx\"\n" + tensors, model, "no platform"},
		"decoupled":           {"backend: \"onnxruntime\"\nmodel_transaction_policy { decoupled: true }\n" + tensors, model, "decoupled is served for Python models"},
		"conda":               {"backend: \"python\"\nparameters { key: \"EXECUTION_ENV_PATH\", value: { string_value: \"env.tar.gz\" } }\n" + tensors, model, "EXECUTION_ENV_PATH"},
		"no tensors":          {"backend: \"python\"\n", model, "lists its outputs"},
		"iterative, controls": {"backend: \"python\"\nmax_batch_size: 1\nsequence_batching { iterative_sequence: true, control_input [{ name: \"S\", control [{ kind: CONTROL_SEQUENCE_START, int32_false_true: [ 0, 1 ] }] }] }\n" + tensors, model, "iterative_sequence is served alone"},
		"batched, no inputs":  {"backend: \"python\"\nmax_batch_size: 4\noutput [{ name: \"Y\", data_type: TYPE_FP32, dims: [ 1 ] }]\n", model, "without inputs has max_batch_size 0"},
		"sequence":            {"backend: \"python\"\nmax_batch_size: 1\nsequence_batching { control_input [{ name: \"X\", control [{ kind: CONTROL_SEQUENCE_START, int32_false_true: [ 0, 1 ] }] }] }\n" + tensors, model, "control \"X\" is also an input"},
		"sequence decoupled":  {"backend: \"python\"\nmax_batch_size: 1\nmodel_transaction_policy { decoupled: true }\nsequence_batching {}\n" + tensors, model, "not served for decoupled"},
		"reshape":             {"backend: \"python\"\ninput [{ name: \"X\", data_type: TYPE_FP32, dims: [ 2 ], reshape: { shape: [ 1, 3 ] } }]\noutput [{ name: \"Y\", data_type: TYPE_FP32, dims: [ 1 ] }]\n", model, "different element counts"},
		"reshape sequence":    {"backend: \"python\"\nmax_batch_size: 1\nsequence_batching {}\ninput [{ name: \"X\", data_type: TYPE_FP32, dims: [ 2 ], reshape: { shape: [ 1, 2 ] } }]\noutput [{ name: \"Y\", data_type: TYPE_FP32, dims: [ 1 ] }]\n", model, "not supported with sequence_batching"},
		"init fails":          {"backend: \"python\"\n" + tensors, "class TritonPythonModel:\n    def initialize(self, args):\n        raise RuntimeError('weights missing')\n", "RuntimeError: weights missing"},
		"no class":            {"backend: \"python\"\n" + tensors, "x = 1\n", "defines no class TritonPythonModel"},
		"syntax":              {"backend: \"python\"\n" + tensors, "def (:\n", "SyntaxError"},
		"optional":            {"backend: \"onnxruntime\"\ninput [{ name: \"X\", data_type: TYPE_FP32, dims: [ 1 ], optional: true }]\noutput [{ name: \"Y\", data_type: TYPE_FP32, dims: [ 1 ] }]\n", model, "optional inputs are served for Python models"},
		"file name":           {"backend: \"python\"\ndefault_model_filename: \"../model.py\"\n" + tensors, model, "inside the version directory"},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			testmodels.WritePython(t, root, "m", tc.config, tc.src)
			f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit, Python: py})
			err := f.repo.Load(context.Background(), "m", serving.LoadOptions{})
			wantModelError(t, err, serving.ModelLoadFailed, tc.want)
		})
	}
}

// TestPythonProbe: a model's readiness probe asks its is_ready(); Ready,
// which asks only whether it is loaded, does not.
func TestPythonProbe(t *testing.T) {
	py := pythonBin(t)
	root := t.TempDir()
	testmodels.WritePython(t, root, "counting", strings.Replace(countingConfig, "%s", filepath.Join(t.TempDir(), "finalized"), 1), countingModel)
	testmodels.WritePython(t, root, "notready", `backend: "python"
input [{ name: "IN", data_type: TYPE_INT32, dims: [ 1 ] }]
output [{ name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] }]
`, `
class TritonPythonModel:
    def execute(self, requests):
        return [None for _ in requests]
    def is_ready(self):
        return False
`)
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit, LoadModels: []string{"*"}, Python: py})
	ctx := context.Background()
	if err := f.repo.Probe(ctx, "counting", ""); err != nil {
		t.Fatalf("a model without is_ready(): %v", err)
	}
	if err := f.repo.Ready("notready", ""); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	err := f.repo.Probe(ctx, "notready", "1")
	me, ok := serving.AsModelError(err)
	if !ok || me.Kind != serving.ModelNotReady || !me.Check || !strings.Contains(me.Message, "Model 'notready' version 1 is not ready: its is_ready() returned False") {
		t.Fatalf("Probe: %#v", err)
	}
	if msg, ok := serving.FailedCheck(err); !ok || msg != me.Message {
		t.Fatalf("FailedCheck: %q %v", msg, ok)
	}
	wantModelError(t, f.repo.Probe(ctx, "nosuch", ""), serving.ModelUnknown, "Request for unknown model")
}

// TestPythonNoInputs: a Python model may take no inputs (max_batch_size 0),
// as Triton's: each request runs it alone.
func TestPythonNoInputs(t *testing.T) {
	py := pythonBin(t)
	root := t.TempDir()
	testmodels.WritePython(t, root, "noin", `backend: "python"
output [{ name: "OUT", data_type: TYPE_INT32, dims: [ 2 ] }]
`, `
import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([len(r.inputs()), 7], np.int32))]) for r in requests]
`)
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit, LoadModels: []string{"*"}, Python: py})
	inst, err := f.repo.Get("noin", "")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		out, _, err := serving.Infer(context.Background(), f.repo, inst, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := int32s(out[0]); len(got) != 2 || got[0] != 0 || got[1] != 7 {
			t.Fatalf("OUT %v", got)
		}
	}
}

// TestPythonRepositoryAPI: pb_utils.load_model, unload_model and
// is_model_ready reach the repository, as Triton's do.
func TestPythonRepositoryAPI(t *testing.T) {
	py := pythonBin(t)
	root := t.TempDir()
	copyModel(t, filepath.Join(samples(t), "simple"), root, "simple")
	testmodels.WritePython(t, root, "loader", `backend: "python"
input [{ name: "IN", data_type: TYPE_INT32, dims: [ 1 ] }]
output [{ name: "OUT", data_type: TYPE_STRING, dims: [ 1 ] }]
`, `
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        seen = [pb_utils.is_model_ready("simple")]
        pb_utils.load_model("simple")
        seen.append(pb_utils.is_model_ready("simple"))
        seen.append(pb_utils.is_model_ready("simple", "7"))
        try:
            pb_utils.is_model_ready("nosuch")
            seen.append("no error")
        except pb_utils.TritonModelException as e:
            seen.append("Request for unknown model: 'nosuch'" in str(e))
        try:
            pb_utils.load_model("simple", config="{not json")
            seen.append("no error")
        except pb_utils.TritonModelException as e:
            seen.append("failed to load" in str(e))
        seen.append(pb_utils.is_model_ready("simple"))
        pb_utils.unload_model("simple")
        seen.append(pb_utils.is_model_ready("simple"))
        pb_utils.unload_model("loader")  # itself: it answers this request, then unloads
        out = " ".join(str(s) for s in seen).encode()
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([out], dtype=object))]) for _ in requests]
`)
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit, LoadModels: []string{"loader"}, Python: py})
	inst, err := f.repo.Get("loader", "")
	if err != nil {
		t.Fatal(err)
	}
	in := engine.Tensor{DType: engine.Int32, Shape: []int64{1}, Data: make([]byte, 4)}
	out, _, err := serving.Infer(context.Background(), f.repo, inst, []engine.Tensor{in})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := out[0].Strings()
	if want := "False True False True True True False"; len(got) != 1 || string(got[0]) != want {
		t.Fatalf("what the model saw: %q, want %q", got, want)
	}
	deadline := time.Now().Add(30 * time.Second)
	for f.repo.Ready("loader", "") == nil {
		if time.Now().After(deadline) {
			t.Fatal("the model that unloaded itself is still ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPythonExecuteRaises: an exception from execute reaches clients in
// Triton's words, as the model's answer (not an engine failure).
func TestPythonExecuteRaises(t *testing.T) {
	py := pythonBin(t)
	root := t.TempDir()
	testmodels.WritePython(t, root, "raises", `backend: "python"
max_batch_size: 4
input [{ name: "IN", data_type: TYPE_INT32, dims: [ 1 ] }]
output [{ name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] }]
`, `
class TritonPythonModel:
    def execute(self, requests):
        lorem_ipsum
`)
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit, LoadModels: []string{"*"}, Python: py})
	inst, err := f.repo.Get("raises", "")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = serving.Infer(context.Background(), f.repo, inst, []engine.Tensor{int32Tensor(1, 1)})
	got := serving.Classify(err, time.Second)
	if got.Kind != serving.KindAnswered || got.Code != 1 || !strings.HasPrefix(got.Message, "Failed to process the request(s) for model 'raises', message: NameError: name 'lorem_ipsum' is not defined") {
		t.Fatalf("%+v", got)
	}
}
