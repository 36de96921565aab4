package batcher

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/fw-serve/fw/engine"
)

// Ragged is Triton's ragged batching: requests whose ragged inputs differ
// in shape still join one engine call, the model taking each ragged input
// as one flat tensor and learning where each request's part lies from
// inputs the batcher makes (batch inputs); outputs are cut back per
// request along the batch axis or, for a scattered output, in the shape
// of a request's input.
type Ragged struct {
	// Inputs marks, by input position, the inputs whose shapes beyond the
	// batch axis may differ between the requests of one call
	// (allow_ragged_batch). For a RunFunc such an input is one 1-D tensor:
	// every request's elements, one request after another (even for a
	// call of one request). An EachFunc gets its requests as they are.
	Inputs []bool
	// Made are the inputs the batcher makes for each call from the
	// requests it joined (batch_input); requests leave them absent.
	Made []MadeInput
	// Scatter maps, by output position, an output to the input whose
	// shape, request by request, cuts it: request i gets the next
	// NumElements of its own input's shape elements, in that shape
	// (BATCH_SCATTER_WITH_INPUT_SHAPE). -1, or a position past its end,
	// cuts the output by rows.
	Scatter []int
}

// BatchInputKind is what a made input holds (Triton's BatchInput.Kind).
// Counts are of the source input's elements in each request (its batch
// axis included); shapes are without the batch axis.
type BatchInputKind int

const (
	// ElementCount is each request's count: shape [requests].
	ElementCount BatchInputKind = iota
	// AccumulatedElementCount is the running total, where each request's
	// part ends: shape [requests].
	AccumulatedElementCount
	// AccumulatedElementCountWithZero is 0 then the running total, where
	// each request's part starts and the last ends: shape [requests+1].
	AccumulatedElementCountWithZero
	// MaxElementCountAsShape is zeros whose shape, [largest count], is
	// the datum.
	MaxElementCountAsShape
	// ItemShape is the shape of every row (batch item) of every request:
	// shape [rows, rank-1].
	ItemShape
	// ItemShapeFlatten is ItemShape as one axis: shape [rows*(rank-1)].
	ItemShapeFlatten
)

// MadeInput is one input the batcher makes.
type MadeInput struct {
	Index  int // its input position
	Kind   BatchInputKind
	Source int          // the input position it describes
	DType  engine.DType // Int32, Int64 or Float32
}

// exactFloat32 is the largest count a float32 batch input holds exactly
// (2^24); it also bounds a BATCH_MAX_ELEMENT_COUNT_AS_SHAPE tensor, which
// is that many zeros.
const exactFloat32 = 1 << 24

// fits reports whether v can be a value of a made input of dt.
func fits(dt engine.DType, v int64) bool {
	switch dt {
	case engine.Float32:
		return v <= exactFloat32
	case engine.Int32:
		return v <= math.MaxInt32
	}
	return true
}

// checkRequest refuses a request whose made inputs could not hold what
// its source inputs say (a count or a size past the made input's
// datatype, a source left out): the request's fault, answered before it
// joins others.
func (rg *Ragged) checkRequest(inputs []engine.Tensor) error {
	for _, mi := range rg.Made {
		if mi.Source >= len(inputs) || inputs[mi.Source].Absent() {
			return &engine.InputError{Msg: fmt.Sprintf("input %d is the source of a batch input: send it", mi.Source)}
		}
		shape := inputs[mi.Source].Shape
		switch mi.Kind {
		case ItemShape, ItemShapeFlatten:
			for _, d := range shape[min(1, len(shape)):] {
				if !fits(mi.DType, d) {
					return &engine.InputError{Msg: fmt.Sprintf("input %d has shape %s: a batch input of its item shapes is %s, which cannot hold %d exactly",
						mi.Source, engine.FormatShape(shape), mi.DType, d)}
				}
			}
		default:
			n := engine.NumElements(shape)
			if !fits(mi.DType, n) || (mi.Kind == MaxElementCountAsShape && n > exactFloat32) {
				return &engine.InputError{Msg: fmt.Sprintf("input %d holds %d elements: its batch input (%s) holds at most %d; send fewer", mi.Source, n, mi.DType,
					map[bool]int64{true: exactFloat32, false: math.MaxInt32}[mi.DType == engine.Float32 || mi.Kind == MaxElementCountAsShape])}
			}
		}
	}
	return nil
}

// raggedAt reports whether input j is ragged.
func (rg *Ragged) raggedAt(j int) bool { return rg != nil && j < len(rg.Inputs) && rg.Inputs[j] }

// scatterOf is the input position that cuts output k, -1 when rows do.
func (rg *Ragged) scatterOf(k int) int {
	if rg == nil || k >= len(rg.Scatter) {
		return -1
	}
	return rg.Scatter[k]
}

