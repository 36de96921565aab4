package modelrepo

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/serving"
)

// writeEnsemble writes an ensemble's directory (config.pbtxt and the empty
// version directory Triton's layout asks for).
func writeEnsemble(t testing.TB, root, name, config string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, name, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, name, "config.pbtxt"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
}

// addSubTwice runs Triton's simple (sum and difference) on the inputs,
// then twice more on its results, the two later steps side by side:
// OUT_A = (a+b)+(a-b) = 2a, OUT_B = (a+b)-(a-b) = 2b, OUT_C = (a-b)+(a+b) = 2a.
const addSubTwice = `name: "add_sub_twice"
platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUT_A" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUT_B" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUT_C" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling {
  step [
    { model_name: "simple" model_version: -1 input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
      output_map { key: "OUTPUT0" value: "sum" } output_map { key: "OUTPUT1" value: "diff" } },
    { model_name: "simple" model_version: -1 input_map { key: "INPUT0" value: "sum" } input_map { key: "INPUT1" value: "diff" }
      output_map { key: "OUTPUT0" value: "OUT_A" } output_map { key: "OUTPUT1" value: "OUT_B" } },
    { model_name: "simple" model_version: 1 input_map { key: "INPUT0" value: "diff" } input_map { key: "INPUT1" value: "sum" }
      output_map { key: "OUTPUT0" value: "OUT_C" } }
  ]
}
`

func int32s(t engine.Tensor) []int32 {
	out := make([]int32, len(t.Data)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(t.Data[i*4:]))
	}
	return out
}

func checkAddSubTwice(t testing.TB, out []engine.Tensor, rows int) {
	t.Helper()
	if len(out) != 3 {
		t.Fatalf("%d outputs, want 3", len(out))
	}
	a, b, c := int32s(out[0]), int32s(out[1]), int32s(out[2])
	if len(a) != rows*16 || out[0].Shape[0] != int64(rows) {
		t.Fatalf("OUT_A shape %v", out[0].Shape)
	}
	for i := range a {
		x := int32(i % 16) // simpleInputs: A = 0..15, B = 1
		if a[i] != 2*x || b[i] != 2 || c[i] != 2*x {
			t.Fatalf("element %d: OUT_A %d OUT_B %d OUT_C %d, want %d 2 %d", i, a[i], b[i], c[i], 2*x, 2*x)
		}
	}
}

