package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var referenceModels = []string{"digits_mlp", "digits_cnn", "textcls", "resnet18"}

// referenceFiles lists every exported reference file that exists.
func referenceFiles(t *testing.T) []string {
	dir := modelsDir(t)
	var files []string
	for _, name := range referenceModels {
		for _, ext := range []string{".onnx", ".ts.pt", ".quant.pt", ".int8-dynamic.onnx", ".int8-static.onnx", ".pt2"} {
			p := filepath.Join(dir, name+ext)
			if _, err := os.Stat(p); err == nil {
				files = append(files, p)
			} else if name != "resnet18" || (ext != ".quant.pt" && ext != ".int8-dynamic.onnx" && ext != ".pt2") {
				// resnet18 has no .quant.pt nor dynamic int8 ONNX, and its .pt2 is built by make bench-engine.
				t.Errorf("missing reference file %s", p)
			}
		}
	}
	return files
}

func TestReferenceModelsMatchTestVectors(t *testing.T) {
	for _, p := range referenceFiles(t) {
		t.Run(filepath.Base(p), func(t *testing.T) {
			if !strings.HasSuffix(p, ".onnx") {
				torchAvailable(t)
			}
			m := mustLoad(t, p, Options{})
			if m.Meta == nil || m.Meta.TestVector == nil {
				t.Fatalf("%s has no metadata/test vector", p)
			}
			if want := referenceFormat(p); m.Format != want {
				t.Errorf("format %s, want %s", m.Format, want)
			}
			res, err := m.Verify(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !res.Passed {
				t.Fatalf("test vector mismatch: max abs error %g, worst %s", res.MaxAbsError, res.Worst)
			}
			if len(m.Labels()) == 0 {
				t.Errorf("classifier without labels")
			}
		})
	}
}

// The ONNX and TorchScript exports of one model compute the same outputs in
// the two engines on the same inputs.
func TestEnginesAgree(t *testing.T) {
	dir := modelsDir(t)
	torchAvailable(t)
	for _, name := range []string{"digits_mlp", "digits_cnn", "textcls"} {
		t.Run(name, func(t *testing.T) {
			onnx := mustLoad(t, filepath.Join(dir, name+".onnx"), Options{})
			ts := mustLoad(t, filepath.Join(dir, name+".ts.pt"), Options{})
			in := testInputs(t, onnx)
			a, err := onnx.Run(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			b, err := ts.Run(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			if len(a) != len(b) {
				t.Fatalf("%d vs %d outputs", len(a), len(b))
			}
			for i := range a {
				if fmt.Sprint(a[i].Shape) != fmt.Sprint(b[i].Shape) {
					t.Fatalf("output %d shapes %v vs %v", i, a[i].Shape, b[i].Shape)
				}
				for j := 0; j < a[i].Len(); j++ {
					if d := math.Abs(a[i].At(j) - b[i].At(j)); d > 1e-4 {
						t.Fatalf("output %d element %d: onnx %g, torchscript %g", i, j, a[i].At(j), b[i].At(j))
					}
				}
			}
		})
	}
}

// referenceFormat is the format of a reference file, from its name.
func referenceFormat(p string) Format {
	switch {
	case strings.HasSuffix(p, ".int8-dynamic.onnx"), strings.HasSuffix(p, ".int8-static.onnx"):
		return FormatONNXInt8
	case strings.HasSuffix(p, ".onnx"):
		return FormatONNX
	case strings.HasSuffix(p, ".quant.pt"):
		return FormatQuantized
	case strings.HasSuffix(p, ".pt2"):
		return FormatAOTI
	}
	return FormatTorchScript
}

// The int8 ONNX files (made by onnxruntime.quantization 1.31 in Python) load
// and run in fw's engine (the ONNX Runtime 1.30 C library): their format and
// quantization settings are read from fw.json, and on the test vector's rows
// they stay within the exporter's int8 parity bound of the float ONNX file
// and pick the same classes.
func TestInt8ONNXMatchesFloat(t *testing.T) {
	dir := modelsDir(t)
	for _, name := range referenceModels {
		for _, q := range []string{"dynamic", "static"} {
			p := filepath.Join(dir, name+".int8-"+q+".onnx")
			if name == "resnet18" && q == "dynamic" {
				continue // not built: see the manifest's "skipped"
			}
			t.Run(filepath.Base(p), func(t *testing.T) {
				int8 := mustLoad(t, p, Options{})
				fp32 := mustLoad(t, filepath.Join(dir, name+".onnx"), Options{})
				if int8.Format != FormatONNXInt8 || !int8.Format.ONNX() {
					t.Fatalf("format %s, want %s", int8.Format, FormatONNXInt8)
				}
				if got := int8.Meta.Export["quantization"]; got != q {
					t.Fatalf("export.quantization %v, want %s", got, q)
				}
				if ops, _ := int8.Meta.Export["quantized_ops"].([]any); len(ops) == 0 {
					t.Fatalf("export.quantized_ops is empty: %v", int8.Meta.Export)
				}
				if cal, _ := int8.Meta.Export["calibration"].(map[string]any); (q == "static") != (cal != nil) {
					t.Fatalf("export.calibration %v for %s quantization", int8.Meta.Export["calibration"], q)
				}
				if size := int8.Size; size >= fp32.Size {
					t.Errorf("int8 file is %d bytes, the float one %d", size, fp32.Size)
				}
				in := testInputs(t, fp32)
				a, err := int8.Run(context.Background(), in)
				if err != nil {
					t.Fatal(err)
				}
				b, err := fp32.Run(context.Background(), in)
				if err != nil {
					t.Fatal(err)
				}
				rows := int(a[0].Shape[0])
				classes := a[0].Len() / rows
				for r := 0; r < rows; r++ {
					best := func(x Tensor) int {
						k := 0
						for c := 1; c < classes; c++ {
							if x.At(r*classes+c) > x.At(r*classes+k) {
								k = c
							}
						}
						return k
					}
					if best(a[0]) != best(b[0]) {
						t.Errorf("row %d: int8 picks class %d, float %d", r, best(a[0]), best(b[0]))
					}
					for c := 0; c < classes; c++ {
						g, w := a[0].At(r*classes+c), b[0].At(r*classes+c)
						if math.Abs(g-w) > 0.25+0.1*math.Abs(w) {
							t.Fatalf("row %d class %d: int8 %g, float %g (beyond atol 0.25 + rtol 0.1)", r, c, g, w)
						}
					}
				}
			})
		}
	}
}

func testInputs(t *testing.T, m *Model) []Tensor {
	t.Helper()
	var in []Tensor
	for _, spec := range m.Inputs() {
		x, err := m.Meta.TestVector.Inputs[spec.Name].Decode()
		if err != nil {
			t.Fatal(err)
		}
		in = append(in, x)
	}
	return in
}

// Bad input gets an *InputError naming expected and received, and the model
// keeps serving afterwards.
func TestBadInputsAreRefusedAndModelKeepsWorking(t *testing.T) {
	dir := modelsDir(t)
	paths := []string{filepath.Join(dir, "digits_mlp.onnx")}
	if _, err := TorchVersion(""); err == nil {
		paths = append(paths, filepath.Join(dir, "digits_mlp.ts.pt"), filepath.Join(dir, "digits_mlp.pt2"))
	}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			m := mustLoad(t, p, Options{})
			ok := make([]float32, 2*64)
			nan := make([]float32, 2*64)
			nan[70] = float32(math.NaN())
			inf := make([]float32, 64)
			inf[3] = float32(math.Inf(-1))
			f := func(name string, in []Tensor, wantIn string) {
				t.Helper()
				_, err := m.Run(context.Background(), in)
				var ie *InputError
				if !errors.As(err, &ie) {
					t.Fatalf("%s: got %v, want *InputError", name, err)
				}
				if !strings.Contains(err.Error(), wantIn) {
					t.Errorf("%s: %q does not mention %q", name, err, wantIn)
				}
			}
			f("wrong width", []Tensor{FromFloat32([]int64{2, 32}, ok[:64])}, "expected [N, 64], received [2, 32]")
			f("wrong rank", []Tensor{FromFloat32([]int64{128}, ok)}, "wrong rank")
			f("wrong dtype", []Tensor{FromInt64([]int64{2, 64}, make([]int64, 128))}, "expected float32, received int64")
			f("short data", []Tensor{FromFloat32([]int64{3, 64}, ok)}, "needs")
			f("two inputs", []Tensor{FromFloat32([]int64{2, 64}, ok), FromFloat32([]int64{2, 64}, ok)}, "wrong number of inputs")
			f("no inputs", nil, "wrong number of inputs")
			f("NaN", []Tensor{FromFloat32([]int64{2, 64}, nan)}, "element 70 is NaN")
			f("Inf", []Tensor{FromFloat32([]int64{1, 64}, inf)}, "element 3 is -Inf")
			f("empty batch", []Tensor{FromFloat32([]int64{0, 64}, nil)}, "empty batch")
			out, err := m.Run(context.Background(), []Tensor{FromFloat32([]int64{2, 64}, ok)})
			if err != nil || fmt.Sprint(out[0].Shape) != "[2 10]" {
				t.Fatalf("model broken after bad inputs: %v %v", out, err)
			}
		})
	}
}

