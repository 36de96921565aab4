package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/fw-serve/fw/engine"
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
	inst := s.ready(ctx)
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
	p := s.parsers.Get()
	defer s.parsers.Put(p)
	v, err := p.ParseBytes(body)
	if err != nil {
		writeError(ctx, newError(400, CodeInvalidJSON, "the body is not valid JSON: "+err.Error(), nil))
		return
	}
	reqs := v.GetArray("requests")
	if reqs == nil {
		writeError(ctx, newError(422, CodeInvalidInput, `missing "requests": send {"requests": [{"id": "a", "data": [[...]]}, ...]}`, nil))
		return
	}
	if len(reqs) > maxBatchItems {
		writeError(ctx, newError(413, CodeTooLarge, fmt.Sprintf("%d items exceed %d per request; use application/x-ndjson to stream any number", len(reqs), maxBatchItems), nil))
		return
	}
	rctx, cancel := s.requestContext()
	defer cancel()
	results := make([][]byte, len(reqs))
	sem := make(chan struct{}, s.cfg.BatchConcurrency)
	var wg sync.WaitGroup
	for i, item := range reqs {
		id := itemID(item, i)
		inputs, aerr := s.decodeItem(item, inst.Model)
		if aerr != nil {
			results[i] = appendItemError(nil, id, aerr)
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i] = s.runItem(rctx, inst, id, inputs)
		}()
	}
	wg.Wait()
	n := 16
	for _, r := range results {
		n += len(r) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, `{"responses":[`...)
	for i, r := range results {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, r...)
	}
	b = append(b, "]}"...)
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetBody(b)
}

// itemID returns the item's "id" as raw JSON, or its index when absent.
func itemID(item *fastjson.Value, i int) []byte {
	if id := item.Get("id"); id != nil && (id.Type() == fastjson.TypeString || id.Type() == fastjson.TypeNumber) {
		return id.MarshalTo(nil)
	}
	return strconv.AppendInt(nil, int64(i), 10)
}

func (s *Server) decodeItem(item *fastjson.Value, m *engine.Model) ([]engine.Tensor, *APIError) {
	if item.Type() != fastjson.TypeObject {
		return nil, newError(422, CodeInvalidInput, `each item must be an object such as {"id": "a", "data": [[...]]}`, nil)
	}
	inputs, aerr := s.decodeInputs(item, m)
	if aerr != nil {
		return nil, aerr
	}
	if _, err := m.CheckInputs(inputs); err != nil {
		return nil, s.submitError(err)
	}
	return inputs, nil
}

// runItem submits one item and encodes its response object.
func (s *Server) runItem(ctx context.Context, inst *Instance, id []byte, inputs []engine.Tensor) []byte {
	out, err := s.infer(ctx, inst, inputs)
	if err != nil {
		return appendItemError(nil, id, s.submitError(err))
	}
	return appendPrediction(nil, inst.Model, out, id)
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
// of lines goes through in bounded memory.
func (s *Server) streamNDJSON(ctx *fasthttp.RequestCtx, inst *Instance) {
	var body io.Reader
	if ctx.Request.IsBodyStream() {
		body = ctx.RequestBodyStream()
	} else {
		body = bytes.NewReader(ctx.Request.Body())
	}
	maxLine := int(s.cfg.MaxBodyBytes)
	window := s.cfg.BatchConcurrency
	ctx.Response.Header.SetContentType("application/x-ndjson")
	ctx.SetConnectionClose() // the request body is consumed while the response streams
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		rctx, cancel := context.WithCancel(s.base)
		defer cancel()
		pending := make(chan chan []byte, window)
		go func() {
			defer close(pending)
			r := bufio.NewReaderSize(body, 64<<10)
			var line []byte
			for n := 0; ; n++ {
				var err error
				line, err = readLine(r, line[:0], maxLine)
				if len(bytes.TrimSpace(line)) > 0 || errors.Is(err, errLineTooLong) {
					ch := make(chan []byte, 1)
					select {
					case pending <- ch:
					case <-rctx.Done():
						return
					}
					if errors.Is(err, errLineTooLong) {
						ch <- appendItemError(nil, strconv.AppendInt(nil, int64(n), 10),
							newError(413, CodeTooLarge, fmt.Sprintf("line %d is longer than %d bytes (--max-body-bytes)", n, maxLine), nil))
					} else {
						data := append([]byte(nil), line...)
						go func(n int) { ch <- s.ndjsonLine(rctx, inst, data, n) }(n)
					}
				}
				if err != nil && !errors.Is(err, errLineTooLong) {
					return
				}
			}
		}()
		for ch := range pending {
			out := <-ch
			w.Write(out)
			w.WriteByte('\n')
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

var errLineTooLong = errors.New("line too long")

// readLine reads one line (without its newline) into buf. A line longer than
// max is skipped to its end and reported with errLineTooLong.
func readLine(r *bufio.Reader, buf []byte, max int) ([]byte, error) {
	tooLong := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			if len(buf)+len(chunk) > max+1 {
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

func (s *Server) ndjsonLine(ctx context.Context, inst *Instance, line []byte, n int) []byte {
	p := s.parsers.Get()
	defer s.parsers.Put(p)
	v, err := p.ParseBytes(line)
	id := strconv.AppendInt(nil, int64(n), 10)
	if err != nil {
		return appendItemError(nil, id, newError(400, CodeInvalidJSON, fmt.Sprintf("line %d is not valid JSON: %v", n, err), nil))
	}
	id = itemID(v, n)
	inputs, aerr := s.decodeItem(v, inst.Model)
	if aerr != nil {
		return appendItemError(nil, id, aerr)
	}
	return s.runItem(ctx, inst, id, inputs)
}
