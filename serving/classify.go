package serving

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/fw-serve/fw/engine"
)

// Triton's classification extension: an output requested with the
// parameter classification N is answered, instead of the raw tensor, with
// a BYTES tensor of its N largest values per batch row, each
// "value:index" or, when the output has labels, "value:index:label".

// ClassificationError is a classification request fw refuses (a negative
// count, an output type without an order). Both transports answer it as a
// bad request: HTTP 400, gRPC INVALID_ARGUMENT.
type ClassificationError struct{ Msg string }

func (e *ClassificationError) Error() string { return e.Msg }

// CheckClassification decides whether an output of spec may be requested
// with classification count n before the request runs: n must be >= 0
// (0 asks for the raw output) and the output's type one that Triton
// classifies (integers, FP32, FP64). A spec whose type the model does not
// say is checked when the output exists (Classes).
func CheckClassification(spec engine.TensorSpec, n int64) error {
	if n < 0 {
		return &ClassificationError{fmt.Sprintf("output %q: parameter \"classification\" is %d; it must be the number of classes to return, >= 1 (0 returns the raw output)", spec.Name, n)}
	}
	if n == 0 || spec.DType == engine.Invalid {
		return nil
	}
	return classifiable(spec.Name, spec.DType)
}

func classifiable(name string, dt engine.DType) error {
	switch dt {
	case engine.Uint8, engine.Uint16, engine.Uint32, engine.Uint64, engine.Int8, engine.Int16, engine.Int32, engine.Int64,
		engine.Float32, engine.Float64:
		return nil
	}
	// Triton's sentence, with the output named.
	return &ClassificationError{fmt.Sprintf("output %q: class result not available for output due to unsupported type '%s'", name, DatatypeName(dt))}
}

// Batched reports whether the instance serves its model with a batch axis
// (what Triton calls max_batch_size > 0): the model has one and the
// batcher joins rows along it. A repository's max_batch_size 0 serves a
// batchable model whole.
func (i *Instance) Batched() bool {
	return i.Model.Batched() && (i.Batcher == nil || !i.Batcher.Config().Unbatched)
}

// Labels are the class labels of the output named name: its
// label_filename's lines in a repository, else, for the model's first
// output, the model file's own labels (fw.json); nil when it has none.
// Outputs are found by name: a stateful model's client outputs are the
// model's less its implicit state, so indexes differ.
func (i *Instance) Labels(name string) []string {
	for _, c := range i.Config.Outputs {
		if c.Name == name && c.Labels != nil {
			return c.Labels
		}
	}
	if outs := i.Model.Outputs(); len(outs) > 0 && outs[0].Name == name {
		return i.Model.Labels()
	}
	return nil
}

// maxClassificationElements bounds the output whose classes one answer
// sorts, as Triton's does: more is a request error, not minutes of CPU.
const maxClassificationElements = 1_000_000

// Classes answers the output named name, t, requested with classification
// n > 0: batched, a BYTES tensor [rows, min(n, classes)] (classes being the
// elements of a row); unbatched, [min(n, elements)]. Each row holds its
// largest values, largest first (equal values in index order), formatted
// as Triton does: the value as C++'s std::to_string writes it (integers in
// decimal, floating point with six decimals), then ":" and its index in
// the row, then ":" and the label when the output has one for that index.
func (i *Instance) Classes(t engine.Tensor, name string, n int64) (engine.Tensor, error) {
	if err := classifiable(name, t.DType); err != nil {
		return engine.Tensor{}, err
	}
	return TopClasses(t, n, i.Batched(), i.Labels(name))
}

