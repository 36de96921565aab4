package engine

import (
	"archive/zip"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fw-serve/fw/internal/testmodels"
)

// The AOTInductor packages `make models` builds (resnet18.pt2 comes from
// make bench-engine and is not needed here).
var aotiModels = []string{"digits_mlp", "digits_cnn", "textcls"}

func aotiFile(t *testing.T, name string) string {
	t.Helper()
	torchAvailable(t)
	return filepath.Join(modelsDir(t), name+".pt2")
}

func TestAOTIPackagesDescribeThemselves(t *testing.T) {
	for _, name := range aotiModels {
		t.Run(name, func(t *testing.T) {
			p := aotiFile(t, name)
			info, err := DetectFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if info.Format != FormatAOTI || info.Metadata == nil || info.Metadata.Name != name {
				t.Fatalf("format %s metadata %+v", info.Format, info.Metadata)
			}
			if info.Package["AOTI_DEVICE_KEY"] != "cpu" || info.Package["AOTI_CPU_ISA"] == "" {
				t.Fatalf("package metadata %v", info.Package)
			}
			if _, ok := info.Package[MetadataKey]; ok {
				t.Fatal("Package should not repeat fw.json")
			}
			m := mustLoad(t, p, Options{})
			if m.Format != FormatAOTI || len(m.Inputs()) != 1 || m.Inputs()[0].Name != info.Metadata.Inputs[0].Name {
				t.Fatalf("format %s inputs %+v", m.Format, m.Inputs())
			}
		})
	}
}

// Every batch size from 1 up runs through the package's dynamic batch axis
// and gives what ONNX Runtime gives for the same model and rows.
func TestAOTIAgreesWithONNXAtEveryBatchSize(t *testing.T) {
	dir := modelsDir(t)
	for _, name := range aotiModels {
		t.Run(name, func(t *testing.T) {
			pkg := mustLoad(t, aotiFile(t, name), Options{Threads: 2})
			onnx := mustLoad(t, filepath.Join(dir, name+".onnx"), Options{})
			for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 16, 31, 64, 65} {
				in, err := pkg.ExampleInputs(n)
				if err != nil {
					t.Fatal(err)
				}
				got, err := pkg.Run(context.Background(), in)
				if err != nil {
					t.Fatalf("batch %d: %v", n, err)
				}
				want, err := onnx.Run(context.Background(), in)
				if err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(got[0].Shape) != fmt.Sprint(want[0].Shape) || got[0].Shape[0] != int64(n) {
					t.Fatalf("batch %d: shape %v, onnx %v", n, got[0].Shape, want[0].Shape)
				}
				for j := 0; j < want[0].Len(); j++ {
					if d := math.Abs(got[0].At(j) - want[0].At(j)); d > 1e-4+1e-3*math.Abs(want[0].At(j)) {
						t.Fatalf("batch %d element %d: pt2 %g, onnx %g", n, j, got[0].At(j), want[0].At(j))
					}
				}
			}
		})
	}
}

// Inputs that skip fw's checks (Forward is for inputs CheckInputs passed)
// reach the package's own checks (AOTI_RUNTIME_CHECK_INPUTS, set by the shim):
// an engine error, never a read out of bounds; the model keeps working.
func TestAOTIPackageChecksItsInputs(t *testing.T) {
	m := mustLoad(t, aotiFile(t, "digits_cnn"), Options{})
	good, err := m.ExampleInputs(3)
	if err != nil {
		t.Fatal(err)
	}
	f := func(name string, in []Tensor) {
		t.Helper()
		if _, err := m.Forward(context.Background(), in); !errors.Is(err, ErrEngine) {
			t.Errorf("%s: %v, want ErrEngine", name, err)
		}
		if out, err := m.Forward(context.Background(), good); err != nil || out[0].Shape[0] != 3 {
			t.Fatalf("after %s: %v %v", name, out, err)
		}
	}
	wide, _ := NewTensor(Float32, []int64{3, 1, 8, 9})
	f("wrong width", []Tensor{wide})
	big, _ := NewTensor(Float32, []int64{3, 1, 64, 64})
	f("larger image", []Tensor{big})
	flat, _ := NewTensor(Float32, []int64{3, 64})
	f("wrong rank", []Tensor{flat})
	ints, _ := NewTensor(Int64, []int64{3, 1, 8, 8})
	f("wrong dtype", []Tensor{ints})
	f("two inputs", []Tensor{good[0], good[0]})
}

// rewritePackage writes a changed copy of the package src (see testmodels.RewriteZip).
func rewritePackage(t *testing.T, src, name string, edit func(name string, data []byte) ([]byte, bool)) string {
	t.Helper()
	return testmodels.RewriteZip(t, src, filepath.Join(t.TempDir(), name), edit)
}

