package engine

import (
	"encoding/binary"
	"fmt"
	"math"
)

// String tensors hold Triton's serialized form in Data (see Tensor). The
// functions here are the one place that reads and writes it: the
// transports decode requests into it, the batcher joins and splits it,
// the engines convert it, all through them.

// StringHeader is the size of an element's length prefix.
const StringHeader = 4

// MaxStringBytes is the longest element the form can carry (its length
// prefix is 32 bits).
const MaxStringBytes = math.MaxUint32

// AppendString appends s to dst as one element of the serialized form.
// s must be at most MaxStringBytes long (every caller's input is bounded far
// below it: a request body, a message, an engine's output checked by
// FromStrings).
func AppendString[S ~string | ~[]byte](dst []byte, s S) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}

// nextString reads the element at data[off:]: its bytes are
// data[start:end], and the next element begins at end. The length prefix
// is trusted only once it is known to lie inside data.
func nextString(data []byte, off int) (start, end int, err error) {
	if len(data)-off < StringHeader {
		return 0, 0, fmt.Errorf("the data ends inside its 4-byte length")
	}
	l := binary.LittleEndian.Uint32(data[off:])
	start = off + StringHeader
	if uint64(l) > uint64(len(data)-start) {
		return 0, 0, fmt.Errorf("its length %d runs past the end of the data (%d bytes left)", l, len(data)-start)
	}
	return start, start + int(l), nil
}

// CheckStrings checks that data holds exactly n elements of the serialized
// form: each length prefix complete, each element inside data, no byte
// after the last. It reads at most len(data) bytes whatever n is, and
// allocates nothing.
func CheckStrings(data []byte, n int64) error {
	if n > int64(len(data))/StringHeader {
		return fmt.Errorf("%d elements need at least %d bytes (a 4-byte length each), the data has %d", n, satMul4(n), len(data))
	}
	end, err := skipStrings(data, 0, n)
	if err != nil {
		return err
	}
	if end != len(data) {
		return fmt.Errorf("%d bytes follow the %d elements of the shape", len(data)-end, n)
	}
	return nil
}

// skipStrings returns the offset after the n elements starting at data[off].
func skipStrings(data []byte, off int, n int64) (int, error) {
	for k := int64(0); k < n; k++ {
		_, end, err := nextString(data, off)
		if err != nil {
			return 0, fmt.Errorf("element %d: %w", k, err)
		}
		off = end
	}
	return off, nil
}

func satMul4(n int64) int64 {
	if n > math.MaxInt64/StringHeader {
		return math.MaxInt64
	}
	return n * StringHeader
}

// CountStrings is the number of elements of the serialized form in data,
// or an error when data does not end exactly after one.
func CountStrings(data []byte) (int64, error) {
	var n int64
	for off := 0; off < len(data); n++ {
		_, end, err := nextString(data, off)
		if err != nil {
			return 0, fmt.Errorf("element %d: %w", n, err)
		}
		off = end
	}
	return n, nil
}

// FromStrings builds a String tensor of shape holding elems in row-major
// order; their count must be the shape's.
func FromStrings[S ~string | ~[]byte](shape []int64, elems []S) (Tensor, error) {
	n, ok := CheckedElements(shape, math.MaxInt64)
	if !ok || n != int64(len(elems)) {
		return Tensor{}, &ShapeError{Shape: shape, DType: String, Reason: fmt.Sprintf("%d elements given", len(elems))}
	}
	size := int64(0)
	for _, s := range elems {
		if int64(len(s)) > MaxStringBytes {
			return Tensor{}, &ShapeError{Shape: shape, DType: String, Reason: fmt.Sprintf("an element of %d bytes, more than %d", len(s), int64(MaxStringBytes))}
		}
		size += StringHeader + int64(len(s))
	}
	if size > MaxTensorBytes {
		return Tensor{}, &ShapeError{Shape: shape, DType: String, Reason: fmt.Sprintf("more than %d bytes", int64(MaxTensorBytes))}
	}
	data := make([]byte, 0, size)
	for _, s := range elems {
		data = AppendString(data, s)
	}
	return Tensor{DType: String, Shape: append([]int64(nil), shape...), Data: data}, nil
}

// Strings returns t's elements as views of its Data (not copies), in
// row-major order, or an error when t is not a String tensor whose Data
// holds exactly its shape's elements.
func (t Tensor) Strings() ([][]byte, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	if t.DType != String {
		return nil, fmt.Errorf("a %s tensor has no strings", t.DType)
	}
	out := make([][]byte, 0, NumElements(t.Shape))
	for off := 0; off < len(t.Data); {
		start, end, _ := nextString(t.Data, off) // Check walked them
		out = append(out, t.Data[start:end:end])
		off = end
	}
	return out, nil
}

