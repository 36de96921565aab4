package httpapi

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"unsafe"

	"github.com/fw-serve/fw/engine"
	"github.com/valyala/fastjson"
)

// maxDepth bounds the nesting of a JSON tensor (rank 8 plus the batch axis).
const maxDepth = 9

// decodeRows reads v, a JSON array with one entry per sample (nested to any
// depth), into a tensor of spec's dtype. Each row is either nested exactly to
// the spec's per-sample shape or holds the same number of numbers (it is then
// reshaped). Errors are 422s that name the row and say what was expected.
//
// The rows are counted (up to maxRows+1) before anything is allocated, and
// the tensor is allocated once, when the count of numbers the rows must hold
// fits in v: each number takes at least two bytes of JSON ("1,"), so the
// buffer is at most 4 times v's size (8-byte dtypes) and a body that claims
// more is refused while it is read, without the allocation.
func decodeRows(v jv, spec engine.TensorSpec, maxRows int) (engine.Tensor, *APIError) {
	name := spec.Name
	if v.Type() != fastjson.TypeArray {
		return engine.Tensor{}, invalidInput(fmt.Sprintf("input %q must be a JSON array of rows, got %s", name, v.Type()), spec, nil)
	}
	limit := -1
	if maxRows > 0 {
		limit = maxRows
	}
	rows := v.count(limit)
	if rows == 0 {
		return engine.Tensor{}, invalidInput(fmt.Sprintf("input %q has no rows: send at least one", name), spec, []int64{0})
	}
	if maxRows > 0 && rows > maxRows {
		rows = v.count(-1) // no allocation: the exact count for the message
		return engine.Tensor{}, &APIError{Status: 413, Code: CodeTooLarge,
			Message: fmt.Sprintf("%d rows exceed the limit of %d per request (--max-rows); split the request or use /predict/batch", rows, maxRows),
			Details: map[string]any{"rows": rows, "max_rows": maxRows}}
	}
	// The first row fixes the nested shape every row must have.
	var first jv
	v.forEach(func(_ int, e jv) bool { first = e; return false })
	rowShape, aerr := nestedShape(first, name)
	if aerr != nil {
		return engine.Tensor{}, aerr
	}
	per := satProduct(rowShape)
	dt := spec.DType
	if dt == engine.Invalid {
		dt = engine.Float32
	}
	sample, ok := sampleShape(spec, rowShape)
	if !ok {
		got := append([]int64{int64(rows)}, rowShape...)
		var want []int64
		if len(spec.Shape) > 0 {
			want = spec.Shape[1:]
		}
		return engine.Tensor{}, invalidInput(fmt.Sprintf("input %q: each row must have the per-sample shape %s or hold %d numbers", name, engine.FormatShape(want), satProduct(fixedPart(want))), spec, got)
	}
	total := satMul(per, int64(rows))
	w := rowWriter{b: v, dt: dt, name: name}
	var t engine.Tensor
	if total <= int64(len(v)+1)/2 { // else some row is not shaped like row 0: walk to find it
		t = allocTensor(dt, append([]int64{int64(rows)}, sample...), int(total))
		w.data, w.cap = t.Data, int(total)
		if dt == engine.String {
			w.str = make([]byte, 0, len(v))
		}
	}
	i := skipWS(v, 1)
	for r := 0; r < rows; r++ {
		start := w.n
		end, aerr := w.walk(i, rowShape, 0, r)
		if aerr != nil {
			return engine.Tensor{}, aerr
		}
		if int64(w.n-start) != per {
			return engine.Tensor{}, invalidInput(fmt.Sprintf("input %q: row %d is not shaped like row 0 (%s)", name, r, engine.FormatShape(rowShape)), spec, nil)
		}
		i = skipWS(v, end)
		if i < len(v) && v[i] == ',' {
			i = skipWS(v, i+1)
		}
	}
	if w.cap == 0 && total > 0 || int64(w.n) != total {
		return engine.Tensor{}, invalidInput(fmt.Sprintf("input %q: rows are ragged", name), spec, nil)
	}
	if dt == engine.String {
		t.Data = w.str
	}
	return t, nil
}

// allocTensor makes a zeroed tensor of n elements (n already checked against
// the request), aligned for 8-byte element access.
func allocTensor(dt engine.DType, shape []int64, n int) engine.Tensor {
	if dt == engine.String { // its elements are appended as they are read
		return engine.Tensor{DType: dt, Shape: shape, Data: []byte{}}
	}
	return engine.Tensor{DType: dt, Shape: shape, Data: alignedBytes(n * dt.Size())}
}