func editMeta(t *testing.T, change func(m map[string]string)) func(string, []byte) ([]byte, bool) {
	return testmodels.EditPackageMetadata(t, change)
}

func editFWJSON(t *testing.T, change func(doc map[string]any)) func(string, []byte) ([]byte, bool) {
	return testmodels.EditPackageFWJSON(t, change)
}

// Packages this process cannot or must not run are refused at load with an
// error naming the reason, before their code is loaded; afterwards a good
// package still loads and runs (nothing crashed or leaked into the process).
func TestAOTIRefusesPackagesItCannotRun(t *testing.T) {
	src := aotiFile(t, "digits_mlp")
	whole, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	f := func(name, path, wantCode, wantMsg string) {
		t.Helper()
		_, err := Load(context.Background(), path, Options{Threads: 1})
		var le *LoadError
		if !errors.As(err, &le) {
			t.Fatalf("%s: got %v, want *LoadError", name, err)
		}
		if le.Code != wantCode || !strings.Contains(err.Error(), wantMsg) {
			t.Errorf("%s: code %q message %q; want code %q containing %q", name, le.Code, err, wantCode, wantMsg)
		}
	}
	f("compiled for cuda", rewritePackage(t, src, "cuda.pt2", editMeta(t, func(m map[string]string) { m["AOTI_DEVICE_KEY"] = "cuda" })),
		CodeEngine, "the package was compiled for cuda but is being loaded on cpu")
	f("another machine", rewritePackage(t, src, "arm.pt2", editMeta(t, func(m map[string]string) { m["AOTI_MACHINE"] = "aarch64" })),
		CodeEngine, "compiled for a aarch64 CPU")
	f("another OS", rewritePackage(t, src, "mac.pt2", editMeta(t, func(m map[string]string) { m["AOTI_PLATFORM"] = "darwin" })),
		CodeEngine, "compiled for platform darwin")
	f("CPU feature missing", rewritePackage(t, src, "feat.pt2", editMeta(t, func(m map[string]string) { m["fw.cpu_flags"] += " fw_test_feature" })),
		CodeEngine, "for a CPU with fw_test_feature, which this CPU lacks")
	f("unknown ISA", rewritePackage(t, src, "isa.pt2", editMeta(t, func(m map[string]string) { m["AOTI_CPU_ISA"] = "AVX1024" })),
		CodeEngine, "instruction set avx1024")
	f("another torch", rewritePackage(t, src, "torch.pt2", editFWJSON(t, func(d map[string]any) { d["torch_version"] = "2.12.1+cpu" })),
		CodeTorchVersion, "compiled with torch 2.12.1+cpu but fw runs libtorch")
	f("fw.json of another format", rewritePackage(t, src, "fmt.pt2", editFWJSON(t, func(d map[string]any) { d["format"] = "onnx" })),
		CodeBadMetadata, `fw.json says format "onnx"`)
	n := 0
	f("metadata copies disagree", rewritePackage(t, src, "two.pt2", editMeta(t, func(m map[string]string) {
		if n++; n == 2 {
			m["AOTI_DEVICE_KEY"] = "cuda"
		}
	})), CodeBadMetadata, "metadata files disagree")
	f("sources only", rewritePackage(t, src, "src.pt2", func(name string, data []byte) ([]byte, bool) {
		return data, !strings.HasSuffix(name, ".so")
	}), CodeUnknownFormat, "without a compiled library")
	f("no metadata", rewritePackage(t, src, "nometa.pt2", func(name string, data []byte) ([]byte, bool) {
		return data, !strings.HasSuffix(name, "_metadata.json")
	}), CodeBadMetadata, "has no metadata file")
	f("metadata not strings", rewritePackage(t, src, "obj.pt2", func(name string, data []byte) ([]byte, bool) {
		if strings.HasSuffix(name, "_metadata.json") {
			return []byte(`{"AOTI_DEVICE_KEY": 1}`), true
		}
		return data, true
	}), CodeBadMetadata, "not a JSON object of strings")
	f("torch.export program", writeFile(t, "ep.pt2", zipBytes(t, map[string]string{
		"ep/archive_format": "pt2", "ep/models/model.json": "{}", "ep/.data/version": "1"})),
		CodeUnknownFormat, "without AOTInductor code")
	for _, cut := range []int{len(whole) / 2, len(whole) - 10} {
		f(fmt.Sprintf("cut to %d bytes", cut), writeFile(t, "cut.pt2", whole[:cut]), CodeTruncated, "damaged or truncated")
	}

	// A byte flipped inside the compiled library, CRC left as it was: the
	// loader would dlopen it unchecked.
	zr, err := zip.OpenReader(src)
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), whole...)
	for _, zf := range zr.File {
		if strings.HasSuffix(zf.Name, ".so") {
			off, err := zf.DataOffset()
			if err != nil {
				t.Fatal(err)
			}
			flipped[off+int64(zf.UncompressedSize64/2)] ^= 0xff
		}
	}
	zr.Close()
	f("damaged library", writeFile(t, "flip.pt2", flipped), CodeTruncated, "the AOTInductor package is damaged")

	m := mustLoad(t, src, Options{})
	if res, err := m.Verify(context.Background()); err != nil || !res.Passed {
		t.Fatalf("good package after the refusals: %v %+v", err, res)
	}
}

