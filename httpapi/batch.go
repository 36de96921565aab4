package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/fw-serve/fw/engine"
	"github.com/fw-serve/fw/serving"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// maxBatchItems bounds the items of one JSON /predict/batch request (NDJSON
// streams have no count limit: they are processed in a bounded window).
const maxBatchItems = 100_000

// handleBatch serves POST /predict/batch. application/json takes
// {"requests": [{"id": ..., "data": rows} | {"id": ..., "inputs": {...}}, ...]}
// and answers {"responses": [...]} in the same order; application/x-ndjson
// takes one such request object per line and streams one response per line.
// Items run concurrently through the batcher, so they coalesce; one bad item
// gets its own error and does not fail the others.
func (s *Server) handleBatch(ctx *fasthttp.RequestCtx) {
	mt := mediaType(ctx)
	if mt != "application/json" && mt != "application/x-ndjson" && mt != "application/jsonl" {
		writeError(ctx, newError(415, CodeUnsupportedMedia,
			fmt.Sprintf(`Content-Type %q is not accepted; send application/json {"requests": [...]} or application/x-ndjson (one request per line)`, mt),
			map[string]any{"accepted": []string{"application/json", "application/x-ndjson", "application/jsonl"}}))
		return
	}
	inst := s.readyToPredict(ctx)
	if inst == nil {
		return
	}
	if mt != "application/json" {
		s.streamNDJSON(ctx, inst)
		return
	}
	body, ok := s.readBody(ctx)
	if !ok {
		return
	}
	v, err := scanDoc(body)
	if err != nil {
		writeError(ctx, newError(400, CodeInvalidJSON, "the body is not valid JSON: "+err.Error(), nil))
		return
	}
	reqs := get(v.members(), "requests")
	if reqs.Type() != fastjson.TypeArray {
		writeError(ctx, newError(422, CodeInvalidInput, `missing "requests": send {"requests": [{"id": "a", "data": [[...]]}, ...]}`, nil))
		return
	}
	// Counted before anything is allocated per item; at most one more than
	// the limit is counted.
	if n := reqs.count(maxBatchItems); n > maxBatchItems {
		writeError(ctx, newError(413, CodeTooLarge, fmt.Sprintf("more than %d items in one request; send at most %d, or use application/x-ndjson to stream any number", maxBatchItems, maxBatchItems),
			map[string]any{"max_items": maxBatchItems}))
		return
	}
	var items []jv
	reqs.forEach(func(_ int, e jv) bool { items = append(items, e); return true })
	rctx, cancel := s.requestContext(ctx)
	defer cancel()
	// Chunks of items are decoded and run side by side (as many as
	// BatchConcurrency items in flight), each joined into as few engine
	// requests as its model allows (runItems).
	batch := make([]*batchItem, len(items))
	size, chunks := chunkSize(s.cfg.BatchConcurrency)
	units := make(chan struct{}, s.cfg.BatchConcurrency)
	sem := make(chan struct{}, chunks)
	var wg sync.WaitGroup
	for lo := 0; lo < len(items); lo += size {
		hi := min(lo+size, len(items))
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			for i := lo; i < hi; i++ {
				batch[i] = s.newBatchItem(items[i], i, inst)
			}
			s.runItems(rctx, inst, batch[lo:hi], units)
		}()
	}
	wg.Wait()
	n := 16
	for _, it := range batch {
		n += len(it.answer) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, `{"responses":[`...)
	for i, it := range batch {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it.answer...)
	}
	b = append(b, "]}"...)
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetBody(b)
}

// newBatchItem reads item number n (its position in the body), which
// scanDoc validated: its id and inputs, or, when they do not decode, its
// answer.
func (s *Server) newBatchItem(item jv, n int, inst *serving.Instance) *batchItem {
	ms := item.members()
	it := &batchItem{id: itemID(ms, n), began: time.Now()}
	if inputs, aerr := s.decodeItem(item, ms, inst); aerr != nil {
		it.answer = appendItemError(nil, it.id, aerr)
	} else {
		it.inputs = inputs
	}
	return it
}

// itemID returns the item's "id" (a string or number) as JSON, or its index
// when absent.
func itemID(ms []member, i int) []byte {
	if id := rawID(get(ms, "id")); id != nil {
		return id
	}
	return strconv.AppendInt(nil, int64(i), 10)
}

