package engine

import (
	"encoding/binary"
	"math"
	"testing"
)

// firstNonFinite finds the first NaN, +Inf or -Inf at every position and
// length (the four-at-a-time loop and its tail), and nothing in finite data,
// the largest and smallest floats included.
func TestFirstNonFinite(t *testing.T) {
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0x7fc00001), math.Float32frombits(0xff800001)}
	for n := 0; n <= 13; n++ {
		xs := make([]float32, n)
		for i := range xs {
			xs[i] = []float32{0, -1.5, math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32}[i%5]
		}
		if got := firstNonFinite(FromFloat32([]int64{int64(n)}, xs)); got != -1 {
			t.Fatalf("n=%d finite: %d", n, got)
		}
		for at := 0; at < n; at++ {
			for _, b := range bad {
				ys := append([]float32(nil), xs...)
				ys[at] = b
				if at+1 < n {
					ys[n-1] = b // a later one does not hide the first
				}
				if got := firstNonFinite(FromFloat32([]int64{int64(n)}, ys)); got != at {
					t.Fatalf("n=%d bad %v at %d: got %d", n, b, at, got)
				}
			}
		}
	}
	var raw []byte
	for _, v := range []float64{1, 2, math.Inf(-1)} {
		raw = binary.LittleEndian.AppendUint64(raw, math.Float64bits(v))
	}
	if got := firstNonFinite(Tensor{DType: Float64, Shape: []int64{3}, Data: raw}); got != 2 {
		t.Fatalf("float64: %d", got)
	}
}

func BenchmarkFirstNonFiniteImage(b *testing.B) {
	t := FromFloat32([]int64{1, 3, 224, 224}, make([]float32, 3*224*224))
	b.SetBytes(int64(len(t.Data)))
	for b.Loop() {
		if firstNonFinite(t) != -1 {
			b.Fatal("finite")
		}
	}
}