// A package without fw.json (plain torch._inductor.aoti_compile_and_package)
// loads with its input and output counts from the call spec.
func TestAOTIPackageWithoutFWJSON(t *testing.T) {
	p := rewritePackage(t, aotiFile(t, "digits_mlp"), "plain.pt2", editMeta(t, func(m map[string]string) { delete(m, MetadataKey) }))
	m := mustLoad(t, p, Options{})
	if m.Meta != nil || len(m.Inputs()) != 1 || len(m.Outputs()) != 1 || m.Name() != "plain" {
		t.Fatalf("meta %v inputs %+v outputs %+v name %s", m.Meta, m.Inputs(), m.Outputs(), m.Name())
	}
	x, _ := NewTensor(Float32, []int64{2, 64})
	out, err := m.Run(context.Background(), []Tensor{x})
	if err != nil || fmt.Sprint(out[0].Shape) != "[2 10]" {
		t.Fatalf("%v %v", out, err)
	}
	// Without fw.json only the package's own checks stand between a bad
	// shape and its kernels: an error, not a crash.
	bad, _ := NewTensor(Float32, []int64{2, 63})
	if _, err := m.Run(context.Background(), []Tensor{bad}); !errors.Is(err, ErrEngine) {
		t.Fatalf("bad shape: %v, want ErrEngine", err)
	}
}

func TestCallSpecCounts(t *testing.T) {
	leaf := `{"type": null, "context": null, "children_spec": []}`
	tuple := func(children ...string) string {
		return `{"type": "builtins.tuple", "context": "null", "children_spec": [` + strings.Join(children, ",") + `]}`
	}
	dict := func(children ...string) string {
		return `{"type": "builtins.dict", "context": "[]", "children_spec": [` + strings.Join(children, ",") + `]}`
	}
	spec := func(root string) string { return "[1, " + root + "]" }
	f := func(in, out string, wantIn, wantOut int, wantErr string) {
		t.Helper()
		i, o, err := callSpecCounts([]string{in, out})
		if wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Errorf("got %d, %d, %v; want error %q", i, o, err, wantErr)
			}
			return
		}
		if err != nil || i != wantIn || o != wantOut {
			t.Errorf("got %d, %d, %v; want %d, %d", i, o, err, wantIn, wantOut)
		}
	}
	f(spec(tuple(tuple(leaf), dict())), spec(leaf), 1, 1, "")
	f(spec(tuple(tuple(leaf, leaf), dict())), spec(tuple(leaf, leaf, leaf)), 2, 3, "")
	f(spec(tuple(tuple(leaf), dict(leaf))), spec(leaf), 0, 0, "keyword inputs")
	f(spec(tuple(tuple(leaf))), spec(leaf), 0, 0, "not (args, kwargs)")
	f("[1]", spec(leaf), 0, 0, "not a [protocol, treespec] pair")
	f("nonsense", spec(leaf), 0, 0, "not a [protocol, treespec] pair")
	deep := leaf
	for range maxSpecDepth + 2 {
		deep = tuple(deep)
	}
	f(spec(tuple(tuple(leaf), dict())), spec(deep), 0, 0, "nested deeper")
	if _, _, err := callSpecCounts([]string{"x"}); err == nil {
		t.Error("one-entry call spec accepted")
	}
}

