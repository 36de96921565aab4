package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fw-serve/fw/internal/testmodels"
)

// ser is the serialized form of elems, written by hand (not by AppendString).
func ser(elems ...string) []byte {
	var b []byte
	for _, s := range elems {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return b
}

func TestCheckStringsRefusesHostileData(t *testing.T) {
	f := func(data []byte, n int64, want string) {
		t.Helper()
		err := CheckStrings(data, n)
		switch {
		case want == "" && err != nil:
			t.Errorf("CheckStrings(%q, %d) = %v, want nil", data, n, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("CheckStrings(%q, %d) = %v, want an error containing %q", data, n, err, want)
		}
	}
	f(ser("a", "", "\xff\x00z"), 3, "")
	f(ser(), 0, "")
	f(ser("", "", ""), 3, "")                                        // empty strings are elements too
	f(ser("ab"), 2, "2 elements need at least 8 bytes")              // fewer than the shape says
	f(ser("ab", "c"), 1, "bytes follow the 1 elements")              // more than the shape says
	f(ser("abc")[:6], 1, "its length 3 runs past the end")           // a length beyond the buffer
	f(append(ser("abcd"), 1, 0), 2, "ends inside its 4-byte length") // a cut length prefix
	f([]byte{0xff, 0xff, 0xff, 0xff, 'x'}, 1, "length 4294967295")   // a 4 GiB length
	f([]byte{0, 0, 0, 0x80, 'x', 'y', 'z', 'w'}, 1, "runs past")     // 2 GiB: negative as an int32
	f(ser("a"), math.MaxInt64, "need at least")                      // a count no data can hold
	f(ser("a"), -1, "bytes follow")
	if n, err := CountStrings(ser("x", "", "yz")); n != 3 || err != nil {
		t.Errorf("CountStrings = %d, %v; want 3, nil", n, err)
	}
	if _, err := CountStrings(ser("xyz")[:5]); err == nil {
		t.Error("CountStrings of a cut element: nil error")
	}
}

func TestStringTensorCheckSplitAndViews(t *testing.T) {
	elems := []string{"r0a", "", "r1a\xff", "r1b", "r2a", "r2b\x00"}
	x, err := FromStrings([]int64{3, 2}, elems)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(x.Data, ser(elems...)) {
		t.Fatalf("FromStrings data %q, want %q", x.Data, ser(elems...))
	}
	if err := x.Check(); err != nil {
		t.Fatal(err)
	}
	for _, shape := range [][]int64{{3, 3}, {2, 2}, {6, 1 << 62}, {-1, 2}} {
		if err := (Tensor{DType: String, Shape: shape, Data: x.Data}).Check(); err == nil {
			t.Errorf("Check of 6 strings as shape %v: nil error", shape)
		}
	}
	parts, err := SplitRows(x, []int{1, 0, 2})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"r0a", ""}, {}, {"r1a\xff", "r1b", "r2a", "r2b\x00"}}
	for i, p := range parts {
		got, err := p.Strings()
		if err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		if p.Shape[0] != int64(len(want[i])/2) || len(got) != len(want[i]) {
			t.Fatalf("part %d: shape %v, %d strings; want %d rows", i, p.Shape, len(got), len(want[i])/2)
		}
		for k := range got {
			if string(got[k]) != want[i][k] {
				t.Errorf("part %d element %d = %q, want %q", i, k, got[k], want[i][k])
			}
		}
	}
	if _, err := SplitRows(x, []int{1, 1}); err == nil {
		t.Error("SplitRows of 2 rows out of 3: nil error")
	}
	// Fixed-size types split by bytes, as the batcher did before.
	f := FromInt64([]int64{3, 2}, []int64{1, 2, 3, 4, 5, 6})
	parts, err = SplitRows(f, []int{2, 1})
	if err != nil || parts[1].Int64s()[1] != 6 || parts[0].Shape[0] != 2 || len(parts[0].Data) != 32 {
		t.Fatalf("SplitRows(int64) = %v, %v", parts, err)
	}
	// NewTensor makes empty strings, a valid tensor.
	e, err := NewTensor(String, []int64{2, 2})
	if err != nil || e.Check() != nil || len(e.Data) != 16 {
		t.Fatalf("NewTensor(String) = %v, %v", e, err)
	}
	if _, err := NewTensor(String, []int64{1 << 40, 1 << 40}); err == nil {
		t.Error("NewTensor of 2^80 strings: nil error")
	}
	if err := (Tensor{DType: Int32, Shape: []int64{2}, Data: make([]byte, 7)}).Check(); err == nil ||
		!strings.Contains(err.Error(), "data holds 7 bytes, shape [2] needs 8") {
		t.Errorf("Check of 7 bytes for [2] int32: %v", err)
	}
}

