package modelrepo

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/fw-serve/fw/batcher"
	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/internal/testmodels"
	"github.com/fw-serve/fw/serving"
)

const raggedConfig = `name: "rag"
platform: "onnxruntime_onnx"
max_batch_size: 3
input [{ name: "X" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true }]
output [{ name: "Y" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "E" data_type: TYPE_FP32 dims: [ ] }]
batch_input [{ kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "ENDS" data_type: TYPE_FP32 source_input: "X" }]
batch_output [{ kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "Y" source_input: "X" }]
dynamic_batching { max_queue_delay_microseconds: 5000000 }
`

// raggedRepo writes a repository with the model rag: X (one flat axis)
// and ENDS (a batch input) in, Y = X and E = ENDS out.
func raggedRepo(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	vdir := filepath.Join(root, "rag", "1")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	testmodels.WriteONNX(t, vdir, "model.onnx", []testmodels.Node{
		{Op: "Identity", Inputs: []string{"X"}, Outputs: []string{"Y"}},
		{Op: "Identity", Inputs: []string{"ENDS"}, Outputs: []string{"E"}},
	}, []testmodels.ValueInfo{{Name: "X", Type: testmodels.ONNXFloat, Dims: []any{"n"}}, {Name: "ENDS", Type: testmodels.ONNXFloat, Dims: []any{"r"}}},
		[]testmodels.ValueInfo{{Name: "Y", Type: testmodels.ONNXFloat, Dims: []any{"n"}}, {Name: "E", Type: testmodels.ONNXFloat, Dims: []any{"r"}}})
	if err := os.WriteFile(filepath.Join(root, "rag", "config.pbtxt"), []byte(raggedConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// A Triton ragged model: requests of different lengths join one call (the
// configuration holds a batch until max_batch_size rows), the model gets
// the batch input it asks for, each request its own part of the scattered
// output; clients see the configuration's tensors, not the batch input.
func TestRaggedModelServes(t *testing.T) {
	f := open(t, Config{Roots: []string{raggedRepo(t)}, Mode: ModeExplicit})
	ctx := context.Background()
	if err := f.repo.Load(ctx, "rag", serving.LoadOptions{}); err != nil {
		t.Fatal(err)
	}
	inst, err := f.repo.Get("rag", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := serving.Describe(inst.Inputs()); !strings.Contains(got, "X") || strings.Contains(got, "ENDS") {
		t.Fatalf("clients' inputs %s: want X only (ENDS is the server's)", got)
	}
	c := inst.Config
	if !c.Inputs[0].AllowRaggedBatch || len(c.BatchInputs) != 1 || c.BatchInputs[0].Kind != "BATCH_ACCUMULATED_ELEMENT_COUNT" ||
		len(c.BatchOutputs) != 1 || c.BatchOutputs[0].TargetNames[0] != "Y" {
		t.Fatalf("reported configuration %+v", c)
	}
	sizes := []int{2, 3, 1}
	outs := make([][]engine.Tensor, len(sizes))
	errs := make([]error, len(sizes))
	var wg sync.WaitGroup
	var prev chan struct{}
	for i, n := range sizes {
		x := make([]float32, n)
		for j := range x {
			x[j] = float32(10*i + j)
		}
		mine := make(chan struct{})
		var once sync.Once
		rctx := batcher.WithTurn(ctx, prev, func() { once.Do(func() { close(mine) }) })
		prev = mine
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], _, errs[i] = serving.Infer(rctx, f.repo, inst, []engine.Tensor{engine.FromFloat32([]int64{1, int64(n)}, x)})
		}()
	}
	wg.Wait()
	ends := []float32{2, 5, 6}
	for i, n := range sizes {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		y, e := outs[i][0], outs[i][1]
		if !reflect.DeepEqual(y.Shape, []int64{1, int64(n)}) || y.Float32s()[0] != float32(10*i) {
			t.Fatalf("request %d: Y %v %v, want its own X [1 %d]", i, y.Shape, y.Float32s(), n)
		}
		if got := e.Float32s(); len(got) != 1 || got[0] != ends[i] {
			t.Fatalf("request %d: E %v, want [%v]: the three requests make one call, in the order they were queued", i, got, ends[i])
		}
	}
	st := inst.Stats.Snapshot()
	if st.ExecutionCount != 1 {
		t.Fatalf("%d executions, want 1: max_queue_delay holds the batch until max_batch_size rows", st.ExecutionCount)
	}
}

// What fw cannot serve of ragged batching fails the load with the reason.
func TestRaggedConfigRefusals(t *testing.T) {
	f := open(t, Config{Roots: []string{raggedRepo(t)}, Mode: ModeExplicit})
	base := `"platform": "onnxruntime_onnx", "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [-1], "allow_ragged_batch": true}],
		"output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [-1]}, {"name": "E", "data_type": "TYPE_FP32", "dims": []}]`
	bi := `"batch_input": [{"kind": "BATCH_ACCUMULATED_ELEMENT_COUNT", "target_name": ["ENDS"], "data_type": "TYPE_FP32", "source_input": ["X"]}]`
	for cfg, want := range map[string]string{
		`{"max_batch_size": 0, ` + base + `, ` + bi + `}`: "need max_batch_size > 0",
		`{"max_batch_size": 3, ` + base + `}`:             `the model's input "ENDS" is missing from the configuration`,
		`{"max_batch_size": 3, ` + base + `, "batch_input": [{"kind": "BATCH_ELEMENT_COUNT", "target_name": ["ENDS"], "data_type": "TYPE_FP16", "source_input": ["X"]}]}`:                   "TYPE_INT32, TYPE_INT64 or TYPE_FP32",
		`{"max_batch_size": 3, ` + base + `, "batch_input": [{"kind": "BATCH_ELEMENT_COUNT", "target_name": ["ENDS"], "data_type": "TYPE_INT32", "source_input": ["X"]}]}`:                  `"ENDS" is float32 in the model`,
		`{"max_batch_size": 3, ` + base + `, "batch_input": [{"kind": "BATCH_ELEMENT_COUNT", "target_name": ["X"], "data_type": "TYPE_FP32", "source_input": ["X"]}]}`:                      "also an input of the configuration",
		`{"max_batch_size": 3, ` + base + `, "batch_input": [{"kind": "BATCH_ELEMENT_COUNT", "target_name": ["ENDS"], "data_type": "TYPE_FP32", "source_input": ["Q"]}]}`:                   `source_input "Q" is not an input`,
		`{"max_batch_size": 3, ` + base + `, "batch_input": [{"kind": "BATCH_ITEM_SHAPE", "target_name": ["ENDS"], "data_type": "TYPE_FP32", "source_input": ["X"]}]}`:                      "with 2 axes",
		`{"max_batch_size": 3, ` + base + `, ` + bi + `, "batch_output": [{"target_name": ["Z"], "source_input": ["X"]}]}`:                                                                  `target_name "Z" is not an output`,
		`{"max_batch_size": 3, "platform": "onnxruntime_onnx", "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [-1], "allow_ragged_batch": true, "optional": true}], ` + bi + `}`: `optional`, // refused for an ONNX model already; a batch input's source never may be
		`{"max_batch_size": 3, ` + base + `, ` + bi + `, "sequence_batching": {}}`:                                                                                                          "not supported with sequence_batching",
		`{"max_batch_size": 3, "parameters": {"fw_hold_when_idle": {"string_value": "maybe"}}, ` + base + `, ` + bi + `}`:                                                                   "fw_hold_when_idle",
	} {
		err := f.repo.Load(context.Background(), "rag", serving.LoadOptions{Config: []byte(cfg)})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "failed to load") {
			t.Errorf("config %s\nerr = %v\nwant it to say %q", cfg, err, want)
		}
	}
}

// Requests of one ordered source (a gRPC stream's turn) to an ensemble
// reach its first step's model in the source's order, as Triton's
// ensembles take a stream's requests, whatever order the ensemble's
// workers run them in: the ragged model's accumulated counts say in which
// order its call got them.
func TestEnsembleFirstStepsInStreamOrder(t *testing.T) {
	root := raggedRepo(t)
	writeEnsemble(t, root, "rag_ens", `platform: "ensemble"
max_batch_size: 3
input [{ name: "IN" data_type: TYPE_FP32 dims: [ -1 ] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "ENDS" data_type: TYPE_FP32 dims: [ ] }]
ensemble_scheduling { step [ { model_name: "rag" model_version: -1 input_map { key: "X" value: "IN" }
  output_map { key: "Y" value: "OUT" } output_map { key: "E" value: "ENDS" } } ] }
`)
	f := open(t, Config{Roots: []string{root}, Mode: ModeExplicit, LoadModels: []string{"rag_ens"}})
	inst, err := f.repo.Get("rag_ens", "")
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{2, 3, 1}
	ends := []float32{2, 5, 6}
	for round := range 20 {
		outs := make([][]engine.Tensor, len(sizes))
		errs := make([]error, len(sizes))
		ctxs := make([]context.Context, len(sizes))
		var prev chan struct{}
		for i := range sizes {
			mine := make(chan struct{})
			var once sync.Once
			ctxs[i] = batcher.WithTurn(context.Background(), prev, func() { once.Do(func() { close(mine) }) })
			prev = mine
		}
		var wg sync.WaitGroup
		for i := len(sizes) - 1; i >= 0; i-- { // started last first
			x := make([]float32, sizes[i])
			wg.Go(func() {
				outs[i], _, errs[i] = serving.Infer(ctxs[i], f.repo, inst, []engine.Tensor{engine.FromFloat32([]int64{1, int64(len(x))}, x)})
			})
		}
		wg.Wait()
		for i := range sizes {
			if errs[i] != nil {
				t.Fatalf("round %d, request %d: %v", round, i, errs[i])
			}
			if got := outs[i][1].Float32s(); len(got) != 1 || got[0] != ends[i] {
				t.Fatalf("round %d, request %d: ENDS %v, want [%v]: the step's call has the requests in the stream's order", round, i, got, ends[i])
			}
		}
	}
}
