package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/fw-serve/fw/dashboard/query"
)

// MLflowTrace is one trace of MLflow's tracing API (MLflow 3's TraceInfoV3)
// as the store keeps it: the columns it is found by, and the rest as the
// MLflow API's own JSON (Body), which the store does not read.
type MLflowTrace struct {
	ID           string // MLflow's trace ID, "tr-<32 hex digits>"
	ExperimentID string // MLflow's experiment ID ("0" for Default)
	RequestTime  int64  // Unix milliseconds
	Body         json.RawMessage
}

// MLflowSpan is one span of an MLflow trace: Content is the span as
// OTLP's JSON (the protobuf message with its field names), Text what
// trace.text searches (its name, attribute keys and values, events).
type MLflowSpan struct {
	TraceID string
	SpanID  string // 16 hex digits
	StartNs int64
	Content json.RawMessage
	Text    string
}

// TraceSummary is an MLflow trace as fw's own API lists it (a run's
// traces, GET /api/runs/{id}/traces).
type TraceSummary struct {
	TraceID         string `json:"trace_id"`
	Name            string `json:"name"`
	State           string `json:"state"`
	RequestTime     int64  `json:"request_time_ms"`
	DurationMs      *int64 `json:"duration_ms,omitempty"`
	RequestPreview  string `json:"request_preview,omitempty"`
	ResponsePreview string `json:"response_preview,omitempty"`
}

// Limits of the MLflow trace store.
const (
	// MaxMLflowSpansPerTrace bounds what GetMLflowSpans reads.
	MaxMLflowSpansPerTrace = 10_000
	// MaxMLflowTracesPerRead bounds GetMLflowTraces and DeleteMLflowTraces.
	MaxMLflowTracesPerRead = 1_000
	// MaxMLflowSpanBytesRead bounds the spans' JSON GetMLflowSpans reads:
	// it stops at the span that passes it.
	MaxMLflowSpanBytesRead = 64 << 20
	// MaxMLflowTextMatches bounds the set MLflowTraceIDsWithText returns.
	MaxMLflowTextMatches = 100_000
)

// MLflowTraces is the part of Store that keeps MLflow's traces.
type MLflowTraces interface {
	// UpdateMLflowTrace calls fn with the trace's current version (nil when
	// there is none) inside a write transaction and stores what it returns:
	// a trace writes it, nil deletes it (with its spans), ErrKeep leaves it.
	// fn runs in the store's writer: it must not block or call the store.
	UpdateMLflowTrace(ctx context.Context, id string, fn func(cur *MLflowTrace) (*MLflowTrace, error)) (MLflowTrace, error)
	// GetMLflowTraces reads the traces of ids that exist, in no order.
	GetMLflowTraces(ctx context.Context, ids []string) ([]MLflowTrace, error)
	// ScanMLflowTraces calls fn with the traces of the experiments by
	// request time (oldest first when asc, else newest; ties by ID) until
	// fn returns false. It reads them in pages and holds no database
	// connection while fn runs: fn may call the store.
	ScanMLflowTraces(ctx context.Context, experimentIDs []string, asc bool, fn func(MLflowTrace) bool) error
	// DeleteMLflowTraces deletes traces with their spans; it returns how
	// many existed.
	DeleteMLflowTraces(ctx context.Context, ids []string) (int, error)
	// MLflowTraceIDsWithText returns the IDs of the experiments' traces
	// with a span whose search text matches pattern (SQL LIKE, % and _),
	// ASCII case folded: a superset of the traces a case-kept match finds,
	// for the caller to refine. nil when more than MaxMLflowTextMatches
	// match (the caller then checks every trace).
	MLflowTraceIDsWithText(ctx context.Context, experimentIDs []string, pattern string) (map[string]bool, error)
	// PutMLflowSpans stores spans; a span stored again replaces the first.
	PutMLflowSpans(ctx context.Context, spans []MLflowSpan) error
	// GetMLflowSpans reads a trace's spans by start (at most
	// MaxMLflowSpansPerTrace, and MaxMLflowSpanBytesRead of them).
	GetMLflowSpans(ctx context.Context, traceID string) ([]MLflowSpan, error)
}

func (s *sqlStore) UpdateMLflowTrace(ctx context.Context, id string, fn func(cur *MLflowTrace) (*MLflowTrace, error)) (MLflowTrace, error) {
	var out MLflowTrace
	// Spans and the trace's info may create the row at once.
	err := s.writeRetryingConflict(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var e error
		out, e = s.updateMLflowTraceTx(ctx, tx, id, fn)
		return e
	})
	return out, err
}