func stringTensor(t *testing.T, shape []int64, elems ...string) Tensor {
	t.Helper()
	x, err := FromStrings(shape, elems)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// Triton's simple_string model (python/fw/triton_samples.py): BYTES
// inputs holding integers, outputs their sum and difference as strings,
// through ONNX Runtime's string tensors both ways. Loading it failed before
// fw had a string dtype.
func TestStringModelRuns(t *testing.T) {
	m := mustLoad(t, testmodels.Triton(t, "simple_string"), Options{})
	if !m.Batched() || m.Inputs()[0].DType != String || m.Outputs()[1].DType != String {
		t.Fatalf("simple_string specs: %v -> %v, batched %v", m.Inputs(), m.Outputs(), m.Batched())
	}
	a, b := make([]string, 32), make([]string, 32)
	for i := range a {
		a[i] = strings.Repeat(" ", i%2) + string(rune('0'+i%10)) // ONNX's Cast accepts leading blanks
		b[i] = "-" + string(rune('0'+(i+3)%10))
	}
	out, err := m.Run(context.Background(), []Tensor{stringTensor(t, []int64{2, 16}, a...), stringTensor(t, []int64{2, 16}, b...)})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := out[0].Strings()
	if err != nil {
		t.Fatal(err)
	}
	diff, _ := out[1].Strings()
	if FormatShape(out[0].Shape) != "[2, 16]" || len(sum) != 32 || len(diff) != 32 {
		t.Fatalf("outputs %s %d %d", FormatShape(out[0].Shape), len(sum), len(diff))
	}
	for i := range sum {
		x, y := i%10, -((i + 3) % 10)
		if string(sum[i]) != itoa(x+y) || string(diff[i]) != itoa(x-y) {
			t.Fatalf("element %d: %q+%q = %q, %q; want %s, %s", i, a[i], b[i], sum[i], diff[i], itoa(x+y), itoa(x-y))
		}
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// simple_identity: any bytes (empty, non-UTF-8, long, NUL) come back as
// sent, in rows of a dynamic length.
func TestStringIdentityModel(t *testing.T) {
	m := mustLoad(t, testmodels.Triton(t, "simple_identity"), Options{})
	elems := []string{"", "\xff\xfe not UTF-8", strings.Repeat("long ", 10000), "é", "a\x00b", "\x00"}
	out, err := m.Run(context.Background(), []Tensor{stringTensor(t, []int64{2, 3}, elems...)})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out[0].Data, ser(elems...)) || FormatShape(out[0].Shape) != "[2, 3]" {
		t.Fatalf("identity returned %s %q...", FormatShape(out[0].Shape), out[0].Data[:min(40, len(out[0].Data))])
	}
	// Data that does not hold the shape's strings never reaches the engine.
	var ie *InputError
	bad := Tensor{DType: String, Shape: []int64{1, 2}, Data: ser("a", "b")[:7]}
	if _, err := m.Run(context.Background(), []Tensor{bad}); !errors.As(err, &ie) {
		t.Fatalf("cut string data: %v, want an *InputError", err)
	}
}

// Elements holding NUL bytes reach an ONNX model and come back byte for
// byte, as Triton's simple_{http,grpc}_string_infer_client examples send
// them ("he\x00llo", 4-byte binary blobs): fw fills ONNX Runtime's string
// tensors through its C API by length (ort_strings.c). Before, they were
// refused: onnxruntime_go fills string tensors from C strings, which end at
// the first NUL.
func TestStringNULBytesRoundTrip(t *testing.T) {
	p := testmodels.Identity(t, t.TempDir(), "string_identity.onnx", testmodels.ONNXString, "batch", "n")
	m := mustLoad(t, p, Options{})
	elems := []string{"he\x00llo", "\x00\x01\x02\x03", "", "\x00", "end\x00", strings.Repeat("\x00x", 5000)}
	for _, shape := range [][]int64{{2, 3}, {6, 1}, {1, 6}} {
		out, err := m.Run(context.Background(), []Tensor{stringTensor(t, shape, elems...)})
		if err != nil {
			t.Fatalf("%v: %v", shape, err)
		}
		got, err := out[0].Strings()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(elems) || FormatShape(out[0].Shape) != FormatShape(shape) {
			t.Fatalf("%v: %d elements of shape %s", shape, len(got), FormatShape(out[0].Shape))
		}
		for i, e := range elems {
			if string(got[i]) != e {
				t.Fatalf("%v element %d: %q, want %q", shape, i, got[i][:min(20, len(got[i]))], e[:min(20, len(e))])
			}
		}
	}
	// A batch of requests (the batcher joins their Data) keeps every byte,
	// and splits back into them.
	a, b := stringTensor(t, []int64{1, 2}, "\x00", "a\x00"), stringTensor(t, []int64{2, 2}, "", "\x00\x00", "b", "\x00c")
	joined := Tensor{DType: String, Shape: []int64{3, 2}, Data: append(append([]byte{}, a.Data...), b.Data...)}
	out, err := m.Run(context.Background(), []Tensor{joined})
	if err != nil {
		t.Fatal(err)
	}
	parts, err := SplitRows(out[0], []int{1, 2})
	if err != nil || !bytes.Equal(parts[0].Data, a.Data) || !bytes.Equal(parts[1].Data, b.Data) {
		t.Fatalf("a batch of NUL strings: %v % x, want % x", err, out[0].Data, joined.Data)
	}
}

// The datatypes Triton has beyond fw's first eight (UINT16, UINT32,
// UINT64, INT16, BF16) load and run through ONNX Runtime, with dynamic
// axes (outputs ONNX Runtime allocates) and fixed ones (fw allocates);
// a type fw does not serve (float8) fails the load naming the tensor.
func TestMoreDTypesLoadAndRun(t *testing.T) {
	dir := t.TempDir()
	for i, tc := range []struct {
		dt   DType
		dims []any
	}{
		{Uint16, []any{"batch", "n"}}, {Int16, []any{"batch", "n"}}, {Uint32, []any{"batch", "n"}},
		{Uint64, []any{"batch", "n"}}, {BFloat16, []any{"batch", 3}}, {Uint64, []any{"batch", 3}},
	} {
		t.Run(tc.dt.String(), func(t *testing.T) {
			p := testmodels.Identity(t, dir, fmt.Sprintf("%s_%d.onnx", tc.dt, i), int(tc.dt), tc.dims...)
			m := mustLoad(t, p, Options{})
			if m.Inputs()[0].DType != tc.dt || !m.Batched() {
				t.Fatalf("specs %v, batched %v", m.Inputs(), m.Batched())
			}
			x, _ := NewTensor(tc.dt, []int64{2, 3})
			for i := range x.Data {
				x.Data[i] = byte(0x3f + i*7) // bf16 0x3f.. are finite
			}
			out, err := m.Run(context.Background(), []Tensor{x})
			if err != nil {
				t.Fatal(err)
			}
			if out[0].DType != tc.dt || !bytes.Equal(out[0].Data, x.Data) {
				t.Fatalf("identity of %s: %v %x, want %x", tc.dt, out[0].DType, out[0].Data, x.Data)
			}
		})
	}
	p := testmodels.Identity(t, dir, "float8.onnx", testmodels.ONNXFloat8, "batch", 2)
	_, err := Load(context.Background(), p, Options{Threads: 1})
	var le *LoadError
	if !errors.As(err, &le) || le.Code != CodeUnsupportedDType || !strings.Contains(err.Error(), `"INPUT0"`) {
		t.Fatalf("float8 model: %v, want a %s LoadError naming INPUT0", err, CodeUnsupportedDType)
	}
}

// A libtorch model whose fw.json declares a type the shim lacks (bfloat16,
// string) fails the load naming the tensor and the type, instead of
// failing every request.
func TestTorchRefusesDTypesItLacks(t *testing.T) {
	torchAvailable(t)
	src := filepath.Join(modelsDir(t), "digits_mlp.ts.pt")
	for _, dt := range []string{"bfloat16", "string", "uint16"} {
		dst := testmodels.RewriteZip(t, src, filepath.Join(t.TempDir(), "m.ts.pt"), func(name string, data []byte) ([]byte, bool) {
			if !strings.HasSuffix(name, "extra/fw.json") {
				return data, true
			}
			var doc map[string]any
			if err := json.Unmarshal(data, &doc); err != nil {
				t.Fatal(err)
			}
			doc["inputs"].([]any)[0].(map[string]any)["dtype"] = dt
			delete(doc, "test_vector")
			out, _ := json.Marshal(doc)
			return out, true
		})
		_, err := Load(context.Background(), dst, Options{Threads: 1})
		var le *LoadError
		if !errors.As(err, &le) || le.Code != CodeUnsupportedDType || !strings.Contains(err.Error(), dt) || !strings.Contains(err.Error(), `"input"`) {
			t.Errorf("fw.json input dtype %s: %v, want a %s LoadError naming it", dt, err, CodeUnsupportedDType)
		}
	}
}

// FuzzStrings: on any bytes and shape, Check and CheckStrings never panic
// nor read past the data, and a tensor they accept splits into rows (of
// any partition) whose data concatenate back to the whole, each part
// well formed: what the batcher relies on to join and split BYTES.
func FuzzStrings(f *testing.F) {
	f.Add(ser("a", "", "bc", "d"), int64(2), int64(2), uint8(1))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, int64(1), int64(1), uint8(0))
	f.Add(ser("x"), int64(1<<40), int64(1<<40), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, d0, d1 int64, cut uint8) {
		x := Tensor{DType: String, Shape: []int64{d0, d1}, Data: data}
		if err := x.Check(); err != nil {
			return
		}
		elems, err := x.Strings()
		if err != nil || int64(len(elems)) != d0*d1 {
			t.Fatalf("Strings of a checked tensor: %d, %v", len(elems), err)
		}
		first := int(min(int64(cut), d0))
		parts, err := SplitRows(x, []int{first, int(d0) - first})
		if err != nil {
			t.Fatal(err)
		}
		joined := append(append([]byte(nil), parts[0].Data...), parts[1].Data...)
		if !bytes.Equal(joined, data) || parts[0].Check() != nil || parts[1].Check() != nil {
			t.Fatalf("split at row %d of %v does not rejoin", first, x.Shape)
		}
	})
}

