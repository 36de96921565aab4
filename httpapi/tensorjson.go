package httpapi

import (
	"fmt"
	"math"
	"strconv"

	"github.com/fw-serve/fw/engine"
	"github.com/valyala/fastjson"
)

// maxDepth bounds the nesting of a JSON tensor (rank 8 plus the batch axis).
const maxDepth = 9

// decodeRows reads v, a JSON array with one entry per sample (nested to any
// depth), into a tensor of spec's dtype. Each row is either nested exactly to
// the spec's per-sample shape or holds the same number of numbers (it is then
// reshaped). Errors are 422s that name the row and say what was expected.
func decodeRows(v *fastjson.Value, spec engine.TensorSpec, maxRows int) (engine.Tensor, *APIError) {
	name := spec.Name
	arr, err := v.Array()
	if err != nil {
		return engine.Tensor{}, invalidInput(fmt.Sprintf("input %q must be a JSON array of rows, got %s", name, v.Type()), spec, nil)
	}
	if len(arr) == 0 {
		return engine.Tensor{}, invalidInput(fmt.Sprintf("input %q has no rows: send at least one", name), spec, []int64{0})
	}
	if maxRows > 0 && len(arr) > maxRows {
		return engine.Tensor{}, &APIError{Status: 413, Code: CodeTooLarge,
			Message: fmt.Sprintf("%d rows exceed the limit of %d per request (--max-rows); split the request or use /predict/batch", len(arr), maxRows),
			Details: map[string]any{"rows": len(arr), "max_rows": maxRows}}
	}
	// The first row fixes the nested shape every row must have.
	rowShape, aerr := nestedShape(arr[0], name, 0)
	if aerr != nil {
		return engine.Tensor{}, aerr
	}
	per := engine.NumElements(rowShape)
	dt := spec.DType
	if dt == engine.Invalid {
		dt = engine.Float32
	}
	sample, ok := sampleShape(spec, rowShape)
	if !ok {
		got := append([]int64{int64(len(arr))}, rowShape...)
		var want []int64
		if len(spec.Shape) > 0 {
			want = spec.Shape[1:]
		}
		return engine.Tensor{}, invalidInput(fmt.Sprintf("input %q: each row must have the per-sample shape %s or hold %d numbers", name, engine.FormatShape(want), engine.NumElements(fixedPart(want))), spec, got)
	}
	total := int(per) * len(arr)
	t, err := engine.NewTensor(dt, append([]int64{int64(len(arr))}, sample...))
	if err != nil {
		return engine.Tensor{}, invalidInput(fmt.Sprintf("input %q: %v", name, err), spec, nil)
	}
	w := writer{t: t}
	for i, row := range arr {
		start := w.n
		if aerr := w.walk(row, rowShape, 0, name, i); aerr != nil {
			return engine.Tensor{}, aerr
		}
		if w.n-start != int(per) {
			return engine.Tensor{}, invalidInput(fmt.Sprintf("input %q: row %d is not shaped like row 0 (%s)", name, i, engine.FormatShape(rowShape)), spec, nil)
		}
	}
	if w.n != total {
		return engine.Tensor{}, invalidInput(fmt.Sprintf("input %q: rows are ragged", name), spec, nil)
	}
	return t, nil
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
	if !dyn && engine.NumElements(want) == engine.NumElements(row) {
		return want, true
	}
	return nil, false
}

// nestedShape measures a row by following the first element at each depth.
func nestedShape(v *fastjson.Value, name string, depth int) ([]int64, *APIError) {
	var shape []int64
	for v.Type() == fastjson.TypeArray {
		if depth >= maxDepth {
			return nil, &APIError{Status: 422, Code: CodeInvalidInput, Message: fmt.Sprintf("input %q is nested deeper than %d levels", name, maxDepth)}
		}
		a, _ := v.Array()
		if len(a) == 0 {
			return nil, &APIError{Status: 422, Code: CodeInvalidInput, Message: fmt.Sprintf("input %q contains an empty array", name)}
		}
		shape = append(shape, int64(len(a)))
		v = a[0]
		depth++
	}
	return shape, nil
}

type writer struct {
	t engine.Tensor
	n int
}