// An ensemble loads its step models with it, runs its steps in order
// (independent ones side by side) through their batchers, concurrently,
// reports its configuration, and fails cleanly when a step model goes.
func TestEnsemble(t *testing.T) {
	src := samples(t)
	root := t.TempDir()
	copyModel(t, filepath.Join(src, "simple"), root, "simple")
	writeEnsemble(t, root, "add_sub_twice", addSubTwice)
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit, LoadModels: []string{"add_sub_twice"}})
	r := f.repo
	idx := r.Index()
	if len(idx) != 2 || idx[0].State != serving.ModelReady || idx[1].State != serving.ModelReady {
		t.Fatalf("index %+v: the ensemble's step model loads with it", idx)
	}
	inst, err := r.Get("add_sub_twice", "")
	if err != nil {
		t.Fatal(err)
	}
	c := inst.Config
	if c.Platform != "ensemble" || c.MaxBatchSize != 8 || len(c.Ensemble) != 3 || c.Ensemble[1].InputMap["INPUT0"] != "sum" || c.Ensemble[2].Version != 1 {
		t.Fatalf("config %+v", c)
	}
	if len(c.Inputs) != 2 || c.Inputs[0].Name != "A" || c.Inputs[0].DataType != "TYPE_INT32" || len(c.Outputs) != 3 {
		t.Fatalf("config tensors %+v %+v", c.Inputs, c.Outputs)
	}
	if !inst.Batched() || len(inst.Inputs()) != 2 || inst.Inputs()[0].Shape[0] != -1 {
		t.Fatalf("the ensemble has a batch axis: %v %v", inst.Batched(), inst.Inputs())
	}
	out, _, err := serving.Infer(context.Background(), r, inst, simpleInputs(3))
	if err != nil {
		t.Fatal(err)
	}
	checkAddSubTwice(t, out, 3)

	// Concurrent requests: all answered, right, batched in simple.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 32; g++ {
		wg.Go(func() {
			for range 10 {
				out, _, err := serving.Infer(context.Background(), r, inst, simpleInputs(1+g%4))
				if err != nil {
					errs <- err
					return
				}
				checkAddSubTwice(t, out, 1+g%4)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	simple, _ := r.Get("simple", "")
	if st := simple.Stats.Snapshot(); st.InferenceCount < 3*320 {
		t.Fatalf("simple ran %d rows for 320 ensemble requests of 3 steps", st.InferenceCount)
	}
	if st := inst.Stats.Snapshot(); st.InferenceCount < 320 {
		t.Fatalf("the ensemble's own statistics: %+v", st)
	}

	// A wrong input is the client's error, named.
	bad := simpleInputs(1)
	bad[1].Shape, bad[1].Data = []int64{1, 8}, bad[1].Data[:32]
	_, _, err = serving.Infer(context.Background(), r, inst, bad)
	if f := serving.Classify(err, 0); f.Kind != serving.KindInvalidInput {
		t.Fatalf("a short input: %v (%v)", err, f.Kind)
	}

	// Its step model unloaded: the ensemble is unloaded with it, as
	// Triton's; a request that already holds it fails as not ready,
	// naming the model.
	if err := r.Unload(context.Background(), "simple", serving.UnloadOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Ready("add_sub_twice", ""); err == nil {
		t.Fatal("the ensemble stays ready without its model")
	}
	_, _, err = serving.Infer(context.Background(), r, inst, simpleInputs(1))
	if f := serving.Classify(err, 0); f.Kind != serving.KindNotReady {
		t.Fatalf("a request on the unloaded ensemble: %v (%+v)", err, f)
	}
	// Loaded again, it loads simple again and runs.
	if err := r.Load(context.Background(), "add_sub_twice", serving.LoadOptions{}); err != nil {
		t.Fatal(err)
	}
	// Its model gone without the ensemble (a poll that no longer finds
	// it): requests fail as not ready, naming the model.
	if err := r.unload(context.Background(), "simple"); err != nil {
		t.Fatal(err)
	}
	if inst, err = r.Get("add_sub_twice", ""); err != nil {
		t.Fatal(err)
	}
	_, _, err = serving.Infer(context.Background(), r, inst, simpleInputs(1))
	if f := serving.Classify(err, 0); f.Kind != serving.KindNotReady || !strings.Contains(f.Message, "'simple'") {
		t.Fatalf("step model gone: %v (%+v)", err, f)
	}
	if err := r.Load(context.Background(), "add_sub_twice", serving.LoadOptions{}); err != nil {
		t.Fatal(err)
	}
	if inst, err = r.Get("add_sub_twice", ""); err != nil {
		t.Fatal(err)
	}
	if out, _, err = serving.Infer(context.Background(), r, inst, simpleInputs(2)); err != nil {
		t.Fatal(err)
	}
	checkAddSubTwice(t, out, 2)
}

// An unbatched ensemble (max_batch_size 0) of an unbatched use of simple,
// and an ensemble of an ensemble.
func TestEnsembleNestedUnbatched(t *testing.T) {
	src := samples(t)
	root := t.TempDir()
	copyModel(t, filepath.Join(src, "simple"), root, "simple")
	writeEnsemble(t, root, "add_sub_twice", addSubTwice)
	writeEnsemble(t, root, "outer", `platform: "ensemble"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1, 16 ] }, { name: "Y" data_type: TYPE_INT32 dims: [ 1, 16 ] } ]
output [ { name: "Z" data_type: TYPE_INT32 dims: [ 1, 16 ] } ]
ensemble_scheduling { step [ { model_name: "add_sub_twice" model_version: -1
  input_map { key: "A" value: "X" } input_map { key: "B" value: "Y" } output_map { key: "OUT_B" value: "Z" } } ] }
`)
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit, LoadModels: []string{"outer"}})
	inst, err := f.repo.Get("outer", "")
	if err != nil {
		t.Fatal(err)
	}
	if inst.Batched() || inst.Config.MaxBatchSize != 0 {
		t.Fatal("max_batch_size 0: no batch axis")
	}
	out, _, err := serving.Infer(context.Background(), f.repo, inst, simpleInputs(1))
	if err != nil {
		t.Fatal(err)
	}
	if z := int32s(out[0]); len(z) != 16 || z[5] != 2 || out[0].Shape[0] != 1 {
		t.Fatalf("Z %v %v", out[0].Shape, z)
	}
	if len(f.repo.Index()) != 3 {
		t.Fatalf("index %+v: both levels' models load", f.repo.Index())
	}
}

// A pipeline that does not hold together is refused at load, saying why.
func TestEnsembleRefusals(t *testing.T) {
	src := samples(t)
	step := func(model, in0, in1, out0, out1 string) string {
		s := `{ model_name: "` + model + `" model_version: -1 input_map { key: "INPUT0" value: "` + in0 + `" } input_map { key: "INPUT1" value: "` + in1 + `" }`
		if out0 != "" {
			s += ` output_map { key: "OUTPUT0" value: "` + out0 + `" }`
		}
		if out1 != "" {
			s += ` output_map { key: "OUTPUT1" value: "` + out1 + `" }`
		}
		return s + ` }`
	}
	ens := func(extra, outType string, steps ...string) string {
		return `platform: "ensemble"
max_batch_size: 8
` + extra + `input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUT" data_type: ` + outType + ` dims: [ 16 ] } ]
ensemble_scheduling { step [ ` + strings.Join(steps, ", ") + ` ] }
`
	}
	for name, c := range map[string]struct{ config, want string }{
		"cycle": {ens("", "TYPE_INT32", step("simple", "A", "y", "x", ""), step("simple", "x", "B", "y", "OUT")),
			"cycle"},
		"unknown_model":  {ens("", "TYPE_INT32", step("nosuch", "A", "B", "OUT", "")), "nosuch"},
		"no_producer":    {ens("", "TYPE_INT32", step("simple", "A", "nowhere", "OUT", "")), `"nowhere", which is neither an input`},
		"twice_produced": {ens("", "TYPE_INT32", step("simple", "A", "B", "OUT", ""), step("simple", "A", "B", "OUT", "")), "each ensemble tensor has one producer"},
		"overwrites_input": {ens("", "TYPE_INT32", step("simple", "A", "B", "OUT", "A")),
			"an input of the ensemble"},
		"output_unwritten": {ens("", "TYPE_INT32", step("simple", "A", "B", "x", "")), `output "OUT" is not written`},
		"output_dtype":     {ens("", "TYPE_FP32", step("simple", "A", "B", "OUT", "")), `output "OUT" is FP32`},
		"input_dtype": {strings.Replace(ens("", "TYPE_INT32", step("simple", "A", "B", "OUT", "")), `name: "B" data_type: TYPE_INT32`, `name: "B" data_type: TYPE_FP32`, 1),
			`takes INT32 but "B" is FP32`},
		"unmapped_input": {ens("", "TYPE_INT32", `{ model_name: "simple" input_map { key: "INPUT0" value: "A" } output_map { key: "OUTPUT0" value: "OUT" } }`),
			`input "INPUT1" is not in input_map`},
		"unknown_tensor": {ens("", "TYPE_INT32", `{ model_name: "simple" input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" } input_map { key: "INPUT9" value: "B" } output_map { key: "OUTPUT0" value: "OUT" } }`),
			`"INPUT9", which the model does not take`},
		"instance_group": {ens("instance_group [ { count: 2 } ]\n", "TYPE_INT32", step("simple", "A", "B", "OUT", "")), "no engine instances"},
		"no_steps":       {"platform: \"ensemble\"\ninput [ { name: \"A\" data_type: TYPE_INT32 dims: [ 1 ] } ]\noutput [ { name: \"O\" data_type: TYPE_INT32 dims: [ 1 ] } ]\n", "at least one step"},
		"no_platform":    {strings.Replace(ens("", "TYPE_INT32", step("simple", "A", "B", "OUT", "")), `platform: "ensemble"`, `platform: "onnxruntime_onnx"`, 1), `needs platform: "ensemble"`},
		"no_tensors":     {"platform: \"ensemble\"\nensemble_scheduling { step [ " + step("simple", "A", "B", "OUT", "") + " ] }\n", "lists its inputs and outputs"},
		"self":           {ens("", "TYPE_INT32", step("bad", "A", "B", "OUT", "")), "cannot run itself"},
		"bad_step_name":  {ens("", "TYPE_INT32", step("../simple", "A", "B", "OUT", "")), "model_name"},
		"reshape":        {strings.Replace(ens("", "TYPE_INT32", step("simple", "A", "B", "OUT", "")), `dims: [ 16 ] }, { name: "B"`, `dims: [ 16 ] reshape { shape: [ 4, 5 ] } }, { name: "B"`, 1), "different element counts"},
		"namespace":      {ens("", "TYPE_INT32", `{ model_name: "simple" model_namespace: "x" }`), "model_namespace"},
		"batch_too_big":  {strings.Replace(ens("", "TYPE_INT32", step("simple", "A", "B", "OUT", "")), "max_batch_size: 8", "max_batch_size: 16", 1), "at most 8 rows"},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			copyModel(t, filepath.Join(src, "simple"), root, "simple")
			copyModel(t, filepath.Join(src, "simple_sequence"), root, "simple_sequence")
			writeEnsemble(t, root, "bad", c.config)
			f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit})
			err := f.repo.Load(context.Background(), "bad", serving.LoadOptions{})
			wantModelError(t, err, serving.ModelLoadFailed, c.want)
			if !strings.HasPrefix(err.Error(), "failed to load 'bad'") {
				t.Fatalf("Triton's sentence first: %v", err)
			}
		})
	}
}