func TestAllowNonFinitePassesNaNThrough(t *testing.T) {
	m := mustLoad(t, filepath.Join(modelsDir(t), "digits_mlp.onnx"), Options{AllowNonFinite: true})
	x := make([]float32, 64)
	x[0] = float32(math.NaN())
	out, err := m.Run(context.Background(), []Tensor{FromFloat32([]int64{1, 64}, x)})
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(out[0].At(0)) {
		t.Fatalf("expected NaN to propagate, got %v", out[0].At(0))
	}
}

func TestBadModelFiles(t *testing.T) {
	dir := filepath.Join(modelsDir(t), "bad")
	f := func(name, wantCode, wantMsg string) {
		t.Helper()
		_, err := Load(context.Background(), filepath.Join(dir, name), Options{Threads: 1})
		var le *LoadError
		if !errors.As(err, &le) {
			t.Fatalf("%s: got %v, want *LoadError", name, err)
		}
		if le.Code != wantCode || !strings.Contains(err.Error(), wantMsg) {
			t.Errorf("%s: code %q message %q; want code %q containing %q", name, le.Code, err, wantCode, wantMsg)
		}
	}
	f("state_dict.pt", CodePickle, "fw export CHECKPOINT")
	f("pickled_model.pt", CodePickle, "never unpickles")
	f("legacy_pickle.pt", CodePickle, "never unpickles")
	f("shape_mismatch.onnx", CodeShapeMismatch, "fw.json shape [N, 32], the model's [N, 64]")

	// Truncated copies of a real ONNX file are refused, never crash.
	whole, err := os.ReadFile(filepath.Join(modelsDir(t), "digits_mlp.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 10, 100, len(whole) / 2, len(whole) - 1} {
		p := writeFile(t, fmt.Sprintf("cut%d.onnx", n), whole[:n])
		if _, err := Load(context.Background(), p, Options{Threads: 1}); err == nil {
			t.Errorf("truncated to %d bytes: loaded", n)
		}
	}
	// A TorchScript archive cut short.
	ts, err := os.ReadFile(filepath.Join(modelsDir(t), "digits_mlp.ts.pt"))
	if err != nil {
		t.Fatal(err)
	}
	p := writeFile(t, "cut.ts.pt", ts[:len(ts)/2])
	if _, err := Load(context.Background(), p, Options{Threads: 1}); err == nil {
		t.Error("truncated TorchScript loaded")
	}
}

// Files exported by plain PyTorch, without fw.json, still load and run.
func TestPlainExportsLoadWithoutMetadata(t *testing.T) {
	dir := filepath.Join(modelsDir(t), "bad")
	m := mustLoad(t, filepath.Join(dir, "plain.onnx"), Options{})
	if m.Meta != nil || len(m.Inputs()) != 1 || m.Inputs()[0].DType != Float32 {
		t.Fatalf("plain.onnx: meta %v inputs %+v", m.Meta, m.Inputs())
	}
	spec := m.Inputs()[0]
	shape := append([]int64(nil), spec.Shape...)
	shape[0] = 3
	for i, d := range shape {
		if d < 0 {
			t.Fatalf("plain.onnx has a dynamic non-batch axis %d: %v", i, spec.Shape)
		}
	}
	x, err := NewTensor(Float32, shape)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Run(context.Background(), []Tensor{x}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Verify(context.Background()); !errors.Is(err, ErrNoTestVector) {
		t.Fatalf("Verify on plain file: %v", err)
	}
	torchAvailable(t)
	ts := mustLoad(t, filepath.Join(dir, "plain.ts.pt"), Options{})
	if ts.Meta != nil || len(ts.Inputs()) != 1 {
		t.Fatalf("plain.ts.pt: meta %v inputs %+v", ts.Meta, ts.Inputs())
	}
	if _, err := ts.Run(context.Background(), []Tensor{x}); err != nil {
		t.Fatal(err)
	}
	// Without metadata the model itself rejects a bad shape: an error, not a crash.
	bad, err := NewTensor(Float32, []int64{2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Run(context.Background(), []Tensor{bad}); !errors.Is(err, ErrEngine) {
		t.Fatalf("bad shape through libtorch: %v, want ErrEngine", err)
	}
	if _, err := ts.Run(context.Background(), []Tensor{x}); err != nil {
		t.Fatalf("libtorch model broken after an exception: %v", err)
	}
}

// Concurrent Run calls on one model are safe (run with -race) and correct.
func TestConcurrentRuns(t *testing.T) {
	dir := modelsDir(t)
	paths := []string{filepath.Join(dir, "digits_cnn.onnx")}
	if _, err := TorchVersion(""); err == nil {
		paths = append(paths, filepath.Join(dir, "digits_cnn.ts.pt"), filepath.Join(dir, "digits_cnn.quant.pt"), filepath.Join(dir, "digits_cnn.pt2"))
	}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			m := mustLoad(t, p, Options{Threads: 1})
			in := testInputs(t, m)
			want, err := m.Run(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 20; i++ {
						got, err := m.Run(context.Background(), in)
						if err != nil {
							errs <- err
							return
						}
						for j := 0; j < got[0].Len(); j++ {
							if got[0].At(j) != want[0].At(j) {
								errs <- fmt.Errorf("element %d: %v vs %v", j, got[0].At(j), want[0].At(j))
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
		})
	}
}

// Without a GPU, asking for CUDA fails at load with an error that says why
// and what to do. With one (FW_TEST_CUDA=1 on a GPU machine, as
// scripts/gpu-check.sh runs it over the models scripts/gpu-export.py wrote
// there) the test vectors must pass on the device, TorchScript and a CUDA
// AOTInductor package alike, and a package is refused on the device it was
// not compiled for, both ways.
func TestCUDA(t *testing.T) {
	dir := modelsDir(t)
	if os.Getenv("FW_TEST_CUDA") == "1" {
		torchAvailable(t)
		if !TorchCUDAAvailable("") {
			t.Fatal("FW_TEST_CUDA=1 but libtorch sees no CUDA device")
		}
		for _, name := range []string{"digits_cnn.ts.pt", "resnet18.ts.pt", "resnet18.cuda.pt2"} {
			m := mustLoad(t, filepath.Join(dir, name), Options{Device: "cuda"})
			res, err := m.Verify(context.Background())
			if err != nil || !res.Passed {
				t.Fatalf("%s on cuda: %v %+v", name, err, res)
			}
			// Batches of several sizes, from several goroutines at once (the
			// batcher's instances share the device).
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 3 {
						if res, err := m.Verify(context.Background()); err != nil || !res.Passed {
							errs <- fmt.Errorf("%s on cuda, goroutine %d: %v %+v", name, g, err, res)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			m.Close()
		}
		cuda := filepath.Join(dir, "resnet18.cuda.pt2")
		if _, err := Load(context.Background(), cuda, Options{Device: "cpu", Threads: 1}); err == nil ||
			!strings.Contains(err.Error(), "compiled for cuda but is being loaded on cpu") {
			t.Fatalf("CUDA package on cpu: %v", err)
		}
		// A package compiled for the CPU is refused on the GPU with the
		// reason (the same package, its device key rewritten: compiling one
		// for the CPU there would cost the check a minute).
		cpu := rewritePackage(t, cuda, "cpu.pt2", editMeta(t, func(m map[string]string) { m["AOTI_DEVICE_KEY"] = "cpu" }))
		if _, err := Load(context.Background(), cpu, Options{Device: "cuda", Threads: 1}); err == nil ||
			!strings.Contains(err.Error(), "compiled for cpu but is being loaded on cuda") {
			t.Fatalf("CPU package on cuda: %v", err)
		}
		return
	}
	_, err := Load(context.Background(), filepath.Join(dir, "digits_mlp.onnx"), Options{Device: "cuda", Threads: 1})
	if err == nil || !strings.Contains(err.Error(), "CUDA") || !strings.Contains(err.Error(), "FW_ORT_LIB") {
		t.Fatalf("ONNX on cuda without a CUDA provider: %v", err)
	}
	if _, err := TorchVersion(""); err == nil && !TorchCUDAAvailable("") {
		_, err := Load(context.Background(), filepath.Join(dir, "digits_mlp.ts.pt"), Options{Device: "cuda", Threads: 1})
		if err == nil || !strings.Contains(err.Error(), "no CUDA device") {
			t.Fatalf("TorchScript on cuda without a GPU: %v", err)
		}
		_, err = Load(context.Background(), filepath.Join(dir, "digits_mlp.pt2"), Options{Device: "cuda", Threads: 1})
		if err == nil || !strings.Contains(err.Error(), "no CUDA device") {
			t.Fatalf("AOTInductor package on cuda without a GPU: %v", err)
		}
	}
	if _, err := Load(context.Background(), filepath.Join(dir, "digits_mlp.onnx"), Options{Device: "tpu"}); err == nil {
		t.Fatal("device tpu accepted")
	}
}

func TestModelIdentity(t *testing.T) {
	m := mustLoad(t, filepath.Join(modelsDir(t), "textcls.onnx"), Options{})
	if m.Name() != "textcls" || m.Version() == "" || m.Inputs()[0].DType != Int64 {
		t.Fatalf("name %q version %q inputs %+v", m.Name(), m.Version(), m.Inputs())
	}
	if m.LoadTime <= 0 || m.Size <= 0 || m.Threads() != 1 {
		t.Fatalf("load time %v size %d threads %d", m.LoadTime, m.Size, m.Threads())
	}
	raw := m.Meta.Raw()
	if _, ok := raw["test_vector"]; ok {
		t.Fatal("Raw() should omit the test vector")
	}
	if raw["name"] != "textcls" {
		t.Fatalf("Raw() = %v", raw)
	}
}

func TestExampleInputs(t *testing.T) {
	m := mustLoad(t, filepath.Join(modelsDir(t), "digits_cnn.onnx"), Options{})
	in, err := m.ExampleInputs(7)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(in[0].Shape) != "[7 1 8 8]" {
		t.Fatalf("shape %v", in[0].Shape)
	}
	tv, _ := m.Meta.TestVector.Inputs["input"].Decode()
	rows := int(tv.Shape[0])
	per := len(tv.Data) / rows
	for r := 0; r < 7; r++ {
		if string(in[0].Data[r*per:(r+1)*per]) != string(tv.Data[(r%rows)*per:(r%rows+1)*per]) {
			t.Fatalf("row %d is not test-vector row %d", r, r%rows)
		}
	}
	if _, err := m.Run(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	plain := mustLoad(t, filepath.Join(modelsDir(t), "bad", "plain.onnx"), Options{})
	if _, err := plain.ExampleInputs(2); !errors.Is(err, ErrNoTestVector) {
		t.Fatalf("plain file: %v", err)
	}
}

// On a GPU the test vector is held to at least GPUTolerance (cuDNN's TF32
// convolutions put ResNet-18's logits ~2e-3 from the CPU's on an H200), a
// looser tolerance of the file's own still applies, and the CPU keeps the
// file's exactly.
func TestToleranceOnGPU(t *testing.T) {
	for _, c := range []struct {
		device       Device
		atol, rtol   float64
		wantA, wantR float64
	}{
		{"cpu", 1e-4, 1e-4, 1e-4, 1e-4},
		{"", 1e-4, 0, 1e-4, 0},
		{"cuda", 1e-4, 1e-4, GPUTolerance, GPUTolerance},
		{"cuda:1", 0.05, 1e-4, 0.05, GPUTolerance},
	} {
		m := &Model{Meta: &Metadata{TestVector: &TestVector{Atol: c.atol, Rtol: c.rtol}}, opts: Options{Device: c.device}}
		if a, r := m.Tolerance(); a != c.wantA || r != c.wantR {
			t.Errorf("%q with atol %g rtol %g: got %g %g, want %g %g", c.device, c.atol, c.rtol, a, r, c.wantA, c.wantR)
		}
	}
	if a, r := (&Model{}).Tolerance(); a != 0 || r != 0 {
		t.Errorf("no test vector: %g %g", a, r)
	}
}
