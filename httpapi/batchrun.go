package httpapi

import (
	"context"
	"strconv"
	"strings"
	"sync"
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
// in the model's statistics. Items that cannot join run alone. Each group,
// and each item run alone, runs on a goroutine of its own holding one of
// sem's slots (the request's BatchConcurrency), so a model whose items
// cannot join has as many in flight as its chunks hold. It returns when
// every item is answered, their inputs dropped.
func (s *Server) runItems(ctx context.Context, inst *serving.Instance, items []*batchItem, sem chan struct{}) {
	var wg sync.WaitGroup
	spawn := func(fn func()) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn()
		}()
	}
	alone := func(it *batchItem) {
		spawn(func() {
			it.answer = s.runItem(ctx, inst, it.id, it.inputs)
			it.inputs = nil
		})
	}
	join := joinable(inst)
	var maxRows int64
	if join {
		maxRows = int64(inst.Batcher.Config().MaxBatchRows)
	}
	var group []*batchItem
	var key string
	var rows int64
	flush := func() {
		if len(group) == 1 {
			alone(group[0])
		} else if len(group) > 1 {
			g, n := group, rows
			spawn(func() { s.runJoined(ctx, inst, g, n) })
		}
		group, rows = nil, 0
	}
	for _, it := range items {
		if it.answer != nil {
			it.inputs = nil
			continue
		}
		k, n := rowKey(it.inputs)
		if !join || n < 0 {
			alone(it)
			continue
		}
		if len(group) > 0 && (k != key || rows+n > maxRows) {
			flush()
		}
		group, key, rows = append(group, it), k, rows+n
	}
	flush()
	wg.Wait()
}

// rowKey is what items must share to be joined: each input's datatype and
// shape past its first axis; and the rows (the first input's first axis),
// -1 for inputs that cannot be joined (none, or a scalar).
func rowKey(inputs []engine.Tensor) (string, int64) {
	if len(inputs) == 0 {
		return "", -1
	}
	var b strings.Builder
	for _, t := range inputs {
		if len(t.Shape) == 0 {
			return "", -1
		}
		b.WriteString(t.DType.String())
		for _, d := range t.Shape[1:] {
			b.WriteByte(',')
			b.WriteString(strconv.FormatInt(d, 10))
		}
		b.WriteByte(';')
	}
	return b.String(), inputs[0].Shape[0]
}

// runJoined runs group (two items or more) as one request of rows rows
// and splits the answer back into each item's rows. When the joined
// request fails for what its items hold (an engine or model error, an
// input the model refuses), each item runs again alone, so only the one
// at fault answers an error; any other failure (a full queue, a queue or
// request timeout, a model going away) is every item's answer as it is,
// not retried item by item into the same condition.
func (s *Server) runJoined(ctx context.Context, inst *serving.Instance, group []*batchItem, rows int64) {
	defer func() {
		for _, it := range group {
			it.inputs = nil
		}
	}()
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
		switch serving.Classify(err, s.cfg.Timeout).Kind {
		case serving.KindEngine, serving.KindInvalidInput, serving.KindAnswered:
			alone() // each item gets its own answer: the one that failed, and the others
			return
		}
		aerr, now := s.submitError(err), time.Now()
		for _, it := range group {
			it.answer = appendItemError(nil, it.id, aerr)
			inst.Stats.Record(serving.Request{Began: it.began, Submitted: submitted, Encoded: now, Timing: timing, Err: err})
		}
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
