package store

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/fw-serve/fw/dashboard/query"
)

// Downsampling. Every metric write also updates rollups: per (run, key),
// blocks of 16, 256 and 4096 steps with their first and last step, min,
// max, last value and count (table metric_rollup, migration 2). To answer
// "at most N buckets" over steps [lo, hi], Metrics picks the coarsest block
// size B no wider than a bucket, makes the bucket width a multiple of B
// aligned to B, and reads whole blocks from the rollup plus raw points only
// for the partial blocks at the edges of the range. A million points to 1000
// buckets reads about 4000 rollup rows instead of a million points. Each
// bucket keeps min, max and last, so a single spike survives as its max.

// Metrics implements Store.
func (s *sqlStore) Metrics(ctx context.Context, runID string, q MetricsQuery) ([]Series, error) {
	rid, err := s.runRID(ctx, runID)
	if err != nil {
		return nil, err
	}
	n := q.MaxPoints
	if n <= 0 {
		n = 1000
	}
	if n > 100000 {
		return nil, errf(CodeInvalidArgument, "max points %d is over 100000", n)
	}
	kind := kindMetric
	if q.System {
		kind = kindSystem
	}
	a := query.NewArgs(s.d)
	var text strings.Builder
	text.WriteString(`SELECT k.id, k.name FROM metric_summary s JOIN metric_keys k ON k.id = s.key_id WHERE s.run_rid = ` + a.Add(rid) + ` AND k.kind = ` + a.Add(int64(kind)))
	if len(q.Keys) > 0 {
		text.WriteString(" AND k.name IN " + inList(a, q.Keys))
	}
	text.WriteString(" ORDER BY k.name")
	rows, err := s.rdb.QueryContext(ctx, text.String(), a.Values()...)
	if err != nil {
		return nil, fmt.Errorf("listing metric keys of run %s: %w", runID, err)
	}
	type keyInfo struct {
		id   int64
		name string
	}
	var keys []keyInfo
	for rows.Next() {
		var k keyInfo
		if err := rows.Scan(&k.id, &k.name); err != nil {
			rows.Close()
			return nil, fmt.Errorf("listing metric keys of run %s: %w", runID, err)
		}
		keys = append(keys, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing metric keys of run %s: %w", runID, err)
	}
	ids := make([]int64, len(keys))
	for i, k := range keys {
		ids[i] = k.id
	}
	small, err := s.smallSeries(ctx, rid, ids, n, q.MinStep, q.MaxStep)
	if err != nil {
		return nil, fmt.Errorf("reading the metrics of run %s: %w", runID, err)
	}
	out := make([]Series, 0, len(keys))
	for _, k := range keys {
		if ser, ok := small[k.id]; ok {
			ser.Key = k.name
			out = append(out, ser)
			continue
		}
		ser, err := s.series(ctx, rid, k.id, n, q.MinStep, q.MaxStep)
		if err != nil {
			return nil, fmt.Errorf("reading metric %q of run %s: %w", k.name, runID, err)
		}
		ser.Key = k.name
		out = append(out, ser)
	}
	return out, nil
}

// item is a raw point (first == last, n == 1) or a rollup block.
type item struct {
	first, last   int64
	min, max, lst sql.NullFloat64
	n             int64
}

// floorDiv and ceilDiv round a/b (b > 0) down and up, for negative a too
// (steps may be negative, as MLflow allows; Go's / truncates toward zero).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

// coarse is the rollup level whose blocks give a key's step range and
// point count cheaply.
const coarse = 12

// smallKeysPerQuery bounds the keys named in one query of smallSeries.
const smallKeysPerQuery = 500

// smallSeries answers, with two queries per smallKeysPerQuery keys, the
// series of keys that have no points in range or few enough to return as
// they are (the first branch of series): what a run of many keys logged at
// few steps has, which one query pair per key made slow (1,500 keys: 3,000
// queries). The keys it leaves out need downsampling; series reads them.
func (s *sqlStore) smallSeries(ctx context.Context, rid int64, keys []int64, n int, minStep, maxStep *int64) (map[int64]Series, error) {
	out := make(map[int64]Series, len(keys))
	N := int64(n)
	for start := 0; start < len(keys); start += smallKeysPerQuery {
		chunk := keys[start:min(len(keys), start+smallKeysPerQuery)]
		a := query.NewArgs(s.d)
		text := `SELECT key_id, MIN(first_step), MAX(last_step), SUM(n) FROM metric_rollup WHERE run_rid = ` + a.Add(rid) + ` AND level = ` + a.Add(int64(coarse)) + ` AND key_id IN ` + inList(a, chunk)
		text += blockBounds(a, minStep, maxStep) + " GROUP BY key_id"
		rows, err := s.rdb.QueryContext(ctx, text, a.Values()...)
		if err != nil {
			return nil, fmt.Errorf("reading the step ranges: %w", err)
		}
		found := make(map[int64]bool, len(chunk))
		var raw []int64
		for rows.Next() {
			var k int64
			var dmin, dmax, count sql.NullInt64
			if err := rows.Scan(&k, &dmin, &dmax, &count); err != nil {
				rows.Close()
				return nil, fmt.Errorf("reading the step ranges: %w", err)
			}
			found[k] = true
			lo, hi, ok := stepRange(dmin, dmax, minStep, maxStep)
			if !ok {
				out[k] = Series{Buckets: []Bucket{}}
				continue
			}
			if fewPoints(count.Int64, lo, hi, N) {
				raw = append(raw, k)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("reading the step ranges: %w", err)
		}
		for _, k := range chunk {
			if !found[k] { // no blocks in range: no points
				out[k] = Series{Buckets: []Bucket{}}
			}
		}
		if len(raw) == 0 {
			continue
		}
		// The points of the keys in raw, within the step bounds: each key's
		// [lo, hi] above, as its points lie within its blocks' range.
		a = query.NewArgs(s.d)
		text = `SELECT key_id, step, value FROM metrics WHERE run_rid = ` + a.Add(rid) + ` AND key_id IN ` + inList(a, raw)
		if minStep != nil {
			text += " AND step >= " + a.Add(*minStep)
		}
		if maxStep != nil {
			text += " AND step <= " + a.Add(*maxStep)
		}
		text += " ORDER BY key_id, step"
		got := make(map[int64][]Bucket, len(raw))
		for _, k := range raw {
			got[k] = []Bucket{}
		}
		rows, err = s.rdb.QueryContext(ctx, text, a.Values()...)
		if err != nil {
			return nil, fmt.Errorf("reading points: %w", err)
		}
		for rows.Next() {
			var k, step int64
			var v sql.NullFloat64
			if err := rows.Scan(&k, &step, &v); err != nil {
				rows.Close()
				return nil, fmt.Errorf("reading points: %w", err)
			}
			got[k] = append(got[k], bucketOf(pointItem(step, v)))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("reading points: %w", err)
		}
		for k, bs := range got {
			if int64(len(bs)) <= N { // more: series downsamples it
				out[k] = Series{Buckets: bs}
			}
		}
	}
	return out, nil
}

// blockBounds is the SQL condition keeping the coarse rollup blocks that
// hold steps within [minStep, maxStep] (either may be open).
func blockBounds(a *query.Args, minStep, maxStep *int64) string {
	var b strings.Builder
	if minStep != nil {
		b.WriteString(" AND block >= " + a.Add(*minStep>>coarse))
	}
	if maxStep != nil {
		b.WriteString(" AND block <= " + a.Add(*maxStep>>coarse))
	}
	return b.String()
}

// stepRange is the steps [lo, hi] a series covers within the bounds, from
// its coarse blocks' first and last steps; ok is false when it has none.
func stepRange(dmin, dmax sql.NullInt64, minStep, maxStep *int64) (lo, hi int64, ok bool) {
	if !dmin.Valid {
		return 0, 0, false
	}
	lo, hi = dmin.Int64, dmax.Int64
	if minStep != nil && *minStep > lo {
		lo = *minStep
	}
	if maxStep != nil && *maxStep < hi {
		hi = *maxStep
	}
	return lo, hi, hi >= lo
}

// fewPoints reports whether a series of count points over steps [lo, hi]
// is answered as its points, without downsampling to n buckets.
func fewPoints(count, lo, hi, n int64) bool { return count <= n || ceilDiv(hi-lo+1, n) <= 1 }

// pointItem is one stored point as an item.
func pointItem(step int64, v sql.NullFloat64) item {
	return item{first: step, last: step, min: v, max: v, lst: v, n: 1}
}

func (s *sqlStore) series(ctx context.Context, rid, key int64, n int, minStep, maxStep *int64) (Series, error) {
	a := query.NewArgs(s.d)
	text := `SELECT MIN(first_step), MAX(last_step), SUM(n) FROM metric_rollup WHERE run_rid = ` + a.Add(rid) + ` AND key_id = ` + a.Add(key) + ` AND level = ` + a.Add(int64(coarse))
	text += blockBounds(a, minStep, maxStep)
	var dmin, dmax, count sql.NullInt64
	if err := s.rdb.QueryRowContext(ctx, text, a.Values()...).Scan(&dmin, &dmax, &count); err != nil {
		return Series{}, fmt.Errorf("reading the step range: %w", err)
	}
	ser := Series{Buckets: []Bucket{}}
	lo, hi, ok := stepRange(dmin, dmax, minStep, maxStep)
	if !ok {
		return ser, nil
	}
	N := int64(n)
	width := ceilDiv(hi-lo+1, N)
	if fewPoints(count.Int64, lo, hi, N) {
		// Few enough points: return them as they are.
		items, err := s.rawItems(ctx, rid, key, lo, hi)
		if err != nil {
			return Series{}, err
		}
		for _, it := range items {
			ser.Buckets = append(ser.Buckets, bucketOf(it))
		}
		if int64(len(ser.Buckets)) <= N {
			return ser, nil
		}
		ser.Buckets = ser.Buckets[:0]
	}
	var shift uint
	for _, sh := range rollupShifts() {
		if int64(1)<<sh <= width {
			shift = sh
		}
	}
	B := int64(1) << shift
	origin := floorDiv(lo, B) * B
	w := ceilDiv(ceilDiv(hi-origin+1, N), B) * B
	var items []item
	if shift == 0 {
		var err error
		if items, err = s.rawItems(ctx, rid, key, lo, hi); err != nil {
			return Series{}, err
		}
	} else {
		firstFull, lastFull := ceilDiv(lo, B), floorDiv(hi+1, B)-1
		if firstFull > lastFull {
			var err error
			if items, err = s.rawItems(ctx, rid, key, lo, hi); err != nil {
				return Series{}, err
			}
		} else {
			left, err := s.rawItems(ctx, rid, key, lo, firstFull*B-1)
			if err != nil {
				return Series{}, err
			}
			mid, err := s.blockItems(ctx, rid, key, shift, firstFull, lastFull)
			if err != nil {
				return Series{}, err
			}
			right, err := s.rawItems(ctx, rid, key, (lastFull+1)*B, hi)
			if err != nil {
				return Series{}, err
			}
			items = append(append(left, mid...), right...)
		}
	}
	ser.Downsampled = true
	cur := int64(-1)
	var b *Bucket
	for _, it := range items {
		idx := (it.first - origin) / w
		if b == nil || idx != cur {
			ser.Buckets = append(ser.Buckets, bucketOf(it))
			b = &ser.Buckets[len(ser.Buckets)-1]
			cur = idx
			continue
		}
		merge(b, it)
	}
	return ser, nil
}

func bucketOf(it item) Bucket {
	return Bucket{StepMin: it.first, StepMax: it.last, Min: nanIfNull(it.min), Max: nanIfNull(it.max), Last: nanIfNull(it.lst), Count: it.n}
}

func merge(b *Bucket, it item) {
	if it.first < b.StepMin {
		b.StepMin = it.first
	}
	if it.last >= b.StepMax {
		b.StepMax = it.last
		b.Last = nanIfNull(it.lst)
	}
	if it.min.Valid && (math.IsNaN(b.Min) || it.min.Float64 < b.Min) {
		b.Min = it.min.Float64
	}
	if it.max.Valid && (math.IsNaN(b.Max) || it.max.Float64 > b.Max) {
		b.Max = it.max.Float64
	}
	b.Count += it.n
}

func (s *sqlStore) rawItems(ctx context.Context, rid, key, lo, hi int64) ([]item, error) {
	if hi < lo {
		return nil, nil
	}
	rows, err := s.rdb.QueryContext(ctx, s.q(`SELECT step, value FROM metrics WHERE run_rid = ? AND key_id = ? AND step >= ? AND step <= ? ORDER BY step`), rid, key, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("reading points: %w", err)
	}
	defer rows.Close()
	var out []item
	for rows.Next() {
		var step int64
		var v sql.NullFloat64
		if err := rows.Scan(&step, &v); err != nil {
			return nil, fmt.Errorf("reading points: %w", err)
		}
		out = append(out, pointItem(step, v))
	}
	return out, rows.Err()
}

func (s *sqlStore) blockItems(ctx context.Context, rid, key int64, shift uint, from, to int64) ([]item, error) {
	rows, err := s.rdb.QueryContext(ctx, s.q(`SELECT first_step, last_step, min_value, max_value, last_value, n FROM metric_rollup
		WHERE run_rid = ? AND key_id = ? AND level = ? AND block >= ? AND block <= ? ORDER BY block`), rid, key, int64(shift), from, to)
	if err != nil {
		return nil, fmt.Errorf("reading rollups: %w", err)
	}
	defer rows.Close()
	out := make([]item, 0, min(to-from+1, 1<<16))
	for rows.Next() {
		var it item
		if err := rows.Scan(&it.first, &it.last, &it.min, &it.max, &it.lst, &it.n); err != nil {
			return nil, fmt.Errorf("reading rollups: %w", err)
		}
		out = append(out, it)
	}
	return out, rows.Err()
}

// Point is one stored value of a metric key, with the time it was logged.
type Point struct {
	Step  int64     `json:"step"`
	Value float64   `json:"value"` // NaN when a NaN was logged
	Time  time.Time `json:"time"`
}

// HistoryQuery pages through one metric key's raw points by step.
type HistoryQuery struct {
	// Key is the metric key.
	Key string
	// AfterStep, when set, returns the points after that step (the previous
	// page's last step); MinStep and MaxStep bound the steps (inclusive).
	AfterStep, MinStep, MaxStep *int64
	// Limit is the most steps returned (default 1000, at most 100000).
	Limit int
	// Replaced adds the values later writes replaced at the same steps
	// (MLflow keeps every value logged; fw's series keeps the last per
	// step): such a step has several points, ordered by time, then value.
	Replaced bool
}

// History reads the raw points of one training-metric key of a run, oldest
// step first (the MLflow API's get-history; the UI reads Metrics instead).
// An unknown run is code not_found; a key the run never logged gives none.
func (s *sqlStore) History(ctx context.Context, runID string, q HistoryQuery) ([]Point, error) {
	n := q.Limit
	if n <= 0 {
		n = 1000
	}
	if n > 100000 {
		return nil, errf(CodeInvalidArgument, "limit %d is over 100000", n)
	}
	rid, err := s.runRID(ctx, runID)
	if err != nil {
		return nil, err
	}
	a := query.NewArgs(s.d)
	text := `SELECT m.step, m.value, m.wall FROM metrics m JOIN metric_keys k ON k.id = m.key_id WHERE m.run_rid = ` + a.Add(rid) +
		` AND k.kind = ` + a.Add(int64(kindMetric)) + ` AND k.name = ` + a.Add(q.Key)
	if q.AfterStep != nil {
		text += ` AND m.step > ` + a.Add(*q.AfterStep)
	}
	if q.MinStep != nil {
		text += ` AND m.step >= ` + a.Add(*q.MinStep)
	}
	if q.MaxStep != nil {
		text += ` AND m.step <= ` + a.Add(*q.MaxStep)
	}
	text += ` ORDER BY m.step LIMIT ` + a.Add(int64(n))
	rows, err := s.rdb.QueryContext(ctx, text, a.Values()...)
	if err != nil {
		return nil, fmt.Errorf("reading the history of %q of run %s: %w", q.Key, runID, err)
	}
	defer rows.Close()
	out := []Point{}
	for rows.Next() {
		var p Point
		var v sql.NullFloat64
		var wall int64
		if err := rows.Scan(&p.Step, &v, &wall); err != nil {
			return nil, fmt.Errorf("reading the history of %q of run %s: %w", q.Key, runID, err)
		}
		p.Value = nanIfNull(v)
		p.Time = time.Unix(0, wall).UTC()
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the history of %q of run %s: %w", q.Key, runID, err)
	}
	rows.Close()
	if !q.Replaced || len(out) == 0 {
		return out, nil
	}
	return s.withReplaced(ctx, rid, q, out)
}

// withReplaced adds to a page of points the values replaced at its steps
// (table metric_replaced), each step's points ordered by time, then value,
// identical ones once.
func (s *sqlStore) withReplaced(ctx context.Context, rid int64, q HistoryQuery, page []Point) ([]Point, error) {
	lo, hi := page[0].Step, page[len(page)-1].Step
	rows, err := s.rdb.QueryContext(ctx, s.q(`SELECT r.step, r.value, r.wall FROM metric_replaced r JOIN metric_keys k ON k.id = r.key_id WHERE r.run_rid = ? AND k.kind = ? AND k.name = ? AND r.step >= ? AND r.step <= ?`),
		rid, int64(kindMetric), q.Key, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("reading the replaced values of %q: %w", q.Key, err)
	}
	defer rows.Close()
	out := page
	for rows.Next() {
		var p Point
		var v sql.NullFloat64
		var wall int64
		if err := rows.Scan(&p.Step, &v, &wall); err != nil {
			return nil, fmt.Errorf("reading the replaced values of %q: %w", q.Key, err)
		}
		p.Value = nanIfNull(v)
		p.Time = time.Unix(0, wall).UTC()
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the replaced values of %q: %w", q.Key, err)
	}
	if len(out) == len(page) {
		return out, nil
	}
	slices.SortFunc(out, func(a, b Point) int {
		if c := cmp.Compare(a.Step, b.Step); c != 0 {
			return c
		}
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Value, b.Value)
	})
	return slices.CompactFunc(out, func(a, b Point) bool {
		return a.Step == b.Step && a.Time.Equal(b.Time) && (a.Value == b.Value || (math.IsNaN(a.Value) && math.IsNaN(b.Value)))
	}), nil
}
