package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fw-serve/fw/dashboard/query"
)

// Lease says which dashboard process (Owner) is responsible for something
// (Name: a training job, a deployment, the replica itself) until Expires.
// The owner renews its leases; when it stops (killed, cut off from the
// database), they expire and another dashboard may take them over.
// Times are the writers' clocks: dashboards sharing a database need clocks
// that agree to well within a lease's time to live (NTP).
type Lease struct {
	Name     string    `json:"name"`
	Owner    string    `json:"owner"`
	Expires  time.Time `json:"expires"`
	Acquired time.Time `json:"acquired"`
	Renewed  time.Time `json:"renewed"`
	// Info is what the owner says about itself or the thing (JSON).
	Info json.RawMessage `json:"info,omitempty"`
}

// Expired reports whether the lease has run out at now.
func (l Lease) Expired(now time.Time) bool { return !now.Before(l.Expires) }

// Leases is the part of Store that keeps leases: one row per name, taken
// and renewed in the store's write transactions (under the row lock on
// PostgreSQL), so at most one owner holds a name at a time.
type Leases interface {
	// AcquireLease gives name to owner until now+ttl, with info, when no
	// one holds it, when owner already does, or when take says the current
	// lease may be taken (nil take: only when it has expired). ok is false
	// when another owner keeps it; the lease returned is then theirs.
	AcquireLease(ctx context.Context, name, owner string, ttl time.Duration, info json.RawMessage, take func(cur Lease) bool) (l Lease, ok bool, err error)
	// RenewLeases extends every lease owner holds to now+ttl and returns
	// the names it holds (a name another owner took over is not among them).
	RenewLeases(ctx context.Context, owner string, ttl time.Duration) ([]string, error)
	// ReleaseLease gives name up if owner holds it; false when it did not.
	ReleaseLease(ctx context.Context, name, owner string) (bool, error)
	// GetLease returns the lease of name (code not_found when none).
	GetLease(ctx context.Context, name string) (Lease, error)
	// ListLeases returns the leases whose name starts with prefix, by name.
	ListLeases(ctx context.Context, prefix string) ([]Lease, error)
}

// MaxLeaseInfo bounds a lease's Info.
const MaxLeaseInfo = 4096

const leaseCols = `name, owner, expires, acquired, renewed, info`

func scanLease(sc interface{ Scan(...any) error }) (Lease, error) {
	var l Lease
	var exp, acq, ren int64
	var info string
	if err := sc.Scan(&l.Name, &l.Owner, &exp, &acq, &ren, &info); err != nil {
		return Lease{}, err
	}
	l.Expires, l.Acquired, l.Renewed = fromNanos(exp), fromNanos(acq), fromNanos(ren)
	if info != "" {
		l.Info = json.RawMessage(info)
	}
	return l, nil
}

func validLease(name, owner string, ttl time.Duration, info json.RawMessage) error {
	if err := ValidateKey(name); err != nil {
		return storeErr(CodeInvalidArgument, "lease name", err)
	}
	if err := ValidateKey(owner); err != nil {
		return storeErr(CodeInvalidArgument, "lease owner", err)
	}
	if ttl <= 0 || ttl > 24*time.Hour {
		return errf(CodeInvalidArgument, "lease time to live %s is not within (0, 24h]", ttl)
	}
	if len(info) > MaxLeaseInfo || (len(info) > 0 && !json.Valid(info)) {
		return errf(CodeInvalidArgument, "lease info must be JSON of at most %d bytes", MaxLeaseInfo)
	}
	return nil
}