// alignedBytes returns n zero bytes aligned for 8-byte element access.
func alignedBytes(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	words := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
}

// satMul is a*b for non-negative a and b, saturating at MaxInt64.
func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

// satProduct is the product of non-negative dims, saturating at MaxInt64.
func satProduct(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n = satMul(n, d)
	}
	return n
}

func fixedPart(s []int64) []int64 {
	out := make([]int64, 0, len(s))
	for _, d := range s {
		if d > 0 {
			out = append(out, d)
		}
	}
	return out
}

// sampleShape decides the per-sample shape: the row's own nesting when it
// fits the spec, else the spec's shape when the element counts agree. An
// empty shape is valid: rows of plain numbers for a [N] input.
func sampleShape(spec engine.TensorSpec, row []int64) ([]int64, bool) {
	if len(spec.Shape) == 0 { // unknown (TorchScript without fw.json): trust the client
		return row, true
	}
	want := spec.Shape[1:]
	if len(want) == len(row) {
		ok := true
		for i := range want {
			if want[i] > 0 && want[i] != row[i] {
				ok = false
			}
		}
		if ok {
			return row, true
		}
	}
	dyn := false
	for _, d := range want {
		if d <= 0 {
			dyn = true
		}
	}
	if n := satProduct(want); !dyn && n < math.MaxInt64 && n == satProduct(row) {
		return want, true
	}
	return nil, false
}

// nestedShape measures a row by following the first element at each depth.
func nestedShape(v jv, name string) ([]int64, *APIError) {
	var shape []int64
	for depth := 0; v.Type() == fastjson.TypeArray; depth++ {
		if depth >= maxDepth {
			return nil, &APIError{Status: 422, Code: CodeInvalidInput, Message: fmt.Sprintf("input %q is nested deeper than %d levels", name, maxDepth)}
		}
		n := v.count(-1)
		if n == 0 {
			return nil, &APIError{Status: 422, Code: CodeInvalidInput, Message: fmt.Sprintf("input %q contains an empty array", name)}
		}
		shape = append(shape, int64(n))
		v.forEach(func(_ int, e jv) bool { v = e; return false })
	}
	return shape, nil
}

// rowWriter reads rows from b into data, a buffer of cap elements of dt;
// with cap 0 it only counts (and checks) the numbers. BYTES rows hold JSON
// strings, appended to str in engine's serialized form (see strings.go).
type rowWriter struct {
	b    jv
	dt   engine.DType
	data []byte
	str  []byte // BYTES: the elements' serialized form, appended as read
	cap  int
	n    int
	name string
}

func (w *rowWriter) ragged(row int, shape []int64) *APIError {
	return &APIError{Status: 422, Code: CodeInvalidInput,
		Message: fmt.Sprintf("input %q: row %d is ragged: every row must be nested like row 0, with shape %s", w.name, row, engine.FormatShape(shape)),
		Details: map[string]any{"row": row}}
}

// walk reads the value at b[i], which must be nested as shape[depth:], and
// returns its end.
func (w *rowWriter) walk(i int, shape []int64, depth int, row int) (int, *APIError) {
	b := w.b
	if depth == len(shape) {
		return w.put(i, row)
	}
	if i >= len(b) || b[i] != '[' {
		return i, w.ragged(row, shape)
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i, w.ragged(row, shape)
	}
	for k := int64(0); ; k++ {
		if k >= shape[depth] {
			return i, w.ragged(row, shape)
		}
		end, aerr := w.walk(i, shape, depth+1, row)
		if aerr != nil {
			return end, aerr
		}
		i = skipWS(b, end)
		if i < len(b) && b[i] == ',' {
			i = skipWS(b, i+1)
			continue
		}
		if k+1 != shape[depth] {
			return i, w.ragged(row, shape)
		}
		return i + 1, nil // the ']'
	}
}

