package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fw-serve/fw/dashboard/query"
)

// Record is one JSON document of the dashboard's own state, kept in the
// store's database so that every dashboard sharing it (replicas on one
// PostgreSQL) sees the same: a registered model with its versions and
// aliases, an export job, a deployment, a training job. Kind names the
// collection, Key the document in it; the store does not look inside Body.
type Record struct {
	Kind string
	Key  string
	// Rev is 1 when the record is created and grows by one with every write.
	Rev     int64
	Created time.Time
	Updated time.Time
	Body    json.RawMessage
}

// Records is the part of Store that keeps Records. Writes go through the
// store's writer like every other write; UpdateRecord's read-modify-write
// holds the record's row lock on PostgreSQL, so two dashboards updating the
// same record one after the other never lose either change.
type Records interface {
	// GetRecord returns one record (code not_found when it does not exist).
	GetRecord(ctx context.Context, kind, key string) (Record, error)
	// ListRecords returns every record of a kind, by key (at most
	// MaxRecordsPerKind: a kind is meant to hold the dashboard's models,
	// jobs and deployments, not data points).
	ListRecords(ctx context.Context, kind string) ([]Record, error)
	// UpdateRecord calls fn with the record's current version (nil when it
	// does not exist) inside a write transaction and stores what fn returns:
	// a body writes the record, a nil body deletes it, ErrKeep leaves it as
	// it is, any other error aborts and is returned. fn runs in the store's
	// writer: it must not block or call the store. It returns the record as
	// written (the current one for ErrKeep, the zero Record when deleted).
	UpdateRecord(ctx context.Context, kind, key string, fn func(cur *Record) (json.RawMessage, error)) (Record, error)
	// DeleteRecord deletes a record; false when there was none.
	DeleteRecord(ctx context.Context, kind, key string) (bool, error)
}

// ErrKeep, returned by an UpdateRecord callback, leaves the record as it is.
var ErrKeep = errors.New("store: keep the record unchanged")

// Record limits.
const (
	// MaxRecordBytes bounds one record's body.
	MaxRecordBytes = 16 << 20
	// MaxRecordsPerKind bounds what ListRecords reads.
	MaxRecordsPerKind = 100000
)

func validRecordName(kind, key string) error {
	if err := ValidateKey(kind); err != nil {
		return storeErr(CodeInvalidArgument, "record kind", err)
	}
	if err := ValidateKey(key); err != nil {
		return storeErr(CodeInvalidArgument, "record key", err)
	}
	return nil
}

const recordCols = `kind, key, rev, created, updated, body`

func scanRecord(sc interface{ Scan(...any) error }) (Record, error) {
	var r Record
	var created, updated int64
	var body string
	if err := sc.Scan(&r.Kind, &r.Key, &r.Rev, &created, &updated, &body); err != nil {
		return Record{}, err
	}
	r.Created, r.Updated, r.Body = fromNanos(created), fromNanos(updated), json.RawMessage(body)
	return r, nil
}

// GetRecord implements Records.
func (s *sqlStore) GetRecord(ctx context.Context, kind, key string) (Record, error) {
	if err := validRecordName(kind, key); err != nil {
		return Record{}, err
	}
	r, err := scanRecord(s.rdb.QueryRowContext(ctx, s.q(`SELECT `+recordCols+` FROM records WHERE kind = ? AND key = ?`), kind, key))
	if isNoRows(err) {
		return Record{}, errf(CodeNotFound, "no %s %q", kind, key)
	}
	if err != nil {
		return Record{}, fmt.Errorf("reading %s %q: %w", kind, key, err)
	}
	return r, nil
}