// Ensembles that contain each other are refused, not waited on forever.
func TestEnsemblesContainingEachOther(t *testing.T) {
	root := t.TempDir()
	loop := func(self, other string) string {
		return `platform: "ensemble"
max_batch_size: 0
input [ { name: "A" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "O" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { step [ { model_name: "` + other + `" input_map { key: "A" value: "A" } output_map { key: "O" value: "O" } } ] }
`
	}
	writeEnsemble(t, root, "e1", loop("e1", "e2"))
	writeEnsemble(t, root, "e2", loop("e2", "e1"))
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit})
	err := f.repo.Load(context.Background(), "e1", serving.LoadOptions{})
	wantModelError(t, err, serving.ModelLoadFailed, "contain each other")
}

// Only the steps a request's outputs need run (Triton skips the others),
// and an ensemble's output without labels of its own has its producer's.
func TestEnsembleSkipsStepsAndInheritsLabels(t *testing.T) {
	src := samples(t)
	root := t.TempDir()
	copyModel(t, filepath.Join(src, "simple"), root, "simple")
	cfg := strings.Replace(readFile(t, filepath.Join(root, "simple", "config.pbtxt")),
		"name: \"OUTPUT0\"\n    data_type: TYPE_INT32", "name: \"OUTPUT0\"\n    data_type: TYPE_INT32\n    label_filename: \"labels.txt\"", 1)
	os.WriteFile(filepath.Join(root, "simple", "config.pbtxt"), []byte(cfg), 0o644)
	os.WriteFile(filepath.Join(root, "simple", "labels.txt"), []byte("l0\nl1\n"), 0o644)
	writeEnsemble(t, root, "add_sub_twice", addSubTwice)
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit, LoadModels: []string{"add_sub_twice"}})
	inst, _ := f.repo.Get("add_sub_twice", "")
	simple, _ := f.repo.Get("simple", "")
	if got := inst.Labels("OUT_A"); !slices.Equal(got, []string{"l0", "l1"}) || inst.Labels("OUT_B") != nil {
		t.Fatalf("inherited labels %q %q", got, inst.Labels("OUT_B"))
	}
	rows := func() uint64 { return simple.Stats.Snapshot().InferenceCount }
	before := rows()
	ctx := serving.WithOutputs(context.Background(), []int{2}) // OUT_C: steps 1 and 3
	out, _, err := serving.Infer(ctx, f.repo, inst, simpleInputs(2))
	if err != nil {
		t.Fatal(err)
	}
	if got := rows() - before; got != 4 {
		t.Fatalf("simple ran %d rows for OUT_C of 2 rows; steps 1 and 3 only: 4", got)
	}
	if c := int32s(out[2]); len(c) != 32 || c[3] != 6 || out[0].Shape[0] != 2 || len(out[0].Data) != 0 {
		t.Fatalf("OUT_C %v; OUT_A (not asked for) %v", c, out[0].Shape)
	}
	before = rows()
	if _, _, err = serving.Infer(serving.WithOutputs(context.Background(), []int{1}), f.repo, inst, simpleInputs(1)); err != nil {
		t.Fatal(err)
	}
	if got := rows() - before; got != 2 {
		t.Fatalf("OUT_B needs steps 1 and 2: %d rows ran", got)
	}
}