// raggedConcat is concat for a Ragged model: ragged inputs flattened into
// one axis, made inputs made, the others joined along the batch axis.
// Unlike concat's, the tensors are freshly allocated for each call.
func (b *Batcher) raggedConcat(reqs []*request, rows int) ([]engine.Tensor, error) {
	rg := b.cfg.Ragged
	n := len(reqs[0].inputs)
	in := make([]engine.Tensor, n)
	for j := range n {
		proto := reqs[0].inputs[j]
		if proto.Absent() {
			continue // made below, or an optional input every request left out
		}
		total := 0
		for _, r := range reqs {
			total += len(r.inputs[j].Data)
		}
		data := alignedBytes(total)
		off := 0
		var elems int64
		for _, r := range reqs {
			off += copy(data[off:], r.inputs[j].Data)
			elems += engine.NumElements(r.inputs[j].Shape)
		}
		var shape []int64
		if rg.raggedAt(j) {
			shape = []int64{elems}
		} else {
			shape = append([]int64{int64(rows)}, proto.Shape[1:]...)
		}
		in[j] = engine.Tensor{DType: proto.DType, Shape: shape, Data: data}
	}
	for _, mi := range rg.Made {
		if mi.Index >= n || mi.Source >= n {
			return nil, fmt.Errorf("a batch input at position %d of %d inputs", mi.Index, n)
		}
		t, err := makeInput(mi, reqs)
		if err != nil {
			return nil, err
		}
		in[mi.Index] = t
	}
	return in, nil
}

// makeInput computes one made input for reqs.
func makeInput(mi MadeInput, reqs []*request) (engine.Tensor, error) {
	var vals []int64
	var shape []int64
	switch mi.Kind {
	case ElementCount, AccumulatedElementCount, AccumulatedElementCountWithZero:
		if mi.Kind == AccumulatedElementCountWithZero {
			vals = append(vals, 0)
		}
		var acc int64
		for _, r := range reqs {
			c := engine.NumElements(r.inputs[mi.Source].Shape)
			acc += c
			if mi.Kind == ElementCount {
				vals = append(vals, c)
			} else {
				vals = append(vals, acc)
			}
		}
		shape = []int64{int64(len(vals))}
	case MaxElementCountAsShape:
		var most int64
		for _, r := range reqs {
			most = max(most, engine.NumElements(r.inputs[mi.Source].Shape))
		}
		t, err := engine.NewTensor(mi.DType, []int64{most})
		return t, err
	case ItemShape, ItemShapeFlatten:
		var items int64
		rank := len(reqs[0].inputs[mi.Source].Shape) - 1
		for _, r := range reqs {
			s := r.inputs[mi.Source].Shape
			if len(s)-1 != rank || rank < 0 {
				return engine.Tensor{}, fmt.Errorf("a batch input of item shapes needs every request's input %d at one rank", mi.Source)
			}
			for range s[0] {
				vals = append(vals, s[1:]...)
			}
			items += s[0]
		}
		if mi.Kind == ItemShape {
			shape = []int64{items, int64(rank)}
		} else {
			shape = []int64{int64(len(vals))}
		}
	default:
		return engine.Tensor{}, fmt.Errorf("batch input kind %d", mi.Kind)
	}
	return encodeInts(mi.DType, shape, vals)
}

// encodeInts writes vals as a tensor of dt (Int32, Int64 or Float32).
func encodeInts(dt engine.DType, shape []int64, vals []int64) (engine.Tensor, error) {
	t, err := engine.NewTensor(dt, shape)
	if err != nil {
		return t, err
	}
	for i, v := range vals {
		if !fits(dt, v) { // a total of several requests: each alone fits (checkRequest)
			return engine.Tensor{}, fmt.Errorf("batch input value %d does not fit %s exactly", v, dt)
		}
		switch dt {
		case engine.Int32:
			binary.LittleEndian.PutUint32(t.Data[4*i:], uint32(int32(v)))
		case engine.Int64:
			binary.LittleEndian.PutUint64(t.Data[8*i:], uint64(v))
		case engine.Float32:
			binary.LittleEndian.PutUint32(t.Data[4*i:], math.Float32bits(float32(v)))
		default:
			return engine.Tensor{}, fmt.Errorf("batch input datatype %s", dt)
		}
	}
	return t, nil
}

// checkScattered verifies that each scattered output holds exactly the
// elements of its source input over reqs.
func (rg *Ragged) checkScattered(outs []engine.Tensor, reqs []*request) error {
	for k, t := range outs {
		src := rg.scatterOf(k)
		if src < 0 || t.Absent() {
			continue
		}
		var want int64
		for _, r := range reqs {
			if src < len(r.inputs) {
				want += engine.NumElements(r.inputs[src].Shape)
			}
		}
		if got := engine.NumElements(t.Shape); got != want {
			return fmt.Errorf("%w: output %d has shape %s (%d elements); scattered in the shapes of input %d it must hold their %d elements",
				ErrBadOutput, k, engine.FormatShape(t.Shape), got, src, want)
		}
	}
	return nil
}