// decodeItem reads one batch item of inst, whose members are ms.
func (s *Server) decodeItem(item jv, ms []member, inst *serving.Instance) ([]engine.Tensor, *APIError) {
	if item.Type() != fastjson.TypeObject {
		return nil, newError(422, CodeInvalidInput, `each item must be an object such as {"id": "a", "data": [[...]]}`, nil)
	}
	inputs, aerr := s.decodeMembers(ms, inst)
	if aerr != nil {
		return nil, aerr
	}
	if err := serving.CheckInputs(inst, inputs); err != nil {
		return nil, s.submitError(err)
	}
	return inputs, nil
}

// runItem submits one item and encodes its response object.
func (s *Server) runItem(ctx context.Context, inst *serving.Instance, id []byte, inputs []engine.Tensor) []byte {
	out, rec, err := s.infer(ctx, inst, inputs, time.Now())
	if err != nil {
		return appendItemError(nil, id, s.submitError(err))
	}
	b := appendPrediction(nil, inst, out, id)
	s.done(inst, rec)
	return b
}

func appendItemError(b []byte, id []byte, e *APIError) []byte {
	b = append(b, `{"id":`...)
	b = append(b, id...)
	b = append(b, `,"error":{"code":`...)
	b = appendJSONString(b, e.Code)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, e.Message)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	if e.Details != nil {
		if d, err := json.Marshal(e.Details); err == nil {
			b = append(b, `,"details":`...)
			b = append(b, d...)
		}
	}
	return append(b, "}}"...)
}

// streamNDJSON reads one request per line and writes one response per line,
// in order, keeping at most BatchConcurrency lines in flight, so any number
// of lines goes through in bounded memory. Lines are read into chunks (up
// to chunkLines lines or chunkBytes bytes, or what has arrived when the
// next read would wait), which a few long-lived workers decode and run
// side by side, each chunk joined into as few engine requests as the
// model allows (runItems).
//
// A compressed body (Content-Encoding gzip or deflate) is decoded as it is
// read, and bounded in total by MaxBodyBytes decoded: a few megabytes
// could otherwise inflate to an endless stream of lines. An error decoding
// it (or that bound) ends the stream with an error line in place of the
// line it interrupted.
func (s *Server) streamNDJSON(ctx *fasthttp.RequestCtx, inst *serving.Instance) {
	body, _, aerr := s.requestBody(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	var raw io.Reader // drained after a compressed body breaks off
	if ctx.Request.IsBodyStream() {
		raw = ctx.RequestBodyStream()
	}
	maxLine := int(min(s.cfg.MaxBodyBytes, math.MaxInt32))
	size, workers := chunkSize(s.cfg.BatchConcurrency)
	// The lines in flight hold at most maxLine bytes together (one line
	// alone may be that long), so their tensors (at most 4 times their JSON)
	// stay bounded however many lines wait in the window.
	budget := newByteBudget(int64(maxLine))
	ctx.Response.Header.SetContentType("application/x-ndjson")
	ctx.SetConnectionClose() // the request body is consumed while the response streams
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		rctx, cancel := context.WithCancel(s.base)
		defer cancel()
		// Chunks in flight: those in pending, the one the writer waits
		// for and the one being read, at most window lines together.
		pending := make(chan chan []*batchItem, max(1, workers-2))
		units := make(chan struct{}, s.cfg.BatchConcurrency)
		type job struct {
			lines []ndLine
			out   chan []*batchItem
		}
		jobs := make(chan job, workers)
		started := 0
		go func() {
			defer close(pending)
			defer close(jobs)
			r := bufio.NewReaderSize(body, 64<<10)
			var cur []ndLine
			held := 0
			// send hands cur to a worker, its answers to the writer, in order.
			send := func() bool {
				if len(cur) == 0 {
					return true
				}
				ch := make(chan []*batchItem, 1)
				select {
				case pending <- ch:
				case <-rctx.Done():
					return false
				}
				if started < workers {
					started++
					go func() {
						for j := range jobs {
							items := s.ndjsonChunk(rctx, inst, j.lines, units)
							for _, l := range j.lines {
								budget.release(int64(len(l.data)))
							}
							j.out <- items
						}
					}()
				}
				jobs <- job{cur, ch}
				cur, held = nil, 0
				return true
			}
			var line []byte
			for n := 0; ; n++ {
				var err error
				line, err = readLine(r, line[:0], maxLine)
				var berr *APIError
				if errors.As(err, &berr) { // the compressed body broke off: the line is cut short
					cur = append(cur, ndLine{n: n, answer: appendItemError(nil, strconv.AppendInt(nil, int64(n), 10), berr)})
					send()
					if raw != nil {
						// As Handler drains after an error: a client still
						// sending reads the answer instead of a reset.
						io.CopyN(io.Discard, raw, maxDrainBytes)
					}
					return
				}
				switch {
				case errors.Is(err, errLineTooLong):
					cur = append(cur, ndLine{n: n, answer: appendItemError(nil, strconv.AppendInt(nil, int64(n), 10),
						newError(413, CodeTooLarge, fmt.Sprintf("line %d is longer than %d bytes (--max-body-bytes)", n, maxLine), nil))})
				case len(bytes.TrimSpace(line)) > 0:
					data := append([]byte(nil), line...)
					if !budget.tryAcquire(int64(len(data))) {
						// The window is full: what this chunk holds must go
						// first, or the bytes it waits for would never come back.
						if !send() {
							return
						}
						budget.acquire(int64(len(data)))
					}
					cur = append(cur, ndLine{n: n, data: data})
					held += len(data)
				}
				if err != nil && !errors.Is(err, errLineTooLong) {
					send()
					return
				}
				// A full chunk goes; so does a partial one when the next read
				// would wait for the client (a stream sent line by line).
				if len(cur) >= size || held >= chunkBytes || r.Buffered() == 0 {
					if !send() {
						return
					}
				}
			}
		}()
		for ch := range pending {
			for _, it := range <-ch {
				w.Write(it.answer)
				w.WriteByte('\n')
			}
			if len(pending) == 0 {
				if err := w.Flush(); err != nil {
					cancel() // the client went away: stop reading and computing
					for ch := range pending {
						<-ch
					}
					return
				}
			}
		}
	})
}