// A model that two repositories hold is refused: which one is meant?
func TestModelInTwoRepositories(t *testing.T) {
	src := samples(t)
	a, b := t.TempDir(), t.TempDir()
	copyModel(t, filepath.Join(src, "simple"), a, "simple")
	copyModel(t, filepath.Join(src, "simple"), b, "simple")
	copyModel(t, filepath.Join(src, "simple_int8"), b, "simple_int8")
	f := open(t, Config{Roots: []string{a, b}, Mode: ModeExplicit, LoadModels: []string{"simple_int8"}})
	err := f.repo.Load(context.Background(), "simple", serving.LoadOptions{})
	wantModelError(t, err, serving.ModelLoadFailed, "appears in 2 model repositories")
	// Unloading what is not there does nothing, as Triton's unload.
	if err := f.repo.Unload(context.Background(), "nosuch", serving.UnloadOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Reshape with variable sizes (-1, matched in order, as Triton's) on a
// model and on an ensemble's tensors, as Triton's L0_infer_reshape uses
// them: simple served whole with dims [-1,4,4] reshaped to its [-1,16],
// and an ensemble over it whose inputs are [4,8] outside and [2,4,4]
// inside, its output [2,4,4] inside and [4,8] outside.
func TestVariableReshapeAndEnsembleReshape(t *testing.T) {
	src := samples(t)
	root := t.TempDir()
	copyModel(t, filepath.Join(src, "simple"), root, "simple")
	cfg := readFile(t, filepath.Join(root, "simple", "config.pbtxt"))
	cfg = strings.Replace(cfg, "max_batch_size: 8", "max_batch_size: 0", 1)
	cfg = strings.ReplaceAll(cfg, "dims: [ 16 ]", "dims: [ -1, 4, 4 ]\n    reshape: { shape: [ -1, 16 ] }")
	os.WriteFile(filepath.Join(root, "simple", "config.pbtxt"), []byte(cfg), 0o644)
	writeEnsemble(t, root, "square", `platform: "ensemble"
max_batch_size: 0
input [ { name: "A" data_type: TYPE_INT32 dims: [ 4, 8 ] reshape: { shape: [ 2, 4, 4 ] } },
        { name: "B" data_type: TYPE_INT32 dims: [ 4, 8 ] reshape: { shape: [ 2, 4, 4 ] } } ]
output [ { name: "S" data_type: TYPE_INT32 dims: [ 4, 8 ] reshape: { shape: [ 2, 4, 4 ] } } ]
ensemble_scheduling { step [ { model_name: "simple" input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
  output_map { key: "OUTPUT0" value: "S" } } ] }
`)
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit, LoadModels: []string{"simple", "square"}})
	simple, err := f.repo.Get("simple", "")
	if err != nil {
		t.Fatal(err)
	}
	// [2, 4, 4] from the client is [2, 16] for the model, and back.
	in := simpleInputs(2)
	for i := range in {
		in[i].Shape = []int64{2, 4, 4}
	}
	out, _, err := serving.Infer(context.Background(), f.repo, simple, in)
	if err != nil {
		t.Fatal(err)
	}
	if engine.FormatShape(out[0].Shape) != "[2, 4, 4]" || int32s(out[0])[16+9] != 10 {
		t.Fatalf("variable reshape: %v %v", out[0].Shape, int32s(out[0]))
	}
	bad := simpleInputs(2)
	bad[0].Shape, bad[1].Shape = []int64{2, 16}, []int64{2, 16}
	if _, _, err := serving.Infer(context.Background(), f.repo, simple, bad); err == nil || !strings.Contains(err.Error(), "[-1,4,4]") {
		t.Fatalf("a shape outside dims [-1,4,4]: %v", err)
	}
	square, err := f.repo.Get("square", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := engine.FormatShape(square.Inputs()[0].Shape); got != "[4, 8]" || fmt.Sprint(square.Config.Inputs[0].Reshape) != "[2 4 4]" {
		t.Fatalf("ensemble input as clients see it: %s, config %+v", got, square.Config.Inputs[0])
	}
	for i := range in {
		in[i].Shape = []int64{4, 8}
	}
	out, _, err = serving.Infer(context.Background(), f.repo, square, in)
	if err != nil {
		t.Fatal(err)
	}
	if engine.FormatShape(out[0].Shape) != "[4, 8]" || int32s(out[0])[16+9] != 10 {
		t.Fatalf("ensemble reshape: %v %v", out[0].Shape, int32s(out[0]))
	}
}

// Loads and unloads of ensembles and of the model they run, racing
// requests through them (run under -race by make test-go): no deadlock
// (the ensemble's load holds its lock while it loads its model; an
// unload cascades to the ensembles without holding one), no wrong
// answer, and every failure a request sees is the model not being there.
func TestEnsembleLoadUnloadRacesInference(t *testing.T) {
	src := samples(t)
	root := t.TempDir()
	copyModel(t, filepath.Join(src, "simple"), root, "simple")
	writeEnsemble(t, root, "add_sub_twice", addSubTwice)
	writeEnsemble(t, root, "outer", `platform: "ensemble"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "Y" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "Z" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [ { model_name: "add_sub_twice" input_map { key: "A" value: "X" } input_map { key: "B" value: "Y" }
  output_map { key: "OUT_A" value: "Z" } } ] }
`)
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit, LoadModels: []string{"outer"}})
	ctx := context.Background()
	n := 100
	if testing.Short() {
		n = 10
	}
	var wrong, answered atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			name := []string{"add_sub_twice", "outer"}[g%2]
			for {
				select {
				case <-stop:
					return
				default:
				}
				inst, err := f.repo.Get(name, "")
				if err != nil {
					continue
				}
				out, _, err := serving.Infer(ctx, f.repo, inst, simpleInputs(1))
				if err != nil {
					if k := serving.Classify(err, 0).Kind; k != serving.KindNotReady {
						wrong.Add(1)
						t.Errorf("%s: %v (kind %d)", name, err, k)
					}
					continue
				}
				if a := int32s(out[0]); a[5] != 10 {
					wrong.Add(1)
					t.Errorf("%s: element 5 is %d, want 10", name, a[5])
				}
				answered.Add(1)
			}
		})
	}
	var ops sync.WaitGroup
	var loaded atomic.Int64
	for w := range 3 {
		ops.Go(func() {
			for i := range n {
				var err error
				switch (i + w) % 4 {
				case 0:
					err = f.repo.Load(ctx, "outer", serving.LoadOptions{})
				case 1:
					err = f.repo.Unload(ctx, "simple", serving.UnloadOptions{})
				case 2:
					err = f.repo.Load(ctx, "add_sub_twice", serving.LoadOptions{})
				case 3:
					err = f.repo.Unload(ctx, "outer", serving.UnloadOptions{Dependents: i%8 == 3})
				}
				if err == nil && (i+w)%2 == 0 {
					loaded.Add(1)
				}
				// A load may find its model unloaded under it by another
				// worker between loading it and checking the pipeline.
				if me, ok := serving.AsModelError(err); err != nil && (!ok || me.Kind != serving.ModelLoadFailed) {
					t.Errorf("op %d: %v", i, err)
				}
			}
		})
	}
	ops.Wait()
	close(stop)
	wg.Wait()
	if wrong.Load() > 0 || loaded.Load() == 0 {
		t.Fatalf("%d wrong answers, %d loads that succeeded", wrong.Load(), loaded.Load())
	}
	t.Logf("%d loads and unloads racing requests through two ensembles: %d answered, %d loads succeeded, 0 wrong", 3*n, answered.Load(), loaded.Load())
}

