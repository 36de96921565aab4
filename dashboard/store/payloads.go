package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// Payload is one request/response record a deployment logged (fw serve
// --log-payloads; its JSON is payloadlog.Record).
type Payload struct {
	ID         string          `json:"id"`
	Deployment string          `json:"deployment"`
	Model      string          `json:"model"`
	Version    string          `json:"version"`
	Time       time.Time       `json:"time"`
	Failed     bool            `json:"failed"`
	Record     json.RawMessage `json:"record"`
}

// Limits of the payload store.
const (
	// MaxPayloadsPerBatch bounds one PutPayloads call.
	MaxPayloadsPerBatch = 5_000
	// MaxPayloadsListed bounds one ListPayloads call.
	MaxPayloadsListed = 5_000
)

// PayloadQuery selects logged records: a deployment's (or a model
// version's), within [Since, Until), newest first unless Oldest.
type PayloadQuery struct {
	Deployment     string
	Model, Version string
	Since, Until   time.Time // zero: no bound
	Oldest         bool
	Limit          int // 1 to MaxPayloadsListed (default 100)
}

// PutPayloads stores records; one already stored (the same deployment and
// ID, sent again from a spool) is kept as it was. It returns how many were
// new.
func (s *sqlStore) PutPayloads(ctx context.Context, ps []Payload) (int, error) {
	if len(ps) > MaxPayloadsPerBatch {
		return 0, errf(CodeBatchTooLarge, "%d payload records in one batch; at most %d", len(ps), MaxPayloadsPerBatch)
	}
	now := time.Now().UnixNano()
	added := 0
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		added = 0
		for _, p := range ps {
			failed := 0
			if p.Failed {
				failed = 1
			}
			res, err := s.exec(ctx, tx, `INSERT INTO payloads (id, deployment, model, version, time_ns, received, failed, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (deployment, id) DO NOTHING`, p.ID, p.Deployment, p.Model, p.Version, p.Time.UnixNano(), now, failed, string(p.Record))
			if err != nil {
				return fmt.Errorf("storing payload record %s: %w", p.ID, err)
			}
			if n, _ := res.RowsAffected(); n > 0 {
				added++
			}
		}
		return nil
	}, nil)
	return added, err
}

// ListPayloads reads the records q selects.
func (s *sqlStore) ListPayloads(ctx context.Context, q PayloadQuery) ([]Payload, error) {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	q.Limit = min(q.Limit, MaxPayloadsListed)
	where, args := `1 = 1`, []any{}
	if q.Deployment != "" {
		where += ` AND deployment = ?`
		args = append(args, q.Deployment)
	}
	if q.Model != "" {
		where += ` AND model = ?`
		args = append(args, q.Model)
	}
	if q.Version != "" {
		where += ` AND version = ?`
		args = append(args, q.Version)
	}
	if !q.Since.IsZero() {
		where += ` AND time_ns >= ?`
		args = append(args, q.Since.UnixNano())
	}
	if !q.Until.IsZero() {
		where += ` AND time_ns < ?`
		args = append(args, q.Until.UnixNano())
	}
	order := `time_ns DESC, id DESC`
	if q.Oldest {
		order = `time_ns, id`
	}
	args = append(args, q.Limit)
	rows, err := s.rdb.QueryContext(ctx, s.q(`SELECT id, deployment, model, version, time_ns, failed, record FROM payloads WHERE `+where+` ORDER BY `+order+` LIMIT ?`), args...)
	if err != nil {
		return nil, fmt.Errorf("listing payload records: %w", err)
	}
	defer rows.Close()
	out := []Payload{}
	for rows.Next() {
		var p Payload
		var ns int64
		var failed int
		var rec string
		if err := rows.Scan(&p.ID, &p.Deployment, &p.Model, &p.Version, &ns, &failed, &rec); err != nil {
			return nil, fmt.Errorf("listing payload records: %w", err)
		}
		p.Time, p.Failed, p.Record = time.Unix(0, ns).UTC(), failed != 0, json.RawMessage(rec)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing payload records: %w", err)
	}
	return out, nil
}

// PrunePayloads removes records received before cutoff, then the oldest
// received beyond keep; it returns how many it removed.
func (s *sqlStore) PrunePayloads(ctx context.Context, cutoff time.Time, keep int) (int64, error) {
	var removed int64
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		removed = 0
		res, err := s.exec(ctx, tx, `DELETE FROM payloads WHERE received < ?`, cutoff.UnixNano())
		if err != nil {
			return fmt.Errorf("pruning old payload records: %w", err)
		}
		n, _ := res.RowsAffected()
		removed += n
		var total int64
		if err := s.queryRow(ctx, tx, `SELECT COUNT(*) FROM payloads`).Scan(&total); err != nil {
			return fmt.Errorf("counting payload records: %w", err)
		}
		if total <= int64(keep) {
			return nil
		}
		var edge int64
		if err := s.queryRow(ctx, tx, `SELECT received FROM payloads ORDER BY received DESC LIMIT 1 OFFSET ?`, keep).Scan(&edge); err != nil {
			return fmt.Errorf("finding the payload records beyond %d: %w", keep, err)
		}
		res, err = s.exec(ctx, tx, `DELETE FROM payloads WHERE received <= ?`, edge)
		if err != nil {
			return fmt.Errorf("pruning payload records beyond %d: %w", keep, err)
		}
		n, _ = res.RowsAffected()
		removed += n
		return nil
	}, nil)
	return removed, err
}
