package serving

import (
	"testing"

	"github.com/fw-serve/fw/engine"
)

// FuzzReshape: whatever dims, reshape and tensor shape, a reshape that
// ReshapeFits accepts never panics and never changes a tensor's element
// count, and what it refuses is an *engine.InputError.
func FuzzReshape(f *testing.F) {
	f.Add([]byte{2, 4, 0, 6}, []byte{8, 0, 1, 6}, []byte{2, 4, 5, 6}, false)
	f.Add([]byte{3, 224, 224}, []byte{1, 3, 224, 224}, []byte{1, 3, 224, 224}, true)
	f.Add([]byte{0, 4, 4}, []byte{0, 16}, []byte{7, 4, 4}, false)
	f.Fuzz(func(t *testing.T, dims, reshape, shape []byte, batched bool) {
		conv := func(b []byte, zeroIsVar bool) []int64 {
			out := make([]int64, 0, len(b))
			for _, x := range b[:min(len(b), 8)] {
				d := int64(x)
				if zeroIsVar && d == 0 {
					d = -1
				}
				out = append(out, d)
			}
			return out
		}
		d, m := conv(dims, true), conv(reshape, true)
		if ReshapeFits(d, m) != nil {
			return
		}
		r := &Reshape{batched: batched, in: map[int]ReshapeTensor{0: {Index: 0, Dims: d, Model: m}},
			inputs: []engine.TensorSpec{{Name: "x", DType: engine.Uint8}}}
		s := conv(shape, false)
		n := engine.NumElements(s)
		if n < 0 || n > 1<<16 {
			return
		}
		in := engine.Tensor{DType: engine.Uint8, Shape: s, Data: make([]byte, n)}
		out, err := r.toModel([]engine.Tensor{in})
		if err != nil {
			if _, ok := err.(*engine.InputError); !ok {
				t.Fatalf("%T %v", err, err)
			}
			return
		}
		if got := engine.NumElements(out[0].Shape); got != n {
			t.Fatalf("dims %v reshape %v: %v (%d elements) became %v (%d)", d, m, s, n, out[0].Shape, got)
		}
	})
}