func (w *writer) walk(v *fastjson.Value, shape []int64, depth int, name string, row int) *APIError {
	if depth == len(shape) {
		return w.put(v, name, row)
	}
	a, err := v.Array()
	if err != nil || int64(len(a)) != shape[depth] {
		return &APIError{Status: 422, Code: CodeInvalidInput,
			Message: fmt.Sprintf("input %q: row %d is ragged: every row must be nested like row 0, with shape %s", name, row, engine.FormatShape(shape)),
			Details: map[string]any{"row": row}}
	}
	for _, e := range a {
		if aerr := w.walk(e, shape, depth+1, name, row); aerr != nil {
			return aerr
		}
	}
	return nil
}

func (w *writer) put(v *fastjson.Value, name string, row int) *APIError {
	if w.t.DType == engine.Bool && (v.Type() == fastjson.TypeTrue || v.Type() == fastjson.TypeFalse) {
		if i := w.n; i < w.t.Len() {
			w.t.Data[i] = 0
			if v.Type() == fastjson.TypeTrue {
				w.t.Data[i] = 1
			}
		}
		w.n++
		return nil
	}
	if v.Type() != fastjson.TypeNumber {
		return &APIError{Status: 422, Code: CodeInvalidInput,
			Message: fmt.Sprintf("input %q: row %d holds a %s where a number belongs; send numbers only", name, row, v.Type()),
			Details: map[string]any{"row": row, "received": v.Type().String()}}
	}
	i := w.n
	w.n++
	if i >= w.t.Len() {
		return nil // counted; the caller reports the size mismatch
	}
	t := w.t
	switch t.DType {
	case engine.Float32:
		f, _ := v.Float64()
		t.Float32s()[i] = float32(f)
	case engine.Float64:
		f, _ := v.Float64()
		putU64(t.Data[i*8:], math.Float64bits(f))
	case engine.Float16:
		f, _ := v.Float64()
		h := engine.Float32ToHalf(float32(f))
		t.Data[i*2], t.Data[i*2+1] = byte(h), byte(h>>8)
	case engine.Int64, engine.Int32, engine.Int8, engine.Uint8, engine.Bool:
		n, err := v.Int64()
		if err != nil {
			f, ferr := v.Float64()
			if ferr != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
				return &APIError{Status: 422, Code: CodeInvalidInput,
					Message: fmt.Sprintf("input %q takes %s values; row %d holds %s", name, t.DType, row, v.String()),
					Details: map[string]any{"row": row}}
			}
			n = int64(f)
		}
		switch t.DType {
		case engine.Int64:
			t.Int64s()[i] = n
		case engine.Int32:
			if n < math.MinInt32 || n > math.MaxInt32 {
				return rangeErr(name, t.DType, row, n)
			}
			u := uint32(int32(n))
			t.Data[i*4], t.Data[i*4+1], t.Data[i*4+2], t.Data[i*4+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		case engine.Int8:
			if n < math.MinInt8 || n > math.MaxInt8 {
				return rangeErr(name, t.DType, row, n)
			}
			t.Data[i] = byte(int8(n))
		case engine.Uint8:
			if n < 0 || n > math.MaxUint8 {
				return rangeErr(name, t.DType, row, n)
			}
			t.Data[i] = byte(n)
		case engine.Bool:
			if n != 0 && n != 1 {
				return rangeErr(name, t.DType, row, n)
			}
			t.Data[i] = byte(n)
		}
	}
	return nil
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
// nested to the per-sample shape. NaN and Inf become null (JSON has neither).
func appendRows(b []byte, t engine.Tensor, from, to int) []byte {
	per := 1
	for _, d := range t.Shape[1:] {
		per *= int(d)
	}
	b = append(b, '[')
	for r := from; r < to; r++ {
		if r > from {
			b = append(b, ',')
		}
		b = appendNested(b, t, t.Shape[1:], r*per)
	}
	return append(b, ']')
}

func appendNested(b []byte, t engine.Tensor, shape []int64, off int) []byte {
	if len(shape) == 0 {
		return appendValue(b, t, off)
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
		b = appendNested(b, t, shape[1:], off+i*stride)
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
		if t.DType == engine.Float16 {
			bits = 32
		}
		return strconv.AppendFloat(b, f, 'g', -1, bits)
	}
	return strconv.AppendInt(b, int64(f), 10)
}

// appendJSONString appends s as a JSON string literal.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
