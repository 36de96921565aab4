package engine

import (
	"errors"
	"math"
	"testing"
)

func TestHalfRoundTrip(t *testing.T) {
	f := func(in float32, want uint16) {
		t.Helper()
		if got := Float32ToHalf(in); got != want {
			t.Errorf("Float32ToHalf(%v) = %#04x, want %#04x", in, got, want)
		}
		back := HalfToFloat32(want)
		if !(math.IsNaN(float64(in)) && math.IsNaN(float64(back))) && back != in && !math.IsInf(float64(back), 0) {
			t.Errorf("HalfToFloat32(%#04x) = %v, want %v", want, back, in)
		}
	}
	f(0, 0x0000)
	f(1, 0x3c00)
	f(-2, 0xc000)
	f(0.5, 0x3800)
	f(65504, 0x7bff)
	f(float32(math.Inf(1)), 0x7c00)
	f(5.960464477539063e-08, 0x0001) // smallest subnormal
	f(6.103515625e-05, 0x0400)       // smallest normal
	if got := Float32ToHalf(1e9); got != 0x7c00 {
		t.Errorf("overflow should give +Inf, got %#04x", got)
	}
	if got := HalfToFloat32(Float32ToHalf(float32(math.NaN()))); !math.IsNaN(float64(got)) {
		t.Errorf("NaN lost: %v", got)
	}
	// Every finite half survives a round trip through float32.
	for h := uint32(0); h < 1<<16; h++ {
		if h&0x7c00 == 0x7c00 {
			continue
		}
		if got := Float32ToHalf(HalfToFloat32(uint16(h))); got != uint16(h) {
			t.Fatalf("half %#04x -> %v -> %#04x", h, HalfToFloat32(uint16(h)), got)
		}
	}
}

func TestParseDType(t *testing.T) {
	for name, want := range map[string]DType{"float32": Float32, "FP32": Float32, "float64": Float64, "float16": Float16, "int64": Int64, "int32": Int32, "uint8": Uint8, "bool": Bool} {
		got, err := ParseDType(name)
		if err != nil || got != want {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	if _, err := ParseDType("complex64"); err == nil {
		t.Error("complex64 should be refused")
	}
}

func TestTensorViews(t *testing.T) {
	x := FromFloat32([]int64{2, 2}, []float32{1, 2, 3, 4})
	if x.Len() != 4 || x.At(3) != 4 || x.Float32s()[2] != 3 {
		t.Fatalf("float32 view broken: %+v", x)
	}
	y := FromInt64([]int64{3}, []int64{-1, 0, 7})
	if y.At(0) != -1 || y.Int64s()[2] != 7 || y.Float32s() != nil {
		t.Fatalf("int64 view broken")
	}
	if got := FormatShape([]int64{-1, 1, 8, 8}); got != "[N, 1, 8, 8]" {
		t.Fatalf("FormatShape = %q", got)
	}
}

// TestNewTensorRefusesBadShapes: shapes from a request (negative axes, sizes
// that overflow int64 or exceed MaxTensorBytes) are an error, never a
// makeslice panic.
func TestNewTensorRefusesBadShapes(t *testing.T) {
	const big = math.MaxInt64
	for _, tc := range []struct {
		name  string
		dt    DType
		shape []int64
	}{
		{"negative", Float32, []int64{-1, 4}},
		{"negative after zero", Float32, []int64{0, -4}},
		{"overflow int64", Float32, []int64{big, 2}},
		{"overflow with bytes", Float64, []int64{1 << 61}},
		{"product wraps to positive", Uint8, []int64{1 << 32, 1 << 32, 4}},
		{"too large", Uint8, []int64{MaxTensorBytes + 1}},
		{"too large after dtype", Float32, []int64{MaxTensorBytes/4 + 1}},
	} {
		x, err := NewTensor(tc.dt, tc.shape)
		var se *ShapeError
		if !errors.As(err, &se) {
			t.Errorf("%s: NewTensor(%s, %v) = %d bytes, %v; want a *ShapeError", tc.name, tc.dt, tc.shape, len(x.Data), err)
		}
	}
	for _, tc := range []struct {
		dt    DType
		shape []int64
		bytes int
	}{
		{Float32, nil, 4},
		{Float32, []int64{2, 3}, 24},
		{Float64, []int64{big, 0}, 0}, // empty: a zero axis wins over a huge one
		{Invalid, []int64{3}, 0},
		{Uint8, []int64{1 << 20}, 1 << 20},
	} {
		x, err := NewTensor(tc.dt, tc.shape)
		if err != nil || len(x.Data) != tc.bytes {
			t.Errorf("NewTensor(%s, %v) = %d bytes, %v; want %d bytes", tc.dt, tc.shape, len(x.Data), err, tc.bytes)
		}
	}
}

func TestCheckedElements(t *testing.T) {
	for _, tc := range []struct {
		shape []int64
		max   int64
		n     int64
		ok    bool
	}{
		{nil, 10, 1, true},
		{[]int64{2, 5}, 10, 10, true},
		{[]int64{2, 6}, 10, 0, false},
		{[]int64{math.MaxInt64, math.MaxInt64}, math.MaxInt64, 0, false},
		{[]int64{3, -1}, 100, 0, false},
		{[]int64{math.MaxInt64, 0}, 1, 0, true},
	} {
		n, ok := CheckedElements(tc.shape, tc.max)
		if n != tc.n || ok != tc.ok {
			t.Errorf("CheckedElements(%v, %d) = %d, %v; want %d, %v", tc.shape, tc.max, n, ok, tc.n, tc.ok)
		}
	}
}
