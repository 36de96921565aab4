package httpapi

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/serving"
)

// chunkLines bounds the /predict/batch items one worker decodes and sends
// to the engine together (runItems), and chunkBytes the bytes of the
// NDJSON lines gathered for one chunk.
const (
	chunkLines = 64
	chunkBytes = 1 << 20
)

// batchItem is one /predict/batch item on its way: its id (JSON), its
// decoded inputs, or its answer once it has one (an error, or the
// prediction).
type batchItem struct {
	id     []byte
	inputs []engine.Tensor
	began  time.Time
	answer []byte
}

// joinable reports whether inst's items may be sent as one request of
// their rows put together: a model file's (ONNX, TorchScript, .pt2) with a
// batch axis, stateless, without ragged batching or a response cache.
// Any other model (a Python model, an ensemble, a model that takes its
// inputs whole) gets each item as a request of its own, as its clients'
// requests would be.
func joinable(inst *serving.Instance) bool {
	f := inst.Model.Format
	return (f.ONNX() || f == engine.FormatTorchScript || f == engine.FormatAOTI) && inst.Batched() &&
		inst.Ragged == nil && inst.Sequences == nil && inst.Order == nil && inst.Cache == nil && !inst.Decoupled()
}

// runItems answers the items without an answer yet: for a joinable model,
// consecutive items whose inputs share datatypes and row shapes run as one
// request of their rows together (up to the batcher's MaxBatchRows), so a
// bulk body costs an engine call per group rather than per item and a
// trip through the batcher per group; each item still counts as a request
// in the model's statistics. Items that cannot join, and every item of a
// group whose joined request failed (so each gets its own error), run
// alone. Called from one goroutine per chunk.
func (s *Server) runItems(ctx context.Context, inst *serving.Instance, items []*batchItem) {
	if !joinable(inst) {
		for _, it := range items {
			if it.answer == nil {
				it.answer = s.runItem(ctx, inst, it.id, it.inputs)
			}
		}
		return
	}
	maxRows := int64(inst.Batcher.Config().MaxBatchRows)
	var group []*batchItem
	var key string
	var rows int64
	flush := func() {
		s.runJoined(ctx, inst, group, rows)
		group, rows = group[:0], 0
	}
	for _, it := range items {
		if it.answer != nil {
			continue
		}
		k, n := rowKey(it.inputs)
		if len(group) > 0 && (k != key || rows+n > maxRows) {
			flush()
		}
		group, key, rows = append(group, it), k, rows+n
	}
	if len(group) > 0 {
		flush()
	}
}

// rowKey is what items must share to be joined: each input's datatype and
// shape past its first axis; and the rows (the first input's first axis).
func rowKey(inputs []engine.Tensor) (string, int64) {
	var b strings.Builder
	rows := int64(-1)
	for _, t := range inputs {
		if len(t.Shape) == 0 {
			return "", 1 << 62 // no rows: never joined
		}
		if rows < 0 {
			rows = t.Shape[0]
		}
		b.WriteString(t.DType.String())
		for _, d := range t.Shape[1:] {
			b.WriteByte(',')
			b.WriteString(strconv.FormatInt(d, 10))
		}
		b.WriteByte(';')
	}
	return b.String(), rows
}

// runJoined runs group as one request of rows rows and splits the answer
// back into each item's rows.
func (s *Server) runJoined(ctx context.Context, inst *serving.Instance, group []*batchItem, rows int64) {
	if len(group) == 1 {
		group[0].answer = s.runItem(ctx, inst, group[0].id, group[0].inputs)
		return
	}
	alone := func() {
		for _, it := range group {
			it.answer = s.runItem(ctx, inst, it.id, it.inputs)
		}
	}
	joined := make([]engine.Tensor, len(group[0].inputs))
	for k := range joined {
		first := group[0].inputs[k]
		size := 0
		for _, it := range group {
			size += len(it.inputs[k].Data)
		}
		data := make([]byte, 0, size) // String data joins as it is: elements one after another
		for _, it := range group {
			data = append(data, it.inputs[k].Data...)
		}
		shape := append([]int64{rows}, first.Shape[1:]...)
		joined[k] = engine.Tensor{DType: first.DType, Shape: shape, Data: data}
	}
	submitted := time.Now()
	out, timing, err := serving.Infer(ctx, s.models, inst, joined)
	if err != nil {
		alone() // each item gets its own answer: the one that failed, and the others
		return
	}
	counts := make([]int, len(group))
	for i, it := range group {
		counts[i] = int(it.inputs[0].Shape[0])
	}
	parts := make([][]engine.Tensor, len(group))
	for i := range parts {
		parts[i] = make([]engine.Tensor, len(out))
	}
	for o, t := range out {
		split, err := engine.SplitRows(t, counts)
		if err != nil { // an output without the rows along its first axis: run each alone
			alone()
			return
		}
		for i := range split {
			parts[i][o] = split[i]
		}
	}
	for i, it := range group {
		it.answer = appendPrediction(nil, inst, parts[i], it.id)
		s.done(inst, serving.Request{Began: it.began, Submitted: submitted, Timing: timing, TraceBegun: true, Trace: s.cfg.Tracer.Begin(inst.Name())})
	}
}