func (s *sqlStore) updateMLflowTraceTx(ctx context.Context, tx *sql.Tx, id string, fn func(cur *MLflowTrace) (*MLflowTrace, error)) (MLflowTrace, error) {
	lock := ""
	if s.d == query.Postgres {
		lock = " FOR UPDATE"
	}
	var cur *MLflowTrace
	var t MLflowTrace
	var body string
	err := tx.QueryRowContext(ctx, s.q(`SELECT trace_id, experiment_id, request_time, body FROM mlflow_traces WHERE trace_id = ?`+lock), id).
		Scan(&t.ID, &t.ExperimentID, &t.RequestTime, &body)
	switch {
	case err == nil:
		t.Body = json.RawMessage(body)
		cur = &t
	case !isNoRows(err):
		return MLflowTrace{}, fmt.Errorf("reading trace %s: %w", id, err)
	}
	next, err := fn(cur)
	if errors.Is(err, ErrKeep) {
		if cur == nil {
			return MLflowTrace{}, nil
		}
		return *cur, nil
	}
	if err != nil {
		return MLflowTrace{}, err
	}
	if next == nil {
		if cur != nil {
			if err := s.deleteMLflowTracesTx(ctx, tx, []string{id}, nil); err != nil {
				return MLflowTrace{}, err
			}
		}
		return MLflowTrace{}, nil
	}
	next.ID = id
	if len(next.Body) > MaxRecordBytes {
		return MLflowTrace{}, errf(CodeInvalidArgument, "trace %s is %d bytes; at most %d", id, len(next.Body), MaxRecordBytes)
	}
	if cur == nil {
		_, err = s.exec(ctx, tx, `INSERT INTO mlflow_traces (trace_id, experiment_id, request_time, body) VALUES (?, ?, ?, ?)`,
			id, next.ExperimentID, next.RequestTime, string(next.Body))
	} else {
		_, err = s.exec(ctx, tx, `UPDATE mlflow_traces SET experiment_id = ?, request_time = ?, body = ? WHERE trace_id = ?`,
			next.ExperimentID, next.RequestTime, string(next.Body), id)
	}
	if err != nil {
		return MLflowTrace{}, fmt.Errorf("writing trace %s: %w", id, err)
	}
	return *next, nil
}

func (s *sqlStore) GetMLflowTraces(ctx context.Context, ids []string) ([]MLflowTrace, error) {
	if len(ids) > MaxMLflowTracesPerRead {
		return nil, errf(CodeBatchTooLarge, "%d traces in one read; at most %d", len(ids), MaxMLflowTracesPerRead)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	args := anys(ids)
	rows, err := s.rdb.QueryContext(ctx, s.q(`SELECT trace_id, experiment_id, request_time, body FROM mlflow_traces WHERE trace_id IN (`+placeholders(len(ids))+`)`), args...)
	if err != nil {
		return nil, fmt.Errorf("reading traces: %w", err)
	}
	var out []MLflowTrace
	err = scanMLflowTraces(rows, func(t MLflowTrace) bool { out = append(out, t); return true })
	if err != nil {
		return nil, fmt.Errorf("reading traces: %w", err)
	}
	return out, nil
}

func scanMLflowTraces(rows *sql.Rows, fn func(MLflowTrace) bool) error {
	defer rows.Close()
	for rows.Next() {
		var t MLflowTrace
		var body string
		if err := rows.Scan(&t.ID, &t.ExperimentID, &t.RequestTime, &body); err != nil {
			return err
		}
		t.Body = json.RawMessage(body)
		if !fn(t) {
			return nil
		}
	}
	return rows.Err()
}

// scanPage is how many traces ScanMLflowTraces reads per query: it holds
// no connection while its callback runs, so the callback may read the
// store.
const scanPage = 256

func (s *sqlStore) ScanMLflowTraces(ctx context.Context, experimentIDs []string, asc bool, fn func(MLflowTrace) bool) error {
	if len(experimentIDs) == 0 {
		return nil
	}
	if len(experimentIDs) > MaxMLflowTracesPerRead {
		return errf(CodeBatchTooLarge, "%d experiments in one search; at most %d", len(experimentIDs), MaxMLflowTracesPerRead)
	}
	base := anys(experimentIDs)
	c := s.collate()
	order, after := `request_time DESC, trace_id`+c, `(request_time < ? OR (request_time = ? AND trace_id`+c+` > ?))`
	if asc {
		order, after = `request_time, trace_id`+c, `(request_time > ? OR (request_time = ? AND trace_id`+c+` > ?))`
	}
	in := `SELECT trace_id, experiment_id, request_time, body FROM mlflow_traces WHERE experiment_id IN (` + placeholders(len(experimentIDs)) + `)`
	var last *MLflowTrace
	for {
		q, args := in, append([]any(nil), base...)
		if last != nil {
			q += ` AND ` + after
			args = append(args, last.RequestTime, last.RequestTime, last.ID)
		}
		args = append(args, scanPage)
		rows, err := s.rdb.QueryContext(ctx, s.q(q+` ORDER BY `+order+` LIMIT ?`), args...)
		if err != nil {
			return fmt.Errorf("searching traces: %w", err)
		}
		var page []MLflowTrace
		if err := scanMLflowTraces(rows, func(t MLflowTrace) bool { page = append(page, t); return true }); err != nil {
			return fmt.Errorf("searching traces: %w", err)
		}
		for _, t := range page {
			if !fn(t) {
				return nil
			}
		}
		if len(page) < scanPage {
			return nil
		}
		last = &page[len(page)-1]
	}
}

func (s *sqlStore) DeleteMLflowTraces(ctx context.Context, ids []string) (int, error) {
	if len(ids) > MaxMLflowTracesPerRead {
		return 0, errf(CodeBatchTooLarge, "%d traces in one delete; at most %d", len(ids), MaxMLflowTracesPerRead)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	var n int
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return s.deleteMLflowTracesTx(ctx, tx, ids, &n)
	}, nil)
	return n, err
}