// put reads the scalar at b[i] into element w.n and returns its end.
func (w *rowWriter) put(i int, row int) (int, *APIError) {
	b := w.b
	if w.dt == engine.String {
		e, err := scanValue(b, i, 0)
		if err != nil {
			e = len(b)
		}
		v := jv(b[i:e])
		if v.Type() != fastjson.TypeString {
			return e, &APIError{Status: 422, Code: CodeInvalidInput,
				Message: fmt.Sprintf("input %q: row %d holds a %s where a string belongs (the input is BYTES); send strings only", w.name, row, v.Type()),
				Details: map[string]any{"row": row, "received": v.Type().String()}}
		}
		if k := w.n; k < w.cap {
			if w.str, err = appendStringElement(w.str, v); err != nil {
				return e, newError(400, CodeInvalidJSON, fmt.Sprintf("the body is not valid JSON: input %q row %d: %v", w.name, row, err), nil)
			}
		}
		w.n++
		return e, nil
	}
	if w.dt.IsFloat() { // the common case, read in one pass
		if f, end, ok := fastFloat(b, i); ok {
			if k := w.n; k < w.cap {
				putFloat(w.data, k, w.dt, f)
			}
			w.n++
			return end, nil
		}
	}
	end := numberEnd(b, i)
	if end == i {
		var e int
		var err error
		if e, err = scanValue(b, i, 0); err != nil {
			e = len(b)
		}
		v := jv(b[i:e])
		ty := v.Type()
		if w.dt == engine.Bool && (ty == fastjson.TypeTrue || ty == fastjson.TypeFalse) {
			if k := w.n; k < w.cap {
				w.data[k] = 0
				if ty == fastjson.TypeTrue {
					w.data[k] = 1
				}
			}
			w.n++
			return e, nil
		}
		return e, &APIError{Status: 422, Code: CodeInvalidInput,
			Message: fmt.Sprintf("input %q: row %d holds a %s where a number belongs; send numbers only", w.name, row, ty),
			Details: map[string]any{"row": row, "received": ty.String()}}
	}
	v := jv(b[i:end])
	k := w.n
	w.n++
	if k >= w.cap {
		if _, ok := v.float(); !ok {
			return end, notANumber(v)
		}
		return end, nil // counted; the caller reports the size mismatch
	}
	if w.dt.IsFloat() {
		f, ok := v.float()
		if !ok {
			return end, notANumber(v)
		}
		putFloat(w.data, k, w.dt, f)
		return end, nil
	}
	bits, ok, inRange := parseInt(v, w.dt)
	if !ok {
		return end, &APIError{Status: 422, Code: CodeInvalidInput,
			Message: fmt.Sprintf("input %q takes %s values; row %d holds %s", w.name, w.dt, row, v),
			Details: map[string]any{"row": row}}
	}
	if !inRange {
		n, _ := v.int()
		return end, rangeErr(w.name, w.dt, row, n)
	}
	putInt(w.data, k, w.dt, bits)
	return end, nil
}

// notANumber answers a token that the loose number grammar let through but
// that is not a number (such as "1-2").
func notANumber(v jv) *APIError {
	return newError(400, CodeInvalidJSON, fmt.Sprintf("the body is not valid JSON: %q is not a number", v), nil)
}

func putU32(b []byte, v uint32) {
	_ = b[3]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

func rangeErr(name string, dt engine.DType, row int, n int64) *APIError {
	return &APIError{Status: 422, Code: CodeInvalidInput,
		Message: fmt.Sprintf("input %q takes %s values; row %d holds %d, out of range", name, dt, row, n),
		Details: map[string]any{"row": row}}
}

func putU64(b []byte, v uint64) {
	_ = b[7]
	for k := 0; k < 8; k++ {
		b[k] = byte(v >> (8 * k))
	}
}

func invalidInput(msg string, spec engine.TensorSpec, got []int64) *APIError {
	d := map[string]any{"input": spec.Name, "expected_shape": engine.FormatShape(spec.Shape)}
	if spec.DType != engine.Invalid {
		d["expected_dtype"] = spec.DType.String()
	}
	if got != nil {
		d["received_shape"] = engine.FormatShape(got)
	}
	return &APIError{Status: 422, Code: CodeInvalidInput, Message: msg, Details: d}
}

// appendRows writes a tensor as a JSON array with one entry per row, each
// nested to the per-sample shape. NaN and Inf become null (JSON has
// neither); BYTES elements are strings.
func appendRows(b []byte, t engine.Tensor, from, to int) []byte {
	per := 1
	for _, d := range t.Shape[1:] {
		per *= int(d)
	}
	elem := elementWriter(t)
	b = append(b, '[')
	for r := from; r < to; r++ {
		if r > from {
			b = append(b, ',')
		}
		b = appendNested(b, elem, t.Shape[1:], r*per)
	}
	return append(b, ']')
}

// elementWriter returns the function that writes element i of t as JSON.
func elementWriter(t engine.Tensor) func(b []byte, i int) []byte {
	if t.DType != engine.String {
		return func(b []byte, i int) []byte { return appendValue(b, t, i) }
	}
	elems, err := t.Strings()
	if err != nil { // the batcher checked every output: unreachable
		elems = make([][]byte, t.Len())
	}
	return func(b []byte, i int) []byte { return appendJSONBytes(b, elems[i]) }
}

func appendNested(b []byte, elem func([]byte, int) []byte, shape []int64, off int) []byte {
	if len(shape) == 0 {
		return elem(b, off)
	}
	stride := 1
	for _, d := range shape[1:] {
		stride *= int(d)
	}
	b = append(b, '[')
	for i := 0; i < int(shape[0]); i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendNested(b, elem, shape[1:], off+i*stride)
	}
	return append(b, ']')
}

