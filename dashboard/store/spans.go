package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// Span is one span of a request trace the dashboard received over OTLP
// (POST /v1/traces): a deployment's request, its phases, its engine calls.
type Span struct {
	TraceID  string `json:"trace_id"`  // 32 hex digits
	SpanID   string `json:"span_id"`   // 16 hex digits
	ParentID string `json:"parent_id"` // "" for a root span
	// Service is the sender's service.name; Deployment its fw.deployment
	// resource attribute (a deployment the dashboard manages), or "".
	Service    string `json:"service"`
	Deployment string `json:"deployment,omitempty"`
	Name       string `json:"name"`
	// Kind is OTLP's span kind: 1 internal, 2 server, 3 client, 4
	// producer, 5 consumer (0 unspecified).
	Kind  int   `json:"kind"`
	Start int64 `json:"start_ns"` // Unix nanoseconds
	End   int64 `json:"end_ns"`
	// Status is OTLP's status code: 0 unset, 1 ok, 2 error.
	Status        int    `json:"status"`
	StatusMessage string `json:"status_message,omitempty"`
	// Attributes is a JSON object of the span's attributes; Links a JSON
	// array of {"trace_id", "span_id"}.
	Attributes json.RawMessage `json:"attributes"`
	Links      json.RawMessage `json:"links"`
}

// Limits of the trace store.
const (
	// MaxSpansPerBatch bounds one PutSpans call.
	MaxSpansPerBatch = 10_000
	// MaxSpansPerTrace bounds what GetTrace reads.
	MaxSpansPerTrace = 5_000
	// MaxRequestsListed bounds ListRequests.
	MaxRequestsListed = 500
)

// RequestQuery selects the requests (server spans) ListRequests reads.
type RequestQuery struct {
	Deployment string // "": every sender
	Service    string // "": any
	// Slowest orders by duration, longest first; else by start, newest
	// first.
	Slowest bool
	Since   time.Time // zero: no bound
	Limit   int       // 1 to MaxRequestsListed (default 50)
}

// PutSpans stores spans; a span already stored (the same trace and span
// IDs, sent again by a retry) is kept as it was.
func (s *sqlStore) PutSpans(ctx context.Context, spans []Span) error {
	if len(spans) > MaxSpansPerBatch {
		return errf(CodeBatchTooLarge, "%d spans in one batch; at most %d", len(spans), MaxSpansPerBatch)
	}
	now := time.Now().UnixNano()
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for _, sp := range spans {
			attrs, links := string(sp.Attributes), string(sp.Links)
			if attrs == "" {
				attrs = "{}"
			}
			if links == "" {
				links = "[]"
			}
			if _, err := s.exec(ctx, tx, `INSERT INTO spans (trace_id, span_id, parent_id, service, deployment, name, kind, start_ns, end_ns, duration_ns, status, status_message, attributes, links, received)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (trace_id, span_id) DO NOTHING`,
				sp.TraceID, sp.SpanID, sp.ParentID, sp.Service, sp.Deployment, sp.Name, sp.Kind, sp.Start, sp.End, sp.End-sp.Start,
				sp.Status, sp.StatusMessage, attrs, links, now); err != nil {
				return fmt.Errorf("storing span %s/%s: %w", sp.TraceID, sp.SpanID, err)
			}
		}
		return nil
	}, nil)
}

// PruneSpans removes the spans received before cutoff, then the oldest
// received beyond keep spans; it returns how many it removed.
func (s *sqlStore) PruneSpans(ctx context.Context, cutoff time.Time, keep int) (int64, error) {
	var removed int64
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := s.exec(ctx, tx, `DELETE FROM spans WHERE received < ?`, cutoff.UnixNano())
		if err != nil {
			return fmt.Errorf("pruning old spans: %w", err)
		}
		n, _ := res.RowsAffected()
		removed += n
		var total int64
		if err := s.queryRow(ctx, tx, `SELECT COUNT(*) FROM spans`).Scan(&total); err != nil {
			return fmt.Errorf("counting spans: %w", err)
		}
		if total <= int64(keep) {
			return nil
		}
		var edge int64
		if err := s.queryRow(ctx, tx, `SELECT received FROM spans ORDER BY received DESC LIMIT 1 OFFSET ?`, keep).Scan(&edge); err != nil {
			return fmt.Errorf("finding the spans beyond %d: %w", keep, err)
		}
		res, err = s.exec(ctx, tx, `DELETE FROM spans WHERE received <= ?`, edge)
		if err != nil {
			return fmt.Errorf("pruning spans beyond %d: %w", keep, err)
		}
		n, _ = res.RowsAffected()
		removed += n
		return nil
	}, nil)
	return removed, err
}

const spanCols = `trace_id, span_id, parent_id, service, deployment, name, kind, start_ns, end_ns, status, status_message, attributes, links`

func scanSpans(rows *sql.Rows) ([]Span, error) {
	defer rows.Close()
	out := []Span{}
	for rows.Next() {
		var sp Span
		var attrs, links string
		if err := rows.Scan(&sp.TraceID, &sp.SpanID, &sp.ParentID, &sp.Service, &sp.Deployment, &sp.Name, &sp.Kind, &sp.Start, &sp.End,
			&sp.Status, &sp.StatusMessage, &attrs, &links); err != nil {
			return nil, err
		}
		sp.Attributes, sp.Links = json.RawMessage(attrs), json.RawMessage(links)
		out = append(out, sp)
	}
	return out, rows.Err()
}

// ListRequests reads the server spans (the requests) q selects.
func (s *sqlStore) ListRequests(ctx context.Context, q RequestQuery) ([]Span, error) {
	if q.Limit <= 0 {
		q.Limit = 50
	}
	q.Limit = min(q.Limit, MaxRequestsListed)
	where, args := `kind = 2`, []any{}
	// The equality columns lead the indexes: an empty filter is matched as
	// a range over every value so that the index still serves the order.
	if q.Deployment != "" {
		where += ` AND deployment = ?`
		args = append(args, q.Deployment)
	}
	if q.Service != "" {
		where += ` AND service = ?`
		args = append(args, q.Service)
	}
	if !q.Since.IsZero() {
		where += ` AND start_ns >= ?`
		args = append(args, q.Since.UnixNano())
	}
	order := `start_ns DESC`
	if q.Slowest {
		order = `duration_ns DESC`
	}
	args = append(args, q.Limit)
	rows, err := s.rdb.QueryContext(ctx, s.q(`SELECT `+spanCols+` FROM spans WHERE `+where+` ORDER BY `+order+`, trace_id, span_id LIMIT ?`), args...)
	if err != nil {
		return nil, fmt.Errorf("listing requests: %w", err)
	}
	out, err := scanSpans(rows)
	if err != nil {
		return nil, fmt.Errorf("listing requests: %w", err)
	}
	return out, nil
}

// GetTrace reads a trace's spans (at most MaxSpansPerTrace), by start.
func (s *sqlStore) GetTrace(ctx context.Context, traceID string) ([]Span, error) {
	rows, err := s.rdb.QueryContext(ctx, s.q(`SELECT `+spanCols+` FROM spans WHERE trace_id = ? ORDER BY start_ns, span_id LIMIT ?`), traceID, MaxSpansPerTrace)
	if err != nil {
		return nil, fmt.Errorf("reading trace %s: %w", traceID, err)
	}
	out, err := scanSpans(rows)
	if err != nil {
		return nil, fmt.Errorf("reading trace %s: %w", traceID, err)
	}
	return out, nil
}