func (s *sqlStore) deleteMLflowTracesTx(ctx context.Context, tx *sql.Tx, ids []string, n *int) error {
	args := anys(ids)
	in := placeholders(len(ids))
	res, err := s.exec(ctx, tx, `DELETE FROM mlflow_traces WHERE trace_id IN (`+in+`)`, args...)
	if err != nil {
		return fmt.Errorf("deleting traces: %w", err)
	}
	if n != nil {
		c, _ := res.RowsAffected()
		*n = int(c)
	}
	if _, err := s.exec(ctx, tx, `DELETE FROM mlflow_trace_spans WHERE trace_id IN (`+in+`)`, args...); err != nil {
		return fmt.Errorf("deleting the traces' spans: %w", err)
	}
	return nil
}

func (s *sqlStore) MLflowTraceIDsWithText(ctx context.Context, experimentIDs []string, pattern string) (map[string]bool, error) {
	if len(experimentIDs) == 0 {
		return map[string]bool{}, nil
	}
	if len(experimentIDs) > MaxMLflowTracesPerRead {
		return nil, errf(CodeBatchTooLarge, "%d experiments in one search; at most %d", len(experimentIDs), MaxMLflowTracesPerRead)
	}
	args := anys(experimentIDs)
	like := "LIKE" // SQLite's LIKE folds ASCII case and has no escape character
	if s.d == query.Postgres {
		like = "ILIKE ? ESCAPE ''" // no escape character either: a backslash is itself, as fw's LIKE reads it
	} else {
		like += " ?"
	}
	args = append(args, pattern, MaxMLflowTextMatches+1)
	rows, err := s.rdb.QueryContext(ctx, s.q(`SELECT DISTINCT s.trace_id FROM mlflow_trace_spans s JOIN mlflow_traces t ON t.trace_id = s.trace_id
WHERE t.experiment_id IN (`+placeholders(len(experimentIDs))+`) AND s.text `+like+` LIMIT ?`), args...)
	if err != nil {
		return nil, fmt.Errorf("searching the traces' text: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("searching the traces' text: %w", err)
		}
		out[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("searching the traces' text: %w", err)
	}
	if len(out) > MaxMLflowTextMatches {
		return nil, nil
	}
	return out, nil
}

func (s *sqlStore) PutMLflowSpans(ctx context.Context, spans []MLflowSpan) error {
	if len(spans) > MaxSpansPerBatch {
		return errf(CodeBatchTooLarge, "%d spans in one batch; at most %d", len(spans), MaxSpansPerBatch)
	}
	if len(spans) == 0 {
		return nil
	}
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for _, sp := range spans {
			if _, err := s.exec(ctx, tx, `INSERT INTO mlflow_trace_spans (trace_id, span_id, start_ns, content, text) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (trace_id, span_id) DO UPDATE SET start_ns = excluded.start_ns, content = excluded.content, text = excluded.text`,
				sp.TraceID, sp.SpanID, sp.StartNs, string(sp.Content), sp.Text); err != nil {
				return fmt.Errorf("storing span %s/%s: %w", sp.TraceID, sp.SpanID, err)
			}
		}
		return nil
	}, nil)
}

func (s *sqlStore) GetMLflowSpans(ctx context.Context, traceID string) ([]MLflowSpan, error) {
	rows, err := s.rdb.QueryContext(ctx, s.q(`SELECT trace_id, span_id, start_ns, content, text FROM mlflow_trace_spans WHERE trace_id = ? ORDER BY start_ns, span_id LIMIT ?`), traceID, MaxMLflowSpansPerTrace)
	if err != nil {
		return nil, fmt.Errorf("reading trace %s's spans: %w", traceID, err)
	}
	defer rows.Close()
	out := []MLflowSpan{}
	read := 0
	for rows.Next() && read < MaxMLflowSpanBytesRead {
		var sp MLflowSpan
		var content string
		if err := rows.Scan(&sp.TraceID, &sp.SpanID, &sp.StartNs, &content, &sp.Text); err != nil {
			return nil, fmt.Errorf("reading trace %s's spans: %w", traceID, err)
		}
		sp.Content = json.RawMessage(content)
		read += len(content) + len(sp.Text)
		out = append(out, sp)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading trace %s's spans: %w", traceID, err)
	}
	return out, nil
}

// anys is ss as query arguments.
func anys(ss []string) []any {
	out := make([]any, len(ss), len(ss)+2)
	for i, v := range ss {
		out[i] = v
	}
	return out
}

// placeholders is "?, ?, ..." for n values.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}
