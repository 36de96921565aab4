package engine

import "unsafe"

// bytesTensor views a typed slice as a Tensor without copying.
func bytesTensor[T any](dt DType, shape []int64, v []T) Tensor {
	var zero T
	if len(v) == 0 {
		return Tensor{DType: dt, Shape: shape, Data: []byte{}}
	}
	return Tensor{DType: dt, Shape: shape, Data: unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*int(unsafe.Sizeof(zero)))}
}