// TopClasses is Classes for a tensor t of a classifiable type, already
// checked: batched says whether axis 0 holds rows.
func TopClasses(t engine.Tensor, n int64, batched bool, labels []string) (engine.Tensor, error) {
	if err := t.Check(); err != nil {
		return engine.Tensor{}, err
	}
	if n := engine.NumElements(t.Shape); n > maxClassificationElements {
		return engine.Tensor{}, &ClassificationError{fmt.Sprintf("classification output tensor too large: %d elements, more than the %d whose classes a server sorts; ask for the output itself, without class_count", n, maxClassificationElements)}
	}
	rows, per := int64(1), engine.NumElements(t.Shape)
	if batched && len(t.Shape) > 0 {
		rows, per = t.Shape[0], engine.NumElements(t.Shape[1:])
	}
	keep := min(n, per)
	shape := []int64{keep}
	if batched && len(t.Shape) > 0 {
		shape = []int64{rows, keep}
	}
	size := t.DType.Size()
	idx := make([]int, per)
	var data []byte
	for r := int64(0); r < rows; r++ {
		row := t.Data[r*per*int64(size) : (r+1)*per*int64(size)]
		for j := range idx {
			idx[j] = j
		}
		less := classOrder(row, t.DType)
		slices.SortStableFunc(idx, less)
		for _, j := range idx[:keep] {
			s := formatClass(row, t.DType, j)
			s = append(s, ':')
			s = strconv.AppendInt(s, int64(j), 10)
			if j < len(labels) {
				s = append(s, ':')
				s = append(s, labels[j]...)
			}
			data = engine.AppendString(data, s)
		}
	}
	if data == nil {
		data = []byte{}
	}
	return engine.Tensor{DType: engine.String, Shape: shape, Data: data}, nil
}

// classOrder compares two indexes of row: the larger value first, NaN last.
func classOrder(row []byte, dt engine.DType) func(a, b int) int {
	switch dt {
	case engine.Float32, engine.Float64:
		v := func(i int) float64 {
			if dt == engine.Float32 {
				return float64(math.Float32frombits(binary.LittleEndian.Uint32(row[i*4:])))
			}
			return math.Float64frombits(binary.LittleEndian.Uint64(row[i*8:]))
		}
		return func(a, b int) int {
			x, y := v(a), v(b)
			switch {
			case math.IsNaN(x) || math.IsNaN(y):
				return cmp.Compare(boolInt(math.IsNaN(x)), boolInt(math.IsNaN(y)))
			}
			return cmp.Compare(y, x)
		}
	case engine.Uint64:
		return func(a, b int) int {
			return cmp.Compare(binary.LittleEndian.Uint64(row[b*8:]), binary.LittleEndian.Uint64(row[a*8:]))
		}
	case engine.Int64:
		return func(a, b int) int {
			return cmp.Compare(int64(binary.LittleEndian.Uint64(row[b*8:])), int64(binary.LittleEndian.Uint64(row[a*8:])))
		}
	}
	t := engine.Tensor{DType: dt, Data: row}
	return func(a, b int) int { return cmp.Compare(t.At(b), t.At(a)) } // the narrower integers: exact as float64
}

// formatClass writes element j of row as std::to_string does.
func formatClass(row []byte, dt engine.DType, j int) []byte {
	var f float64
	switch dt {
	case engine.Float32:
		f = float64(math.Float32frombits(binary.LittleEndian.Uint32(row[j*4:])))
	case engine.Float64:
		f = math.Float64frombits(binary.LittleEndian.Uint64(row[j*8:]))
	case engine.Uint64:
		return strconv.AppendUint(nil, binary.LittleEndian.Uint64(row[j*8:]), 10)
	case engine.Int64:
		return strconv.AppendInt(nil, int64(binary.LittleEndian.Uint64(row[j*8:])), 10)
	default:
		return strconv.AppendInt(nil, int64(engine.Tensor{DType: dt, Data: row}.At(j)), 10)
	}
	switch {
	case math.IsNaN(f):
		if math.Signbit(f) {
			return []byte("-nan")
		}
		return []byte("nan")
	case math.IsInf(f, 1):
		return []byte("inf")
	case math.IsInf(f, -1):
		return []byte("-inf")
	}
	return strconv.AppendFloat(nil, f, 'f', 6, 64)
}
