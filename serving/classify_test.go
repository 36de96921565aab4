package serving

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/fw-serve/fw/engine"
)

func classStrings(t *testing.T, x engine.Tensor, n int64, batched bool, labels []string) (string, []string) {
	t.Helper()
	out, err := TopClasses(x, n, batched, labels)
	if err != nil {
		t.Fatal(err)
	}
	elems, err := out.Strings()
	if err != nil {
		t.Fatal(err)
	}
	s := make([]string, len(elems))
	for i, e := range elems {
		s[i] = string(e)
	}
	return engine.FormatShape(out.Shape), s
}

// The strings are Triton's (src/classification.cc): std::to_string of the
// value, ":" and the index within the row, ":" and the label when there is
// one; the largest first, at most as many as the row has.
func TestTopClassesFormat(t *testing.T) {
	x := engine.FromFloat32([]int64{2, 4}, []float32{0.1, 3.5, -2, 3.5, float32(math.NaN()), 1e20, float32(math.Inf(-1)), 0.25})
	shape, got := classStrings(t, x, 3, true, []string{"cat", "dog", "emu"})
	want := []string{"3.500000:1:dog", "3.500000:3", "0.100000:0:cat", // equal values in index order; no label for 3
		"100000002004087734272.000000:1:dog", "0.250000:3", "-inf:2:emu"} // NaN last
	if shape != "[2, 3]" || !slices.Equal(got, want) {
		t.Fatalf("FP32 top 3: %s %q, want [2, 3] %q", shape, got, want)
	}
	// More classes than the row has: clamped, as Triton does.
	shape, got = classStrings(t, x, 100, true, nil)
	if shape != "[2, 4]" || got[3] != "-2.000000:2" || got[7] != "nan:0" {
		t.Fatalf("top 100 of 4: %s %q", shape, got)
	}
	// Unbatched: the whole tensor is one row, whatever its shape.
	i64 := engine.FromInt64([]int64{1, 3, 1}, []int64{-5, math.MaxInt64, math.MaxInt64 - 1})
	shape, got = classStrings(t, i64, 2, false, []string{"a", "b", "c"})
	if shape != "[2]" || !slices.Equal(got, []string{"9223372036854775807:1:b", "9223372036854775806:2:c"}) {
		t.Fatalf("INT64 unbatched: %s %q", shape, got)
	}
	u8 := engine.Tensor{DType: engine.Uint8, Shape: []int64{1, 3}, Data: []byte{7, 255, 0}}
	if _, got = classStrings(t, u8, 1, true, nil); !slices.Equal(got, []string{"255:1"}) {
		t.Fatalf("UINT8: %q", got)
	}
	f64 := engine.Tensor{DType: engine.Float64, Shape: []int64{1, 2}, Data: make([]byte, 16)}
	if _, got = classStrings(t, f64, 1, true, nil); !slices.Equal(got, []string{"0.000000:0"}) {
		t.Fatalf("FP64: %q", got)
	}
}

func TestCheckClassification(t *testing.T) {
	f := func(dt engine.DType, n int64, want string) {
		t.Helper()
		err := CheckClassification(engine.TensorSpec{Name: "y", DType: dt}, n)
		var ce *ClassificationError
		switch {
		case want == "" && err != nil:
			t.Errorf("%s, %d: %v", dt, n, err)
		case want != "" && (!errors.As(err, &ce) || !strings.Contains(err.Error(), want)):
			t.Errorf("%s, %d: %v, want %q", dt, n, err, want)
		}
	}
	f(engine.Float32, 3, "")
	f(engine.Float32, 0, "")
	f(engine.Invalid, 3, "") // checked on the output itself
	f(engine.Float32, -1, `parameter "classification" is -1`)
	f(engine.Float16, 1, `output "y": class result not available for output due to unsupported type 'FP16'`)
	f(engine.String, 1, "unsupported type 'BYTES'")
	f(engine.Bool, 1, "unsupported type 'BOOL'")
	if k := Classify(&ClassificationError{"x"}, 0).Kind; k != KindBadRequest {
		t.Errorf("Classify(*ClassificationError) = %v", k)
	}
}

func TestDatatypes(t *testing.T) {
	for d, name := range v2Names {
		if ParseDatatype(name) != d {
			t.Errorf("ParseDatatype(%q) = %v, want %v", name, ParseDatatype(name), d)
		}
	}
	if ParseConfigDataType("TYPE_STRING") != engine.String || ParseConfigDataType("TYPE_BF16") != engine.BFloat16 || ParseConfigDataType("BYTES") != engine.Invalid {
		t.Error("configuration datatype names")
	}
	if ParseDatatype("FP8") != engine.Invalid || DatatypeName(engine.Invalid) != "UNKNOWN" || ConfigDataType(engine.String) != "TYPE_STRING" || ConfigDataType(engine.BFloat16) != "TYPE_BF16" {
		t.Error("datatype names")
	}
	if got := Datatypes(); got != "BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BF16 and BYTES" {
		t.Errorf("Datatypes() = %q", got)
	}
}