// An ensemble inside an ensemble, asked for some outputs only: each level
// reads its own marking (the outer one's indexes are not the inner one's).
func TestNestedEnsembleSomeOutputs(t *testing.T) {
	src := samples(t)
	root := t.TempDir()
	copyModel(t, filepath.Join(src, "simple"), root, "simple")
	writeEnsemble(t, root, "add_sub_twice", addSubTwice)
	writeEnsemble(t, root, "outer", `platform: "ensemble"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "Y" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "Z" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "W" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [ { model_name: "add_sub_twice" input_map { key: "A" value: "X" } input_map { key: "B" value: "Y" }
  output_map { key: "OUT_B" value: "Z" } output_map { key: "OUT_C" value: "W" } } ] }
`)
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit, LoadModels: []string{"outer"}})
	inst, _ := f.repo.Get("outer", "")
	simple, _ := f.repo.Get("simple", "")
	before := simple.Stats.Snapshot().InferenceCount
	out, _, err := serving.Infer(serving.WithOutputs(context.Background(), []int{1}), f.repo, inst, simpleInputs(2))
	if err != nil {
		t.Fatal(err)
	}
	if w := int32s(out[1]); len(w) != 32 || w[16+5] != 10 {
		t.Fatalf("W (OUT_C = 2a) %v %v", out[1].Shape, w)
	}
	// add_sub_twice ran for OUT_B and OUT_C, the outputs outer maps: all
	// three of its steps (2 rows each).
	if got := simple.Stats.Snapshot().InferenceCount - before; got != 6 {
		t.Fatalf("simple ran %d rows, want 6", got)
	}
}