// chunkSize is the items per chunk and the chunks in flight for a window of
// BatchConcurrency items.
func chunkSize(window int) (size, chunks int) {
	size = max(1, min(chunkLines, window))
	return size, max(1, window/size)
}

// ndLine is one NDJSON line read: its number, its bytes, or its answer
// when it has one already (too long, or the body broke off).
type ndLine struct {
	n      int
	data   []byte
	answer []byte
}

// ndjsonChunk decodes a chunk of lines and answers them (runItems).
func (s *Server) ndjsonChunk(ctx context.Context, inst *serving.Instance, lines []ndLine, units chan struct{}) []*batchItem {
	items := make([]*batchItem, len(lines))
	for i, l := range lines {
		if l.answer != nil {
			items[i] = &batchItem{answer: l.answer}
			continue
		}
		v, err := scanDoc(l.data)
		if err != nil {
			items[i] = &batchItem{answer: appendItemError(nil, strconv.AppendInt(nil, int64(l.n), 10),
				newError(400, CodeInvalidJSON, fmt.Sprintf("line %d is not valid JSON: %v", l.n, err), nil))}
			continue
		}
		items[i] = s.newBatchItem(v, l.n, inst)
	}
	s.runItems(ctx, inst, items, units)
	return items
}

var errLineTooLong = errors.New("line too long")

// byteBudget bounds the bytes held by work in flight: acquire waits until
// the bytes fit under max (or nothing is held, so one item of any size
// passes alone); release gives them back. Every holder releases when its
// work ends, whatever happens, so a waiter always wakes.
type byteBudget struct {
	mu   sync.Mutex
	cond *sync.Cond
	max  int64
	used int64
}

func newByteBudget(max int64) *byteBudget {
	b := &byteBudget{max: max}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func (b *byteBudget) acquire(n int64) {
	b.mu.Lock()
	for b.used > 0 && b.used+n > b.max {
		b.cond.Wait()
	}
	b.used += n
	b.mu.Unlock()
}

// tryAcquire takes n bytes when acquire would not wait, and reports
// whether it did.
func (b *byteBudget) tryAcquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used > 0 && b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	b.cond.Broadcast()
}

// readLine reads one line (without its newline) into buf. A line longer than
// max is skipped to its end and reported with errLineTooLong.
func readLine(r *bufio.Reader, buf []byte, max int) ([]byte, error) {
	tooLong := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			if len(buf)+len(chunk)-1 > max { // the newline does not count
				tooLong, buf = true, buf[:0]
			} else {
				buf = append(buf, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		buf = bytes.TrimRight(buf, "\r\n")
		if tooLong {
			if err == nil {
				return buf, errLineTooLong
			}
			return buf, err
		}
		return buf, err
	}
}