func appendValue(b []byte, t engine.Tensor, i int) []byte {
	switch t.DType {
	case engine.Float32:
		f := float64(t.Float32s()[i])
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return append(b, "null"...)
		}
		return strconv.AppendFloat(b, f, 'g', -1, 32)
	case engine.Int64:
		return strconv.AppendInt(b, t.Int64s()[i], 10)
	case engine.Uint64:
		return strconv.AppendUint(b, binary.LittleEndian.Uint64(t.Data[i*8:]), 10)
	case engine.Bool:
		if t.Data[i] != 0 {
			return append(b, "true"...)
		}
		return append(b, "false"...)
	}
	f := t.At(i)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	if t.DType.IsFloat() {
		bits := 64
		if t.DType == engine.Float16 || t.DType == engine.BFloat16 {
			bits = 32
		}
		return strconv.AppendFloat(b, f, 'g', -1, bits)
	}
	return strconv.AppendInt(b, int64(f), 10)
}

// putFloat writes f as element k of d, a buffer of dt (FP32, FP64, FP16 or
// BF16).
func putFloat(d []byte, k int, dt engine.DType, f float64) {
	switch dt {
	case engine.Float32:
		putU32(d[k*4:], math.Float32bits(float32(f)))
	case engine.Float64:
		putU64(d[k*8:], math.Float64bits(f))
	case engine.BFloat16:
		h := engine.Float32ToBFloat16(float32(f))
		d[k*2], d[k*2+1] = byte(h), byte(h>>8)
	default:
		h := engine.Float32ToHalf(float32(f))
		d[k*2], d[k*2+1] = byte(h), byte(h>>8)
	}
}

// parseInt reads v as an integer of dt, returning its two's complement
// bits; inRange is false when it is an integer outside dt's range, ok
// false when it is not an integer.
func parseInt(v jv, dt engine.DType) (bits uint64, ok, inRange bool) {
	n, ok := v.int()
	if !ok {
		if dt == engine.Uint64 { // beyond int64
			u, err := strconv.ParseUint(unsafeString(v), 10, 64)
			return u, err == nil, err == nil
		}
		return 0, false, false
	}
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	switch dt {
	case engine.Int32:
		lo, hi = math.MinInt32, math.MaxInt32
	case engine.Int16:
		lo, hi = math.MinInt16, math.MaxInt16
	case engine.Int8:
		lo, hi = math.MinInt8, math.MaxInt8
	case engine.Uint64:
		lo = 0
	case engine.Uint32:
		lo, hi = 0, math.MaxUint32
	case engine.Uint16:
		lo, hi = 0, math.MaxUint16
	case engine.Uint8:
		lo, hi = 0, math.MaxUint8
	case engine.Bool:
		lo, hi = 0, 1
	}
	return uint64(n), true, n >= lo && n <= hi
}

// putInt writes the bits of an integer as element k of d, a buffer of dt.
func putInt(d []byte, k int, dt engine.DType, bits uint64) {
	switch dt.Size() {
	case 8:
		putU64(d[k*8:], bits)
	case 4:
		putU32(d[k*4:], uint32(bits))
	case 2:
		d[k*2], d[k*2+1] = byte(bits), byte(bits>>8)
	case 1:
		d[k] = byte(bits)
	}
}
