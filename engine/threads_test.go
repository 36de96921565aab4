package engine

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fw-serve/fw/internal/testmodels"
)

// TryOneThread times the real engine with two threads and with one. Which
// one wins is the machine's to say, so the test checks what holds either
// way: both sizes timed, a returned model has one thread and computes what
// m computes, m is left open and working, and what cannot be tried is not.
func TestTryOneThreadTimesBothSessions(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		path string
		rows []int
	}{
		{"test vector rows", filepath.Join(modelsDir(t), "digits_mlp.onnx"), []int{1, 32}},
		{"zeros, no fw metadata", testmodels.Triton(t, "simple"), []int{1, 32}},
		{"unbatched", testmodels.Triton(t, "nobatch"), []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mustLoad(t, tc.path, Options{Threads: 2})
			one, trial, err := TryOneThread(ctx, m, 32)
			if err != nil {
				t.Fatal(err)
			}
			if trial.Skipped != "" {
				t.Fatalf("skipped: %s", trial.Skipped)
			}
			if !slices.Equal(trial.Rows, tc.rows) || len(trial.Many) != len(tc.rows) || len(trial.One) != len(tc.rows) {
				t.Fatalf("trial = %+v, want rows %v each timed both ways", trial, tc.rows)
			}
			for i := range trial.Rows {
				if trial.Many[i] <= 0 || trial.One[i] <= 0 {
					t.Fatalf("trial = %+v: a size was not timed", trial)
				}
			}
			in, err := m.trialInputs(1)
			if err != nil {
				t.Fatal(err)
			}
			want, err := m.Run(ctx, in)
			if err != nil {
				t.Fatalf("m after the trial: %v", err)
			}
			if one == nil {
				if trial.Threads != 2 {
					t.Fatalf("no model returned but trial.Threads = %d", trial.Threads)
				}
				return
			}
			defer one.Close()
			if trial.Threads != 1 || one.Threads() != 1 {
				t.Fatalf("returned a model with %d threads (trial says %d), want 1", one.Threads(), trial.Threads)
			}
			got, err := one.Run(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if !sameTensorWithin(want[i], got[i], 1e-5) {
					t.Fatalf("output %d differs between the sessions", i)
				}
			}
		})
	}
}

func TestTryOneThreadSkips(t *testing.T) {
	ctx := context.Background()
	mlp := filepath.Join(modelsDir(t), "digits_mlp.onnx")
	for _, tc := range []struct {
		name, path, skipped string
		threads, rows       int
	}{
		{"one thread already", mlp, "more than one thread", 1, 64},
		{"a string input without a test vector", testmodels.Triton(t, "simple_string"), "no inputs to time", 2, 64},
		{"a dynamic axis without a test vector", testmodels.Identity(t, t.TempDir(), "dyn.onnx", testmodels.ONNXFloat, "batch", "n"), "dynamic axis", 2, 64},
		// 4,096 rows of the CNN take milliseconds: work to share.
		{"a call over 1 ms", filepath.Join(modelsDir(t), "digits_cnn.onnx"), "a call of 4096 rows takes", 2, 4096},
		// 2,000,000 rows of 64 floats: 512 MB of inputs, never built.
		{"inputs over 256 MB", mlp, "rows of input would take", 2, 2_000_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mustLoad(t, tc.path, Options{Threads: tc.threads})
			one, trial, err := TryOneThread(ctx, m, tc.rows)
			if err != nil || one != nil || !strings.Contains(trial.Skipped, tc.skipped) || trial.Threads != tc.threads {
				t.Fatalf("TryOneThread = %v, %+v, %v; want nothing tried (%q)", one, trial, err, tc.skipped)
			}
		})
	}
	t.Run("cancelled", func(t *testing.T) {
		m := mustLoad(t, mlp, Options{Threads: 2})
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		one, _, err := TryOneThread(cctx, m, 64)
		if !errors.Is(err, context.Canceled) || one != nil {
			t.Fatalf("TryOneThread with a cancelled context = %v, %v; want context.Canceled", one, err)
		}
	})
}

// sameTensorWithin compares float32 outputs within tol, others exactly.
func sameTensorWithin(a, b Tensor, tol float64) bool {
	if FormatShape(a.Shape) != FormatShape(b.Shape) || a.DType != b.DType {
		return false
	}
	if a.DType != Float32 {
		return string(a.Data) == string(b.Data)
	}
	x, y := a.Float32s(), b.Float32s()
	for i := range x {
		if d := float64(x[i] - y[i]); d > tol || d < -tol {
			return false
		}
	}
	return true
}