// Check reports whether t is well formed: a known dtype, no negative axis,
// and Data holding exactly what the shape needs (for String, exactly its
// elements in the serialized form). Every tensor a request carries is
// checked before the batcher or an engine sees it.
func (t Tensor) Check() error {
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("shape %s has a negative axis", FormatShape(t.Shape))
		}
	}
	if t.DType == String {
		n, ok := CheckedElements(t.Shape, int64(len(t.Data))/StringHeader)
		if !ok {
			return fmt.Errorf("shape %s holds more elements than %d bytes of data can (a 4-byte length each)", FormatShape(t.Shape), len(t.Data))
		}
		return CheckStrings(t.Data, n)
	}
	size := int64(t.DType.Size())
	if size == 0 {
		return fmt.Errorf("unsupported dtype %s", t.DType)
	}
	n, ok := CheckedElements(t.Shape, math.MaxInt64/size)
	if !ok || int64(len(t.Data)) != n*size {
		want := "more than any memory"
		if ok {
			want = fmt.Sprint(n * size)
		}
		return fmt.Errorf("data holds %d bytes, shape %s needs %s", len(t.Data), FormatShape(t.Shape), want)
	}
	return nil
}

// SplitShapes cuts t, read as its elements in row-major order whatever
// its shape, into consecutive parts of the given shapes (a ragged batch's
// output scattered back to its requests, each in the shape of its own
// input). The parts share t's Data and must use up exactly its elements.
// t must be well formed (Check).
func SplitShapes(t Tensor, shapes [][]int64) ([]Tensor, error) {
	total := NumElements(t.Shape)
	out := make([]Tensor, len(shapes))
	lo, used := 0, int64(0)
	for i, shape := range shapes {
		n, ok := CheckedElements(shape, total-used)
		if !ok {
			return nil, fmt.Errorf("the parts' shapes need more than the %d elements of a tensor of shape %s", total, FormatShape(t.Shape))
		}
		var hi int
		if t.DType == String {
			var err error
			if hi, err = skipStrings(t.Data, lo, n); err != nil {
				return nil, err
			}
		} else {
			hi = lo + int(n)*t.DType.Size()
		}
		used += n
		out[i] = Tensor{DType: t.DType, Shape: append([]int64(nil), shape...), Data: t.Data[lo:hi:hi]}
		lo = hi
	}
	if used != total {
		return nil, fmt.Errorf("the parts' shapes hold %d elements; the tensor of shape %s has %d", used, FormatShape(t.Shape), total)
	}
	return out, nil
}

// SplitRows cuts t along axis 0 into consecutive parts of rows[i] rows each,
// which must add up to t.Shape[0]. The parts share t's Data (a row is a
// contiguous range of it, for String as for the fixed-size types). t must
// be well formed (Check).
func SplitRows(t Tensor, rows []int) ([]Tensor, error) {
	if len(t.Shape) == 0 {
		return nil, fmt.Errorf("a scalar has no rows")
	}
	total := 0
	for _, r := range rows {
		if r < 0 {
			return nil, fmt.Errorf("a negative row count")
		}
		total += r
	}
	if int64(total) != t.Shape[0] {
		return nil, fmt.Errorf("%d rows asked of a tensor of shape %s", total, FormatShape(t.Shape))
	}
	per := NumElements(t.Shape[1:]) // elements per row
	out := make([]Tensor, len(rows))
	dims := make([]int64, len(rows)*len(t.Shape))
	lo := 0
	for i, r := range rows {
		shape := dims[:len(t.Shape):len(t.Shape)]
		dims = dims[len(t.Shape):]
		copy(shape, t.Shape)
		shape[0] = int64(r)
		var hi int
		if t.DType == String {
			var err error
			if hi, err = skipStrings(t.Data, lo, int64(r)*per); err != nil {
				return nil, err
			}
		} else {
			hi = lo + r*int(per)*t.DType.Size()
			if hi > len(t.Data) {
				return nil, fmt.Errorf("data holds %d bytes, shape %s needs more", len(t.Data), FormatShape(t.Shape))
			}
		}
		out[i] = Tensor{DType: t.DType, Shape: shape, Data: t.Data[lo:hi:hi]}
		lo = hi
	}
	return out, nil
}