// SplitShapes cuts a flat tensor into parts of given shapes, for the
// fixed-size types and for strings, and refuses shapes that do not use up
// exactly its elements.
func TestSplitShapes(t *testing.T) {
	f := FromFloat32([]int64{6}, []float32{1, 2, 3, 4, 5, 6})
	parts, err := SplitShapes(f, [][]int64{{1, 2}, {1, 1}, {3, 1}})
	if err != nil {
		t.Fatal(err)
	}
	if got := [][]float32{parts[0].Float32s(), parts[1].Float32s(), parts[2].Float32s()}; !reflect.DeepEqual(got, [][]float32{{1, 2}, {3}, {4, 5, 6}}) ||
		!reflect.DeepEqual(parts[2].Shape, []int64{3, 1}) {
		t.Fatalf("parts %v, shape %v", got, parts[2].Shape)
	}
	s, err := FromStrings([]int64{3}, []string{"a", "bcd", ""})
	if err != nil {
		t.Fatal(err)
	}
	parts, err = SplitShapes(s, [][]int64{{1, 2}, {1, 1}})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := parts[0].Strings()
	second, _ := parts[1].Strings()
	if len(first) != 2 || string(first[1]) != "bcd" || len(second) != 1 || string(second[0]) != "" {
		t.Fatalf("string parts %q %q", first, second)
	}
	for _, shapes := range [][][]int64{{{1, 2}}, {{1, 4}, {1, 3}}, {{-1}}, {{1 << 40, 1 << 40}}} {
		if _, err := SplitShapes(f, shapes); err == nil {
			t.Errorf("shapes %v of a 6-element tensor: no error", shapes)
		}
	}
}
