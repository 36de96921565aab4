// Package engine loads one exported model file (ONNX, TorchScript or
// dynamically quantized TorchScript, int8 ONNX) and runs batches on it through ONNX
// Runtime or libtorch. cgo stays inside this package: callers see the Backend
// interface, Tensor and Model only.
package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"unsafe"
)

// DType is a tensor element type. The numeric values are ONNX's
// TensorProto.DataType codes, shared with ONNX Runtime and the libtorch shim.
type DType int32

// The element types fw moves across its engines. ONNX Runtime takes every
// one of them; the libtorch shim takes the TorchTypes only (a model file
// declaring another is refused at load, naming the tensor and its type).
const (
	Invalid  DType = 0
	Float32  DType = 1
	Uint8    DType = 2
	Int8     DType = 3
	Uint16   DType = 4
	Int16    DType = 5
	Int32    DType = 6
	Int64    DType = 7
	String   DType = 8 // variable-length byte strings, V2's BYTES: see Tensor
	Bool     DType = 9
	Float16  DType = 10
	Float64  DType = 11
	Uint32   DType = 12
	Uint64   DType = 13
	BFloat16 DType = 16
)

var dtypeNames = map[DType]string{
	Float32: "float32", Float64: "float64", Float16: "float16", BFloat16: "bfloat16",
	Int64: "int64", Int32: "int32", Int16: "int16", Int8: "int8",
	Uint64: "uint64", Uint32: "uint32", Uint16: "uint16", Uint8: "uint8",
	Bool: "bool", String: "string",
}

// TorchTypes are the element types the libtorch shim (TorchScript and
// AOTInductor files) moves: cmake/fwtorch.cpp's to_scalar and from_scalar.
var TorchTypes = []DType{Float32, Float64, Float16, Int64, Int32, Int8, Uint8, Bool}

// Known reports whether d is one of fw's element types.
func (d DType) Known() bool {
	_, ok := dtypeNames[d]
	return ok
}

// String returns the name used in fw.json and in API responses ("float32").
func (d DType) String() string {
	if s, ok := dtypeNames[d]; ok {
		return s
	}
	return fmt.Sprintf("dtype(%d)", int32(d))
}

// Size is the width of one element in bytes: 0 for Invalid, and for
// String, whose elements have no fixed width (see Tensor).
func (d DType) Size() int {
	switch d {
	case Float64, Int64, Uint64:
		return 8
	case Float32, Int32, Uint32:
		return 4
	case Float16, BFloat16, Int16, Uint16:
		return 2
	case Uint8, Int8, Bool:
		return 1
	}
	return 0
}

// IsFloat reports whether d holds floating-point values (and so NaN or Inf).
func (d DType) IsFloat() bool {
	return d == Float32 || d == Float64 || d == Float16 || d == BFloat16
}

// ParseDType maps a dtype name ("float32", "float", "int64", "FP32", ...) to a DType.
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(s) {
	case "float32", "float", "fp32":
		return Float32, nil
	case "float64", "double", "fp64":
		return Float64, nil
	case "float16", "half", "fp16":
		return Float16, nil
	case "bfloat16", "bf16":
		return BFloat16, nil
	case "int64", "long":
		return Int64, nil
	case "int32", "int":
		return Int32, nil
	case "int16", "short":
		return Int16, nil
	case "int8":
		return Int8, nil
	case "uint64":
		return Uint64, nil
	case "uint32":
		return Uint32, nil
	case "uint16":
		return Uint16, nil
	case "uint8":
		return Uint8, nil
	case "bool":
		return Bool, nil
	case "string", "bytes":
		return String, nil
	}
	return Invalid, fmt.Errorf("unknown dtype %q (known: float32, float64, float16, bfloat16, int64, int32, int16, int8, uint64, uint32, uint16, uint8, bool, string)", s)
}

// TensorSpec describes one model input or output. Shape includes the batch
// axis first; -1 marks a dynamic axis. DType Invalid and an empty Shape mean
// unknown (TorchScript files without fw.json): the model itself checks them.
type TensorSpec struct {
	Name  string  `json:"name"`
	DType DType   `json:"-"`
	Shape []int64 `json:"shape"`
	// Optional marks an input a request may leave out (Triton's
	// optional: true; Python models only): its tensor in the request is
	// then the zero Tensor (Absent).
	Optional bool `json:"optional,omitempty"`
}