// Ensembles made to contain each other by configurations given with their
// loads (each checked against the other as it is served) are refused.
func TestEnsembleCycleThroughOverrides(t *testing.T) {
	src := samples(t)
	root := t.TempDir()
	copyModel(t, filepath.Join(src, "simple"), root, "e1")
	copyModel(t, filepath.Join(src, "simple"), root, "e2")
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit})
	over := func(step string) []byte {
		return []byte(`{"platform": "ensemble", "max_batch_size": 8,
"input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [16]}, {"name": "INPUT1", "data_type": "TYPE_INT32", "dims": [16]}],
"output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [16]}, {"name": "OUTPUT1", "data_type": "TYPE_INT32", "dims": [16]}],
"ensemble_scheduling": {"step": [{"model_name": "` + step + `", "model_version": -1,
  "input_map": {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}, "output_map": {"OUTPUT0": "OUTPUT0", "OUTPUT1": "OUTPUT1"}}]}}`)
	}
	ctx := context.Background()
	if err := f.repo.Load(ctx, "e1", serving.LoadOptions{Config: over("e2")}); err != nil {
		t.Fatal(err) // e1 runs e2, a plain model
	}
	err := f.repo.Load(ctx, "e2", serving.LoadOptions{Config: over("e1")})
	wantModelError(t, err, serving.ModelLoadFailed, "contain each other")
	if err := inferSimple(ctx, f.repo, "e1"); err != nil {
		t.Fatalf("e1 still runs on e2 as it was: %v", err)
	}
}