// AcquireLease implements Leases.
func (s *sqlStore) AcquireLease(ctx context.Context, name, owner string, ttl time.Duration, info json.RawMessage, take func(Lease) bool) (Lease, bool, error) {
	if err := validLease(name, owner, ttl, info); err != nil {
		return Lease{}, false, err
	}
	var out Lease
	var ok bool
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		now := time.Now()
		if _, err := s.exec(ctx, tx, `INSERT INTO leases (name, owner, expires, acquired, renewed, info) VALUES (?, '', 0, 0, 0, '') ON CONFLICT (name) DO NOTHING`, name); err != nil {
			return fmt.Errorf("creating lease %s: %w", name, err)
		}
		lock := ""
		if s.d == query.Postgres {
			lock = " FOR UPDATE"
		}
		cur, err := scanLease(tx.QueryRowContext(ctx, s.q(`SELECT `+leaseCols+` FROM leases WHERE name = ?`+lock), name))
		if err != nil {
			return fmt.Errorf("reading lease %s: %w", name, err)
		}
		free := cur.Owner == "" || cur.Owner == owner || cur.Expired(now)
		if !free && take != nil {
			free = take(cur)
		}
		if !free {
			out, ok = cur, false
			return nil
		}
		acquired := now
		if cur.Owner == owner {
			acquired = cur.Acquired
		}
		out = Lease{Name: name, Owner: owner, Expires: now.Add(ttl), Acquired: acquired, Renewed: now, Info: info}
		ok = true
		_, err = s.exec(ctx, tx, `UPDATE leases SET owner = ?, expires = ?, acquired = ?, renewed = ?, info = ? WHERE name = ?`,
			owner, out.Expires.UnixNano(), acquired.UnixNano(), now.UnixNano(), string(info), name)
		if err != nil {
			return fmt.Errorf("taking lease %s: %w", name, err)
		}
		return nil
	}, nil)
	if err != nil {
		return Lease{}, false, err
	}
	return out, ok, nil
}

// RenewLeases implements Leases.
func (s *sqlStore) RenewLeases(ctx context.Context, owner string, ttl time.Duration) ([]string, error) {
	if err := validLease("x", owner, ttl, nil); err != nil {
		return nil, err
	}
	var names []string
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		names = names[:0]
		now := time.Now()
		if _, err := s.exec(ctx, tx, `UPDATE leases SET expires = ?, renewed = ? WHERE owner = ?`, now.Add(ttl).UnixNano(), now.UnixNano(), owner); err != nil {
			return fmt.Errorf("renewing the leases of %s: %w", owner, err)
		}
		rows, err := tx.QueryContext(ctx, s.q(`SELECT name FROM leases WHERE owner = ? ORDER BY name`), owner)
		if err != nil {
			return fmt.Errorf("listing the leases of %s: %w", owner, err)
		}
		defer rows.Close()
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				return err
			}
			names = append(names, n)
		}
		return rows.Err()
	}, nil)
	return names, err
}

// ReleaseLease implements Leases.
func (s *sqlStore) ReleaseLease(ctx context.Context, name, owner string) (bool, error) {
	if err := validLease(name, owner, time.Second, nil); err != nil {
		return false, err
	}
	var n int64
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := s.exec(ctx, tx, `DELETE FROM leases WHERE name = ? AND owner = ?`, name, owner)
		if err != nil {
			return fmt.Errorf("releasing lease %s: %w", name, err)
		}
		n, err = res.RowsAffected()
		return err
	}, nil)
	return n > 0, err
}

// GetLease implements Leases.
func (s *sqlStore) GetLease(ctx context.Context, name string) (Lease, error) {
	if err := ValidateKey(name); err != nil {
		return Lease{}, storeErr(CodeInvalidArgument, "lease name", err)
	}
	l, err := scanLease(s.rdb.QueryRowContext(ctx, s.q(`SELECT `+leaseCols+` FROM leases WHERE name = ? AND owner <> ''`), name))
	if isNoRows(err) {
		return Lease{}, errf(CodeNotFound, "no lease %q", name)
	}
	if err != nil {
		return Lease{}, fmt.Errorf("reading lease %s: %w", name, err)
	}
	return l, nil
}

// ListLeases implements Leases.
func (s *sqlStore) ListLeases(ctx context.Context, prefix string) ([]Lease, error) {
	if len(prefix) > 250 {
		return nil, errf(CodeInvalidArgument, "lease prefix longer than 250 bytes")
	}
	// A range on the primary key, not LIKE: a prefix may hold % or _.
	rows, err := s.rdb.QueryContext(ctx, s.q(`SELECT `+leaseCols+` FROM leases WHERE name`+s.collate()+` >= ? AND owner <> '' ORDER BY name`+s.collate()), prefix)
	if err != nil {
		return nil, fmt.Errorf("listing leases %q: %w", prefix, err)
	}
	defer rows.Close()
	var out []Lease
	for rows.Next() {
		l, err := scanLease(rows)
		if err != nil {
			return nil, fmt.Errorf("listing leases %q: %w", prefix, err)
		}
		if len(l.Name) < len(prefix) || l.Name[:len(prefix)] != prefix {
			break // past the prefix (names are in byte order)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing leases %q: %w", prefix, err)
	}
	return out, nil
}