// Tensor is a dense tensor whose elements are stored little-endian in Data,
// row-major. Data may alias memory owned by the caller.
//
// A String tensor (V2's BYTES) stores its elements in Data the way Triton
// serializes them on the wire: for each element in row-major order, its
// length as 4 bytes little-endian, then that many bytes (any bytes: UTF-8
// is not required). It is the form of the binary tensor data extension, of
// gRPC's raw contents and of shared memory, so those decode without a copy;
// a batch of requests is the concatenation of their Data, as for the
// fixed-size types; and a row is a contiguous range of Data (SplitRows).
// The form is bounded by construction: every element takes at least 4
// bytes, so a shape cannot claim more than len(Data)/4 elements, and no
// length is trusted before CheckStrings has walked it inside Data. Every
// tensor taken from a request passes Check (exactly NumElements(Shape)
// elements, nothing after them) before it reaches the batcher or an engine.
type Tensor struct {
	DType DType
	Shape []int64
	Data  []byte
}

// SpecIndex is the index of the spec named name in specs, -1 when none is.
func SpecIndex(specs []TensorSpec, name string) int {
	for i, sp := range specs {
		if sp.Name == name {
			return i
		}
	}
	return -1
}

// Absent reports whether t is the zero Tensor: an optional input the
// request left out (TensorSpec.Optional).
func (t Tensor) Absent() bool { return t.DType == Invalid && t.Shape == nil && t.Data == nil }

// NumElements is the product of the shape (1 for a scalar). It does not
// check for negative axes or overflow: use it on shapes already checked
// (ShapeBytes, NewTensor), never on one taken straight from a request.
func NumElements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// MaxTensorBytes bounds the data of one tensor NewTensor allocates (64 GiB).
// It only keeps a shape from overflowing an allocation; the HTTP layer checks
// requests against its much smaller configured limits first.
const MaxTensorBytes = 1 << 36

// ShapeError reports a shape that no tensor can have: a negative axis, or an
// element count or byte size that overflows or exceeds the allowed maximum.
type ShapeError struct {
	Shape  []int64
	DType  DType
	Reason string
}

// Error names the shape and what is wrong with it.
func (e *ShapeError) Error() string {
	return fmt.Sprintf("tensor shape %v of %s: %s", e.Shape, e.DType, e.Reason)
}

// CheckedElements returns the product of shape (1 for a scalar), or ok false
// when an axis is negative or the product exceeds max. It never overflows.
func CheckedElements(shape []int64, max int64) (n int64, ok bool) {
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
	}
	for _, d := range shape {
		if d == 0 {
			return 0, max >= 0
		}
	}
	n = 1
	for _, d := range shape {
		if n > max/d {
			return 0, false
		}
		n *= d
	}
	return n, n <= max
}

// ShapeBytes returns the bytes a tensor of dt and shape holds, or a
// *ShapeError when an axis is negative or the size exceeds MaxTensorBytes.
func ShapeBytes(dt DType, shape []int64) (int64, error) {
	for _, d := range shape {
		if d < 0 {
			return 0, &ShapeError{Shape: shape, DType: dt, Reason: fmt.Sprintf("axis %d is negative", d)}
		}
	}
	size := int64(dt.Size())
	if size == 0 {
		size = 1 // an unknown dtype holds no data, but its shape must still be sane
	}
	n, ok := CheckedElements(shape, MaxTensorBytes/size)
	if !ok {
		return 0, &ShapeError{Shape: shape, DType: dt, Reason: fmt.Sprintf("more than %d bytes", int64(MaxTensorBytes))}
	}
	return n * int64(dt.Size()), nil
}

// NewTensor allocates a zeroed tensor of the given type and shape (for
// String, empty strings). A negative axis or a size beyond MaxTensorBytes
// is a *ShapeError, never a panic.
func NewTensor(dt DType, shape []int64) (Tensor, error) {
	if dt == String {
		n, ok := CheckedElements(shape, MaxTensorBytes/StringHeader)
		if !ok {
			return Tensor{}, &ShapeError{Shape: shape, DType: dt, Reason: fmt.Sprintf("more than %d bytes", int64(MaxTensorBytes))}
		}
		return Tensor{DType: dt, Shape: append([]int64(nil), shape...), Data: make([]byte, n*StringHeader)}, nil
	}
	n, err := ShapeBytes(dt, shape)
	if err != nil {
		return Tensor{}, err
	}
	return Tensor{DType: dt, Shape: append([]int64(nil), shape...), Data: alignedBytes(int(n))}, nil
}

// alignedBytes returns n zero bytes aligned for 8-byte element access.
func alignedBytes(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	words := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
}