// On demand (--max-resident-models): an ensemble asked for loads with its
// model, and the models a resident ensemble runs are not evicted while it
// is resident; the ensemble itself is, when least recently used.
func TestEnsembleOnDemand(t *testing.T) {
	src := samples(t)
	root := t.TempDir()
	copyModel(t, filepath.Join(src, "simple"), root, "simple")
	copyModel(t, filepath.Join(src, "simple"), root, "other")
	writeEnsemble(t, root, "add_sub_twice", addSubTwice)
	f := open(t, Config{Roots: []string{root}, Mode: ModeNone, MaxResidentModels: 2, LoadWait: time.Minute})
	ctx := context.Background()
	loaded := func() string {
		var names []string
		for _, inst := range f.repo.Loaded() {
			names = append(names, inst.Name())
		}
		return strings.Join(names, ",")
	}
	inst, err := f.repo.Get("add_sub_twice", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := serving.Infer(ctx, f.repo, inst, simpleInputs(1)); err != nil {
		t.Fatal(err)
	}
	if got := loaded(); got != "add_sub_twice,simple" {
		t.Fatalf("resident %q", got)
	}
	if err := inferSimple(ctx, f.repo, "other"); err != nil {
		t.Fatal(err)
	}
	// The eviction follows the load (the request that asked for the model
	// is answered as soon as it loads).
	for deadline := time.Now().Add(5 * time.Second); loaded() != "other,simple" && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if got := loaded(); got != "other,simple" {
		t.Fatalf("after other: resident %q; simple, which the ensemble ran, is kept while it is resident, the ensemble goes", got)
	}
	if inst, err = f.repo.Get("add_sub_twice", ""); err != nil {
		t.Fatal(err)
	}
	out, _, err := serving.Infer(ctx, f.repo, inst, simpleInputs(1))
	if err != nil {
		t.Fatal(err)
	}
	checkAddSubTwice(t, out, 1)
}

// Poll mode: an ensemble that failed to load because its model did not is
// tried again once that model loads (its own files unchanged).
func TestPollRetriesAnEnsembleWhenItsModelLoads(t *testing.T) {
	src := samples(t)
	root := t.TempDir()
	f := open(t, Config{Roots: []string{root}, Mode: ModePoll, PollInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() { f.repo.Watch(ctx); close(watched) }()
	defer func() { cancel(); <-watched }()
	copyModel(t, filepath.Join(src, "simple"), root, "simple")
	good := readFile(t, filepath.Join(root, "simple", "config.pbtxt"))
	os.WriteFile(filepath.Join(root, "simple", "config.pbtxt"), []byte(good+"\nnonsense_field: 1\n"), 0o644)
	writeEnsemble(t, root, "add_sub_twice", addSubTwice)
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after 20 s of polls every 20 ms (index %+v)", what, f.repo.Index())
			}
		}
	}
	waitFor("both tried and failed", func() bool {
		idx := f.repo.Index()
		return len(idx) == 2 && idx[0].State == serving.ModelUnavailable && idx[1].State == serving.ModelUnavailable
	})
	os.WriteFile(filepath.Join(root, "simple", "config.pbtxt"), []byte(good), 0o644)
	waitFor("the ensemble loads once its model does", func() bool { return f.repo.Ready("add_sub_twice", "") == nil })
	inst, _ := f.repo.Get("add_sub_twice", "")
	out, _, err := serving.Infer(context.Background(), f.repo, inst, simpleInputs(1))
	if err != nil {
		t.Fatal(err)
	}
	checkAddSubTwice(t, out, 1)
}

// accumulate runs Triton's two stateful samples one after the other: the
// implicit-state accumulator keeps the running sum of A, then
// simple_sequence adds START to it (OUT = sum + START).
const accumulate = `name: "accumulate"
platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling {
  step [
    { model_name: "simple_sequence_state" input_map { key: "INPUT" value: "A" } output_map { key: "OUTPUT" value: "sum" } },
    { model_name: "simple_sequence" input_map { key: "INPUT" value: "sum" } output_map { key: "OUTPUT" value: "OUT" } }
  ]
}
`

