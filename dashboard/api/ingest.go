package api

import (
	"bytes"
	"fmt"
	"mime"
	"time"

	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/dashboard/tracking"
)

func isNDJSON(contentType []byte) bool {
	mt, _, err := mime.ParseMediaType(string(contentType))
	if err != nil {
		return false
	}
	switch mt {
	case "application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines", "application/jsonlines":
		return true
	}
	return false
}

// ingest applies a batch of events: a JSON array, or JSON lines with an
// NDJSON content type (the SDK's spool format).
func (s *Server) ingest(c *call) (any, error) {
	ctx := c.rc
	body, e := s.readBody(ctx)
	if e != nil {
		return nil, e
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil, apiErr(400, string(store.CodeInvalidJSON), "the body is empty; send a JSON array of events (or JSON lines with Content-Type: application/x-ndjson)")
	}
	if !isNDJSON(ctx.Request.Header.ContentType()) && trimmed[0] != '[' {
		return nil, apiErr(400, string(store.CodeInvalidJSON), "the body must be a JSON array of events; for one event per line send Content-Type: application/x-ndjson")
	}
	events, err := store.DecodeEvents(trimmed)
	var res tracking.IngestResult
	if err == nil {
		res, err = tracking.Apply(c.ctx, s.st, events)
	}
	if err != nil {
		if store.ErrorCode(err) == store.CodeInvalidJSON {
			return nil, apiErr(400, string(store.CodeInvalidJSON), "malformed JSON: "+err.Error())
		}
		if store.ErrorCode(err) == store.CodeBatchTooLarge {
			return nil, apiErr(413, string(store.CodeBatchTooLarge), fmt.Sprintf("%v; split it into batches of at most %d events and %d values (metric values + log lines + params)",
				err, store.MaxBatchEvents, store.MaxBatchValues))
		}
		return nil, err
	}
	s.observeIngest(events, res, time.Now())
	return res, nil
}

// observeIngest counts a batch's events by result and observes the ingest
// lag of each one not refused that carries its own time (negative lags, from
// a client clock ahead of ours, count as 0).
func (s *Server) observeIngest(events []store.Event, res tracking.IngestResult, now time.Time) {
	if s.prom == nil {
		return
	}
	s.prom.ingested.WithLabelValues("applied").Add(float64(res.Applied))
	s.prom.ingested.WithLabelValues("duplicate").Add(float64(res.Duplicates))
	s.prom.ingested.WithLabelValues("refused").Add(float64(len(res.Errors)))
	refused := make(map[int]bool, len(res.Errors))
	for _, e := range res.Errors {
		refused[e.Index] = true
	}
	for i, ev := range events {
		if refused[i] || ev.Time.IsZero() {
			continue
		}
		s.prom.ingestLag.Observe(max(0, now.Sub(ev.Time.Time).Seconds()))
	}
}
