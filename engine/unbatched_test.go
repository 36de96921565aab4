package engine

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/fw-serve/fw/internal/testmodels"
)

// Models without a batch axis (Triton's max_batch_size 0) run on the real
// engine: nobatch's output is shorter than its input (y = x @ W, [4] ->
// [2]), fixed_batch1 was exported with a fixed batch of one ([1,16] ->
// [1,16], y = 2x), densenet_onnx ([1,3,224,224] -> [1,1000,1,1]) is
// Triton's image example. ONNX Runtime sizes their outputs from the specs;
// once fw wrote the input's axis 0 into every output and every call failed.
func TestUnbatchedModelsRun(t *testing.T) {
	ctx := context.Background()
	t.Run("nobatch", func(t *testing.T) {
		m := mustLoad(t, testmodels.Triton(t, "nobatch"), Options{})
		if m.Batched() {
			t.Fatal("Batched() is true for x [4] -> y [2]")
		}
		w := [4][2]float32{{1, 0}, {0, 1}, {1, 1}, {2, -1}}
		for _, x := range [][]float32{{1, 2, 3, 4}, {0, 0, 0, 0}, {-1.5, 2, 0.25, 8}} {
			var want [2]float32
			for i := range x {
				want[0] += x[i] * w[i][0]
				want[1] += x[i] * w[i][1]
			}
			in := []Tensor{FromFloat32([]int64{4}, append([]float32(nil), x...))}
			if n, err := m.CheckInputs(in); err != nil || n != 1 {
				t.Fatalf("CheckInputs(%v) = %d, %v; want 1, nil", x, n, err)
			}
			out, err := m.Run(ctx, in)
			if err != nil {
				t.Fatalf("Run(%v): %v", x, err)
			}
			if got := out[0].Float32s(); FormatShape(out[0].Shape) != "[2]" || got[0] != want[0] || got[1] != want[1] {
				t.Fatalf("Run(%v) = %s %v, want [2] %v", x, FormatShape(out[0].Shape), got, want)
			}
		}
		// Rows of a batch axis it does not have are refused before the engine.
		for _, shape := range [][]int64{{1, 4}, {2, 4}, {8}, {}} {
			in := []Tensor{FromFloat32(shape, make([]float32, NumElements(shape)))}
			var ie *InputError
			if _, err := m.Run(ctx, in); !errors.As(err, &ie) {
				t.Errorf("Run with shape %s: %v, want an *InputError", FormatShape(shape), err)
			}
		}
	})
	t.Run("fixed_batch1", func(t *testing.T) {
		m := mustLoad(t, testmodels.Triton(t, "fixed_batch1"), Options{})
		if m.Batched() {
			t.Fatal("Batched() is true for a fixed batch of 1")
		}
		x := make([]float32, 16)
		for i := range x {
			x[i] = float32(i) - 7.5
		}
		out, err := m.Run(ctx, []Tensor{FromFloat32([]int64{1, 16}, x)})
		if err != nil {
			t.Fatal(err)
		}
		if FormatShape(out[0].Shape) != "[1, 16]" {
			t.Fatalf("output shape %s, want [1, 16]", FormatShape(out[0].Shape))
		}
		for i, v := range out[0].Float32s() {
			if v != 2*x[i] {
				t.Fatalf("y[%d] = %g, want %g", i, v, 2*x[i])
			}
		}
		_, err = m.Run(ctx, []Tensor{FromFloat32([]int64{2, 16}, make([]float32, 32))})
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), "no batch axis") {
			t.Fatalf("two rows: %v, want an *InputError saying the model has no batch axis", err)
		}
		if _, err := m.ExampleInputs(8); !errors.Is(err, ErrUnbatched) && !errors.Is(err, ErrNoTestVector) {
			t.Errorf("ExampleInputs(8): %v, want ErrUnbatched or ErrNoTestVector", err)
		}
	})
	t.Run("densenet_onnx", func(t *testing.T) {
		m := mustLoad(t, testmodels.Triton(t, "densenet_onnx"), Options{})
		if m.Batched() {
			t.Fatal("Batched() is true for [1,3,224,224] -> [1,1000,1,1]")
		}
		out, err := m.Run(ctx, []Tensor{FromFloat32([]int64{1, 3, 224, 224}, make([]float32, 3*224*224))})
		if err != nil {
			t.Fatal(err)
		}
		if FormatShape(out[0].Shape) != "[1, 1000, 1, 1]" {
			t.Fatalf("output shape %s, want [1, 1000, 1, 1]", FormatShape(out[0].Shape))
		}
	})
	t.Run("simple is batched", func(t *testing.T) {
		if m := mustLoad(t, testmodels.Triton(t, "simple"), Options{}); !m.Batched() {
			t.Fatal("Batched() is false for INPUT0 [-1,16]")
		}
	})
}

// Batched and CheckInputs on specs alone: rank-0 inputs, fixed and dynamic
// axis 0, specs the engine does not know.
func TestBatchedAndCheckInputsSpecs(t *testing.T) {
	spec := func(dt DType, shape ...int64) TensorSpec { return TensorSpec{Name: "t", DType: dt, Shape: shape} }
	f := func(ins, outs []TensorSpec, want bool) {
		t.Helper()
		if got := batchedSpecs(ins, outs); got != want {
			t.Errorf("batchedSpecs(%v, %v) = %v, want %v", ins, outs, got, want)
		}
	}
	dyn, fixed := spec(Float32, -1, 16), spec(Float32, 1, 16)
	f([]TensorSpec{dyn}, []TensorSpec{dyn}, true)
	f([]TensorSpec{fixed}, []TensorSpec{fixed}, false)
	f([]TensorSpec{dyn}, []TensorSpec{spec(Float32, 2)}, false) // an output without the batch
	f([]TensorSpec{spec(Float32)}, []TensorSpec{dyn}, false)    // a rank-0 input
	f([]TensorSpec{spec(Float32, 3, -1)}, []TensorSpec{dyn}, false)
	f([]TensorSpec{{Name: "input_0"}}, []TensorSpec{{Name: "output_0"}}, true) // TorchScript without fw.json

	scalar := &Model{inputs: []TensorSpec{spec(Float32), spec(Int64, 3, -1)}, outputs: []TensorSpec{spec(Float32)}}
	scalar.batched = batchedSpecs(scalar.inputs, scalar.outputs)
	good := []Tensor{FromFloat32([]int64{}, []float32{2}), FromInt64([]int64{3, 2}, make([]int64, 6))}
	if n, err := scalar.CheckInputs(good); err != nil || n != 1 {
		t.Fatalf("CheckInputs(scalar, [3,2]) = %d, %v; want 1, nil", n, err)
	}
	for name, in := range map[string][]Tensor{
		"a scalar given rows":  {FromFloat32([]int64{1}, []float32{2}), good[1]},
		"a fixed axis 0 of 2":  {good[0], FromInt64([]int64{2, 2}, make([]int64, 4))},
		"a missing axis":       {good[0], FromInt64([]int64{6}, make([]int64, 6))},
		"no elements":          {good[0], FromInt64([]int64{3, 0}, nil)},
		"short data":           {good[0], FromInt64([]int64{3, 2}, make([]int64, 5))},
		"a NaN":                {FromFloat32([]int64{}, []float32{float32(math.NaN())}), good[1]},
		"one input of the two": good[:1],
	} {
		var ie *InputError
		if _, err := scalar.CheckInputs(in); !errors.As(err, &ie) {
			t.Errorf("%s: %v, want an *InputError", name, err)
		}
	}
}