func TestTorchRelease(t *testing.T) {
	for in, want := range map[string]string{"2.13.0+cu130": "2.13", "2.13.1": "2.13", "2.12": "2.12", "3": "3", "": ""} {
		if got := torchRelease(in); got != want {
			t.Errorf("torchRelease(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzCallSpecCounts: a package's call spec (read from the package) never
// panics the reader, and accepted counts are not negative.
func FuzzCallSpecCounts(f *testing.F) {
	f.Add(`[1, {"type": "builtins.tuple", "children_spec": [{"type": "builtins.tuple", "children_spec": [{"type": null}]}, {"type": "builtins.dict", "children_spec": []}]}]`, `[1, {"type": null}]`)
	f.Add(`[1, {}]`, `[]`)
	f.Fuzz(func(t *testing.T, in, out string) {
		if len(in)+len(out) > 1<<16 {
			return
		}
		i, o, err := callSpecCounts([]string{in, out})
		if err == nil && (i < 0 || o < 0) {
			t.Fatalf("negative counts %d, %d", i, o)
		}
	})
}

// runInBatchRange feeds the package only batches it accepts, and the caller
// gets one output row per input row, in order, at every batch size.
func TestRunInBatchRange(t *testing.T) {
	for _, r := range []struct{ low, high int64 }{{1, 0}, {2, 15}, {16, 0}, {1, 4}, {3, 3}} {
		for n := int64(1); n <= 40; n++ {
			x := make([]float32, n*3)
			ids := make([]int64, n)
			for i := range x {
				x[i] = float32(i)
			}
			for i := range ids {
				ids[i] = int64(100 + i)
			}
			in := []Tensor{FromFloat32([]int64{n, 3}, x), FromInt64([]int64{n}, ids)}
			var calls []int64
			run := func(_ context.Context, in []Tensor) ([]Tensor, error) {
				b := in[0].Shape[0]
				if b < r.low || (r.high > 0 && b > r.high) || in[1].Shape[0] != b {
					return nil, fmt.Errorf("batch %d outside %d..%d", b, r.low, r.high)
				}
				calls = append(calls, b)
				// Output: the row sum of input 0 and input 1 as float32, [b, 2].
				out := make([]float32, 2*b)
				for i := int64(0); i < b; i++ {
					xs := in[0].Float32s()[i*3 : i*3+3]
					out[2*i] = xs[0] + xs[1] + xs[2]
					out[2*i+1] = float32(in[1].Int64s()[i])
				}
				return []Tensor{FromFloat32([]int64{b, 2}, out)}, nil
			}
			got, err := runInBatchRange(context.Background(), in, r.low, r.high, run)
			if err != nil {
				t.Fatalf("range %v batch %d: %v", r, n, err)
			}
			if fmt.Sprint(got[0].Shape) != fmt.Sprint([]int64{n, 2}) {
				t.Fatalf("range %v batch %d: shape %v", r, n, got[0].Shape)
			}
			for i := int64(0); i < n; i++ {
				want0, want1 := float32(9*i+3), float32(100+i)
				if g := got[0].Float32s()[2*i : 2*i+2]; g[0] != want0 || g[1] != want1 {
					t.Fatalf("range %v batch %d row %d: got %v, want [%v %v]", r, n, i, g, want0, want1)
				}
			}
			inRange := n >= r.low && (r.high == 0 || n <= r.high)
			if inRange && len(calls) != 1 {
				t.Fatalf("range %v batch %d: %d calls for an accepted batch", r, n, len(calls))
			}
		}
	}
	// A package that returns the wrong number of rows is an error, not a panic.
	bad := func(_ context.Context, in []Tensor) ([]Tensor, error) {
		return []Tensor{FromFloat32([]int64{1, 1}, []float32{0})}, nil
	}
	in := []Tensor{FromFloat32([]int64{5, 1}, make([]float32, 5))}
	if _, err := runInBatchRange(context.Background(), in, 1, 2, bad); err == nil {
		t.Fatal("wrong output rows accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := runInBatchRange(ctx, in, 1, 2, bad); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestBatchRangeFromMetadata(t *testing.T) {
	f := func(export map[string]any, low, high int64, wantErr bool) {
		t.Helper()
		l, h, err := batchRange(&Metadata{Export: export})
		if (err != nil) != wantErr || (!wantErr && (l != low || h != high)) {
			t.Errorf("%v: %d, %d, %v; want %d, %d, error %v", export, l, h, err, low, high, wantErr)
		}
	}
	f(nil, 1, 0, false)
	f(map[string]any{"batch_min": 2.0, "batch_max": 15.0}, 2, 15, false)
	f(map[string]any{"batch_min": 1.0, "batch_max": nil}, 1, 0, false)
	f(map[string]any{"batch_min": 0.0}, 0, 0, true)
	f(map[string]any{"batch_min": 2.5}, 0, 0, true)
	f(map[string]any{"batch_min": "2"}, 0, 0, true)
	f(map[string]any{"batch_min": 4.0, "batch_max": 3.0}, 0, 0, true)
	f(map[string]any{"batch_max": 1e300}, 0, 0, true)
}