// FromFloat32 wraps v (not copied) as a float32 tensor of the given shape.
func FromFloat32(shape []int64, v []float32) Tensor {
	var b []byte
	if len(v) > 0 {
		b = unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*4)
	}
	return Tensor{DType: Float32, Shape: shape, Data: b}
}

// FromInt64 wraps v (not copied) as an int64 tensor of the given shape.
func FromInt64(shape []int64, v []int64) Tensor {
	var b []byte
	if len(v) > 0 {
		b = unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*8)
	}
	return Tensor{DType: Int64, Shape: shape, Data: b}
}

// Float32s views the data of a float32 tensor as []float32 without copying.
// The slice aliases Data; it is nil for other dtypes.
func (t Tensor) Float32s() []float32 {
	if t.DType != Float32 || len(t.Data) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&t.Data[0])), len(t.Data)/4)
}

// Int64s views the data of an int64 tensor as []int64 without copying.
func (t Tensor) Int64s() []int64 {
	if t.DType != Int64 || len(t.Data) < 8 {
		return nil
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(&t.Data[0])), len(t.Data)/8)
}

// At returns element i converted to float64, whatever the fixed-size dtype
// (NaN for String: see Strings). Int64 and Uint64 values beyond 2^53 are
// rounded.
func (t Tensor) At(i int) float64 {
	b := t.Data
	switch t.DType {
	case Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i*4:])))
	case Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b[i*8:]))
	case Float16:
		return float64(HalfToFloat32(binary.LittleEndian.Uint16(b[i*2:])))
	case BFloat16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[i*2:])) << 16))
	case Int64:
		return float64(int64(binary.LittleEndian.Uint64(b[i*8:])))
	case Int32:
		return float64(int32(binary.LittleEndian.Uint32(b[i*4:])))
	case Int16:
		return float64(int16(binary.LittleEndian.Uint16(b[i*2:])))
	case Int8:
		return float64(int8(b[i]))
	case Uint64:
		return float64(binary.LittleEndian.Uint64(b[i*8:]))
	case Uint32:
		return float64(binary.LittleEndian.Uint32(b[i*4:]))
	case Uint16:
		return float64(binary.LittleEndian.Uint16(b[i*2:]))
	case Uint8, Bool:
		return float64(b[i])
	}
	return math.NaN()
}

// Len is the number of elements the data holds (for String, the elements
// its shape gives; Check says whether Data holds them).
func (t Tensor) Len() int {
	if t.DType == String {
		return int(NumElements(t.Shape))
	}
	if s := t.DType.Size(); s > 0 {
		return len(t.Data) / s
	}
	return 0
}

// HalfToFloat32 converts an IEEE 754 binary16 value to float32.
func HalfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		e := uint32(127 - 15 + 1)
		for frac&0x400 == 0 {
			frac <<= 1
			e--
		}
		frac &= 0x3ff
		return math.Float32frombits(sign | e<<23 | frac<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
}

// Float32ToHalf converts a float32 to IEEE 754 binary16, rounding to nearest even.
func Float32ToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23&0xff) - 127 + 15
	frac := b & 0x7fffff
	switch {
	case b&0x7fffffff > 0x7f800000: // NaN
		return sign | 0x7e00
	case exp >= 0x1f:
		return sign | 0x7c00
	case exp <= 0:
		if exp < -10 {
			return sign
		}
		frac |= 0x800000
		shift := uint32(14 - exp)
		half := uint16(frac >> shift)
		rem := frac & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || (rem == mid && half&1 == 1) {
			half++
		}
		return sign | half
	}
	half := sign | uint16(exp)<<10 | uint16(frac>>13)
	rem := frac & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && half&1 == 1) {
		half++
	}
	return half
}

// Float32ToBFloat16 converts a float32 to bfloat16 (its top 16 bits),
// rounding to nearest even; NaN stays NaN.
func Float32ToBFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40 // quiet NaN
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// FormatShape renders a shape the way error messages show it: [-1, 64] as [N, 64].
func FormatShape(shape []int64) string {
	var sb strings.Builder
	sb.WriteByte('[')
	for i, d := range shape {
		if i > 0 {
			sb.WriteString(", ")
		}
		if d < 0 {
			if i == 0 {
				sb.WriteByte('N')
			} else {
				sb.WriteByte('?')
			}
			continue
		}
		fmt.Fprintf(&sb, "%d", d)
	}
	sb.WriteByte(']')
	return sb.String()
}