// seqParams are the sequence parameters of a request, as a transport
// reads them.
func seqParams(t testing.TB, id any, start, end bool) serving.SequenceParams {
	t.Helper()
	var p serving.SequenceParams
	for name, v := range map[string]any{"sequence_id": id, "sequence_start": start, "sequence_end": end} {
		if _, err := p.Set(name, v); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// An ensemble takes sequence parameters as Triton's does: its stateful
// steps get the request's sequence (their state carried from request to
// request), the requests of one sequence run in the order they were
// admitted even when sent without waiting, the answer echoes the
// sequence, and a stateless ensemble takes the parameters too.
func TestEnsembleSequences(t *testing.T) {
	src := samples(t)
	root := t.TempDir()
	for _, m := range []string{"simple", "simple_sequence", "simple_sequence_state"} {
		copyModel(t, filepath.Join(src, m), root, m)
	}
	writeEnsemble(t, root, "accumulate", accumulate)
	writeEnsemble(t, root, "add_sub_twice", addSubTwice)
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit, LoadModels: []string{"accumulate", "add_sub_twice"}})
	ctx := context.Background()
	acc, err := f.repo.Get("accumulate", "")
	if err != nil {
		t.Fatal(err)
	}

	// 16 sequences at once (more than the accumulator's 8 slots), each of
	// 6 requests admitted back to back, then all run concurrently.
	const seqs, n = 16, 6
	type pending struct {
		x   int32
		tk  *serving.SequenceTicket
		out chan int32
	}
	var all [][]pending
	for s := range seqs {
		var reqs []pending
		for i := range n {
			x := int32(s*10 + i + 1)
			tk, err := serving.EnterSequence(acc, seqParams(t, uint64(1000+s), i == 0, i == n-1), []engine.Tensor{i32(x)})
			if err != nil {
				t.Fatal(err)
			}
			if sp, ok := serving.SequenceEcho(acc, seqParams(t, uint64(1000+s), i == 0, i == n-1)); !ok || sp.ID.N != uint64(1000+s) || sp.Start != (i == 0) || sp.End != (i == n-1) {
				t.Fatalf("echo %+v %v", sp, ok)
			}
			reqs = append(reqs, pending{x: x, tk: tk, out: make(chan int32, 1)})
		}
		all = append(all, reqs)
	}
	var wg sync.WaitGroup
	errs := make(chan error, seqs*n)
	for s := range all {
		for i := n - 1; i >= 0; i-- { // started last first: the order holds them back
			r := all[s][i]
			wg.Go(func() {
				defer r.tk.Release()
				out, _, err := serving.InferSequence(ctx, f.repo, acc, []engine.Tensor{i32(r.x)}, r.tk)
				if err != nil {
					errs <- err
					return
				}
				r.out <- int32s(out[0])[0]
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for s := range all {
		var sum int32
		for i, r := range all[s] {
			sum += r.x
			want := sum
			if i == 0 {
				want++ // simple_sequence adds START
			}
			if got := <-r.out; got != want {
				t.Fatalf("sequence %d request %d: %d, want %d", s, i, got, want)
			}
		}
	}
	if a := acc.Order.Active(); a != 0 {
		t.Fatalf("%d sequences still ordered after every request finished", a)
	}

	// Refusals: the stateful steps' rules, with Triton's sentences.
	if _, _, err := serving.Infer(ctx, f.repo, acc, []engine.Tensor{i32(1)}); err == nil || !strings.Contains(err.Error(), "sequence_id") {
		t.Fatalf("no sequence to a stateful ensemble: %v", err)
	}
	tk, err := serving.EnterSequence(acc, seqParams(t, uint64(77), false, false), []engine.Tensor{i32(1)})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = serving.InferSequence(ctx, f.repo, acc, []engine.Tensor{i32(1)}, tk)
	tk.Release()
	if err == nil || !strings.Contains(err.Error(), "must specify the START flag") {
		t.Fatalf("a sequence not started: %v", err)
	}
	if serving.Classify(err, time.Second).Kind != serving.KindBadRequest {
		t.Fatalf("kind %v for %v", serving.Classify(err, time.Second).Kind, err)
	}

	// A stateless ensemble takes the parameters and echoes them; its
	// models answer as they always do.
	ens, err := f.repo.Get("add_sub_twice", "")
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range []serving.SequenceParams{seqParams(t, "a string id", true, false), seqParams(t, uint64(5), false, true), seqParams(t, uint64(0), true, false)} {
		tk, err := serving.EnterSequence(ens, p, simpleInputs(2))
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := serving.InferSequence(ctx, f.repo, ens, simpleInputs(2), tk)
		tk.Release()
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		checkAddSubTwice(t, out, 2)
		if sp, ok := serving.SequenceEcho(ens, p); !ok || sp.ID != p.ID || sp.Start != p.Start || sp.End != p.End {
			t.Fatalf("echo %+v %v, want %+v", sp, ok, p)
		}
	}
	// No sequence parameters: no ticket, no echo.
	if tk, err := serving.EnterSequence(ens, serving.SequenceParams{}, simpleInputs(1)); tk != nil || err != nil {
		t.Fatalf("%v %v", tk, err)
	}
	if _, ok := serving.SequenceEcho(ens, serving.SequenceParams{}); ok {
		t.Fatal("echo without sequence parameters")
	}
}

// More sequences at once than the ensemble has workers and the stateful
// step has slots (8): requests waiting for a slot never hold up the
// requests that would end the sequences holding them. An ensemble that
// runs the stateful ensemble is stateful too: its requests carry their
// sequence whatever their concurrency.
func TestEnsembleSequencesMoreThanWorkers(t *testing.T) {
	src := samples(t)
	root := t.TempDir()
	for _, m := range []string{"simple_sequence", "simple_sequence_state"} {
		copyModel(t, filepath.Join(src, m), root, m)
	}
	writeEnsemble(t, root, "accumulate", accumulate)
	writeEnsemble(t, root, "outer", `name: "outer"
platform: "ensemble"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { step [ { model_name: "accumulate" input_map { key: "A" value: "X" } output_map { key: "OUT" value: "Y" } } ] }
`)
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit, LoadModels: []string{"outer"}})
	outer, err := f.repo.Get("outer", "")
	if err != nil {
		t.Fatal(err)
	}
	if !outer.StatefulSteps {
		t.Fatal("an ensemble running a stateful ensemble is not marked stateful")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const seqs = ensembleWorkers + 16
	var wg sync.WaitGroup
	errs := make(chan error, seqs)
	for s := range seqs {
		wg.Go(func() {
			var sum int32
			for i := range 3 {
				x := int32(s + i + 1)
				sum += x
				in := []engine.Tensor{i32(x)}
				tk, err := serving.EnterSequence(outer, seqParams(t, uint64(5000+s), i == 0, i == 2), in)
				if err != nil {
					errs <- err
					return
				}
				out, _, err := serving.InferSequence(ctx, f.repo, outer, in, tk)
				tk.Release()
				if err != nil {
					errs <- fmt.Errorf("sequence %d request %d: %w", s, i, err)
					return
				}
				want := sum
				if i == 0 {
					want++
				}
				if got := int32s(out[0])[0]; got != want {
					errs <- fmt.Errorf("sequence %d request %d: %d, want %d", s, i, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