// ListRecords implements Records.
func (s *sqlStore) ListRecords(ctx context.Context, kind string) ([]Record, error) {
	if err := ValidateKey(kind); err != nil {
		return nil, storeErr(CodeInvalidArgument, "record kind", err)
	}
	rows, err := s.rdb.QueryContext(ctx, s.q(`SELECT `+recordCols+` FROM records WHERE kind = ? ORDER BY key`+s.collate()+` LIMIT ?`), kind, MaxRecordsPerKind)
	if err != nil {
		return nil, fmt.Errorf("listing %s records: %w", kind, err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("listing %s records: %w", kind, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing %s records: %w", kind, err)
	}
	return out, nil
}

// UpdateRecord implements Records.
func (s *sqlStore) UpdateRecord(ctx context.Context, kind, key string, fn func(cur *Record) (json.RawMessage, error)) (Record, error) {
	if err := validRecordName(kind, key); err != nil {
		return Record{}, err
	}
	var out Record
	err := s.writeRetryingConflict(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var e error
		out, e = s.updateRecordTx(ctx, tx, kind, key, fn)
		return e
	})
	return out, err
}

// writeRetryingConflict is write for a read-modify-write that may insert:
// two dashboards creating the same row at once, the second insert fails on
// the primary key, and fn runs again (up to 3 times) to see the first's.
func (s *sqlStore) writeRetryingConflict(ctx context.Context, fn func(context.Context, *sql.Tx) error) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = s.write(ctx, fn, nil); !isUniqueViolation(err) {
			break
		}
	}
	return err
}

func (s *sqlStore) updateRecordTx(ctx context.Context, tx *sql.Tx, kind, key string, fn func(cur *Record) (json.RawMessage, error)) (Record, error) {
	lock := ""
	if s.d == query.Postgres {
		lock = " FOR UPDATE"
	}
	var cur *Record
	r, err := scanRecord(tx.QueryRowContext(ctx, s.q(`SELECT `+recordCols+` FROM records WHERE kind = ? AND key = ?`+lock), kind, key))
	switch {
	case err == nil:
		cur = &r
	case !isNoRows(err):
		return Record{}, fmt.Errorf("reading %s %q: %w", kind, key, err)
	}
	var view *Record
	if cur != nil {
		c := *cur
		c.Body = append(json.RawMessage(nil), cur.Body...)
		view = &c
	}
	body, err := fn(view)
	if errors.Is(err, ErrKeep) {
		if cur == nil {
			return Record{}, nil
		}
		return *cur, nil
	}
	if err != nil {
		return Record{}, err
	}
	if body == nil {
		if cur != nil {
			if _, err := s.exec(ctx, tx, `DELETE FROM records WHERE kind = ? AND key = ?`, kind, key); err != nil {
				return Record{}, fmt.Errorf("deleting %s %q: %w", kind, key, err)
			}
		}
		return Record{}, nil
	}
	if len(body) > MaxRecordBytes {
		return Record{}, errf(CodeInvalidArgument, "%s %q is %d bytes; the limit is %d", kind, key, len(body), MaxRecordBytes)
	}
	if !json.Valid(body) {
		return Record{}, errf(CodeInvalidArgument, "%s %q: the body is not valid JSON", kind, key)
	}
	now := time.Now().UnixNano()
	if cur == nil {
		if _, err := s.exec(ctx, tx, `INSERT INTO records (kind, key, rev, created, updated, body) VALUES (?, ?, 1, ?, ?, ?)`, kind, key, now, now, string(body)); err != nil {
			return Record{}, fmt.Errorf("creating %s %q: %w", kind, key, err)
		}
		return Record{Kind: kind, Key: key, Rev: 1, Created: fromNanos(now), Updated: fromNanos(now), Body: body}, nil
	}
	if _, err := s.exec(ctx, tx, `UPDATE records SET rev = rev + 1, updated = ?, body = ? WHERE kind = ? AND key = ?`, now, string(body), kind, key); err != nil {
		return Record{}, fmt.Errorf("writing %s %q: %w", kind, key, err)
	}
	return Record{Kind: kind, Key: key, Rev: cur.Rev + 1, Created: cur.Created, Updated: fromNanos(now), Body: body}, nil
}

// DeleteRecord implements Records.
func (s *sqlStore) DeleteRecord(ctx context.Context, kind, key string) (bool, error) {
	if err := validRecordName(kind, key); err != nil {
		return false, err
	}
	var n int64
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := s.exec(ctx, tx, `DELETE FROM records WHERE kind = ? AND key = ?`, kind, key)
		if err != nil {
			return fmt.Errorf("deleting %s %q: %w", kind, key, err)
		}
		n, err = res.RowsAffected()
		return err
	}, nil)
	return n > 0, err
}
