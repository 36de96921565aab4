package store

// Metrics of Apply: key IDs, the points of a batch, and their flush into
// the points table and the rollups (16, 256, 4096 steps per block).

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Metric key kinds (metric_keys.kind).
const (
	kindMetric = 0
	kindSystem = 1
)

// rollupShifts are the rollup block sizes (2^shift steps: 16, 256, 4096).
func rollupShifts() [3]uint { return [3]uint{4, 8, 12} }

type point struct {
	rid   int64
	key   int64
	step  int64
	value float64
	wall  int64
	order int
}

// sortPoints orders points by (rid, key, step) and, within a step, as they
// came (order ascending, as pts holds them). A counting sort by series and
// then a check per series: points arrive a step at a time with all their
// keys, so each series is already in step order and a comparison sort of
// the whole batch (a twentieth of ingest's CPU) has nothing to do.
func sortPoints(pts []point) []point {
	type series struct{ rid, key int64 }
	rank := map[series]int{}
	var keys []series
	for _, p := range pts {
		if _, ok := rank[series{p.rid, p.key}]; !ok {
			rank[series{p.rid, p.key}] = 0
			keys = append(keys, series{p.rid, p.key})
		}
	}
	slices.SortFunc(keys, func(x, y series) int {
		if x.rid != y.rid {
			return cmpInt(x.rid, y.rid)
		}
		return cmpInt(x.key, y.key)
	})
	start := make([]int, len(keys)+1)
	for i, k := range keys {
		rank[k] = i
	}
	for _, p := range pts {
		start[rank[series{p.rid, p.key}]+1]++
	}
	for i := 1; i < len(start); i++ {
		start[i] += start[i-1]
	}
	out := make([]point, len(pts))
	next := slices.Clone(start[:len(keys)])
	for _, p := range pts {
		r := rank[series{p.rid, p.key}]
		out[next[r]] = p
		next[r]++
	}
	byStep := func(x, y point) int {
		if x.step != y.step {
			return cmpInt(x.step, y.step)
		}
		return x.order - y.order
	}
	for i := range keys {
		if seg := out[start[i]:start[i+1]]; !slices.IsSortedFunc(seg, byStep) {
			slices.SortFunc(seg, byStep) // order is unique: a total order
		}
	}
	return out
}

// keyID returns the ID of a metric key, creating it.
func (a *applier) keyID(ctx context.Context, kind int, name string) (int64, error) {
	ref := keyRef{kind, name}
	if id, ok := a.s.keys[ref]; ok {
		return id, nil
	}
	if _, err := a.s.exec(ctx, a.tx, `INSERT INTO metric_keys (kind, name) VALUES (?, ?) ON CONFLICT (kind, name) DO NOTHING`, kind, name); err != nil {
		return 0, fmt.Errorf("creating metric key %q: %w", name, err)
	}
	var id int64
	if err := a.s.queryRow(ctx, a.tx, `SELECT id FROM metric_keys WHERE kind = ? AND name = ?`, kind, name).Scan(&id); err != nil {
		return 0, fmt.Errorf("reading metric key %q: %w", name, err)
	}
	a.s.keys[ref] = id
	return id, nil
}

// addValues validates and queues metric values of one event.
func (a *applier) addValues(ctx context.Context, rs *runState, kind int, step int64, values map[string]Float, t int64) error {
	if len(values) == 0 {
		return evErr(CodeInvalidEvent, "no values")
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		if err := ValidateKey(k); err != nil {
			return evErr(CodeInvalidKey, "metric: %v", err)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		id, err := a.keyID(ctx, kind, k)
		if err != nil {
			return err
		}
		if kind == kindSystem {
			if a.sysKeys == nil {
				a.sysKeys = map[int64]bool{}
			}
			a.sysKeys[id] = true
		}
		a.points = append(a.points, point{rid: rs.rid, key: id, step: step, value: float64(values[k]), wall: t, order: len(a.points)})
	}
	return nil
}

// agg accumulates points of one (run, key) or one rollup block.
type agg struct {
	rid, key        int64
	level           uint
	block           int64
	first, last     int64
	lastV           float64
	lastT           int64
	min, max        float64
	minStep, maxStp int64
	hasMin          bool
	n               int64
}

func (g *agg) add(p point) {
	if g.n == 0 || p.step < g.first {
		g.first = p.step
	}
	if g.n == 0 || p.step >= g.last {
		g.last, g.lastV, g.lastT = p.step, p.value, p.wall
	}
	if !math.IsNaN(p.value) {
		if !g.hasMin || p.value < g.min {
			g.min, g.minStep = p.value, p.step
		}
		if !g.hasMin || p.value > g.max {
			g.max, g.maxStp = p.value, p.step
		}
		g.hasMin = true
	}
	g.n++
}

func (g *agg) minArg() any {
	if !g.hasMin {
		return nil
	}
	return g.min
}

func (g *agg) maxArg() any {
	if !g.hasMin {
		return nil
	}
	return g.max
}

// flushPoints writes the queued points, their summaries and rollups.
func (a *applier) flushPoints(ctx context.Context) error {
	if len(a.points) == 0 {
		return nil
	}
	pts := a.points
	a.points = nil
	// Summaries and rollups see every write, in event order.
	type sk struct{ rid, key int64 }
	type rk struct {
		rid, key int64
		level    uint
		block    int64
	}
	sums := map[sk]*agg{}
	var sumOrder []sk
	rolls := map[rk]*agg{}
	var rollOrder []rk
	for _, p := range pts {
		k := sk{p.rid, p.key}
		g := sums[k]
		if g == nil {
			g = &agg{rid: p.rid, key: p.key}
			sums[k] = g
			sumOrder = append(sumOrder, k)
		}
		g.add(p)
		for _, sh := range rollupShifts() {
			r := rk{p.rid, p.key, sh, p.step >> sh}
			gr := rolls[r]
			if gr == nil {
				gr = &agg{rid: p.rid, key: p.key, level: sh, block: r.block}
				rolls[r] = gr
				rollOrder = append(rollOrder, r)
			}
			gr.add(p)
		}
	}
	// Points: sorted by primary key, the last write of a step wins.
	pts = sortPoints(pts)
	// One value per step in metrics: the batch's last; an earlier one of
	// the same step that differs is kept in metric_replaced, as the trigger
	// keeps a stored value a write replaces (migration 12).
	uniq := pts[:0]
	var replaced []any
	for i, p := range pts {
		if i+1 < len(pts) && pts[i+1].rid == p.rid && pts[i+1].key == p.key && pts[i+1].step == p.step {
			if next := pts[i+1]; next.wall != p.wall || !sameValue(next.value, p.value) {
				replaced = append(replaced, p.rid, p.key, p.step, nullFloat(p.value), p.wall)
			}
			continue
		}
		uniq = append(uniq, p)
	}
	for off := 0; off < len(replaced); off += 5 * 500 {
		chunk := replaced[off:min(off+5*500, len(replaced))]
		if _, err := a.s.exec(ctx, a.tx, valuesSQL(`INSERT INTO metric_replaced (run_rid, key_id, step, value, wall) VALUES `, 5, len(chunk)/5), chunk...); err != nil {
			return fmt.Errorf("keeping %d replaced metric values: %w", len(chunk)/5, err)
		}
	}
	const per = 500
	for off := 0; off < len(uniq); off += per {
		chunk := uniq[off:min(off+per, len(uniq))]
		args := make([]any, 0, 5*len(chunk))
		for _, p := range chunk {
			args = append(args, p.rid, p.key, p.step, nullFloat(p.value), p.wall)
		}
		text := valuesSQL(`INSERT INTO metrics (run_rid, key_id, step, value, wall) VALUES `, 5, len(chunk)) +
			` ON CONFLICT (run_rid, key_id, step) DO UPDATE SET value = excluded.value, wall = excluded.wall`
		if _, err := a.s.exec(ctx, a.tx, text, args...); err != nil {
			return fmt.Errorf("writing %d metric points: %w", len(chunk), err)
		}
	}
	// The experiment summary's changes: a run's (run, key) summary row that
	// the upsert creates (its n is the batch's) is a run newly reporting
	// the key.
	byRID := make(map[int64]*runState, len(a.runs))
	for _, rs := range a.runs {
		if rs != nil {
			byRID[rs.rid] = rs
		}
	}
	type ek struct {
		exp string
		key int64
	}
	exps := map[ek]*expMetric{}
	var expList []*expMetric
	for off := 0; off < len(sumOrder); off += per {
		chunk := sumOrder[off:min(off+per, len(sumOrder))]
		args := make([]any, 0, 11*len(chunk))
		for _, k := range chunk {
			g := sums[k]
			rs := byRID[g.rid]
			if rs == nil {
				return fmt.Errorf("writing metric summaries: run rid %d is not one of the batch's runs", g.rid)
			}
			args = append(args, g.rid, g.key, nullFloat(g.lastV), g.last, g.lastT, g.minArg(), g.minStep, g.maxArg(), g.maxStp, g.n, rs.experimentID)
		}
		text := valuesSQL(`INSERT INTO metric_summary (run_rid, key_id, last_value, last_step, last_time, min_value, min_step, max_value, max_step, n, experiment_id) VALUES `, 11, len(chunk)) + `
ON CONFLICT (run_rid, key_id) DO UPDATE SET
	last_value = CASE WHEN excluded.last_step >= metric_summary.last_step THEN excluded.last_value ELSE metric_summary.last_value END,
	last_time = CASE WHEN excluded.last_step >= metric_summary.last_step THEN excluded.last_time ELSE metric_summary.last_time END,
	last_step = CASE WHEN excluded.last_step >= metric_summary.last_step THEN excluded.last_step ELSE metric_summary.last_step END,
	min_step = CASE WHEN metric_summary.min_value IS NULL OR excluded.min_value < metric_summary.min_value THEN excluded.min_step ELSE metric_summary.min_step END,
	min_value = CASE WHEN metric_summary.min_value IS NULL OR excluded.min_value < metric_summary.min_value THEN excluded.min_value ELSE metric_summary.min_value END,
	max_step = CASE WHEN metric_summary.max_value IS NULL OR excluded.max_value > metric_summary.max_value THEN excluded.max_step ELSE metric_summary.max_step END,
	max_value = CASE WHEN metric_summary.max_value IS NULL OR excluded.max_value > metric_summary.max_value THEN excluded.max_value ELSE metric_summary.max_value END,
	n = metric_summary.n + excluded.n
RETURNING run_rid, key_id, n`
		rows, err := a.s.queryTx(ctx, a.tx, text, args...)
		if err != nil {
			return fmt.Errorf("writing metric summaries: %w", err)
		}
		for rows.Next() {
			var rid, key, n int64
			if err := rows.Scan(&rid, &key, &n); err != nil {
				rows.Close()
				return fmt.Errorf("writing metric summaries: %w", err)
			}
			rs := byRID[rid]
			if rs == nil || a.sysKeys[key] {
				continue
			}
			g := sums[sk{rid, key}]
			m := exps[ek{rs.experimentID, key}]
			if m == nil {
				m = &expMetric{exp: rs.experimentID, key: key}
				exps[ek{rs.experimentID, key}] = m
				expList = append(expList, m)
			}
			m.add(rs.id, g, n == g.n)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return fmt.Errorf("writing metric summaries: %w", err)
		}
	}
	if err := a.flushExperimentMetrics(ctx, expList); err != nil {
		return err
	}
	for off := 0; off < len(rollOrder); off += per {
		chunk := rollOrder[off:min(off+per, len(rollOrder))]
		args := make([]any, 0, 10*len(chunk))
		for _, k := range chunk {
			g := rolls[k]
			args = append(args, g.rid, g.key, int64(g.level), g.block, g.first, g.last, g.minArg(), g.maxArg(), nullFloat(g.lastV), g.n)
		}
		text := valuesSQL(`INSERT INTO metric_rollup (run_rid, key_id, level, block, first_step, last_step, min_value, max_value, last_value, n) VALUES `, 10, len(chunk)) + `
ON CONFLICT (run_rid, key_id, level, block) DO UPDATE SET
	first_step = CASE WHEN excluded.first_step < metric_rollup.first_step THEN excluded.first_step ELSE metric_rollup.first_step END,
	last_value = CASE WHEN excluded.last_step >= metric_rollup.last_step THEN excluded.last_value ELSE metric_rollup.last_value END,
	last_step = CASE WHEN excluded.last_step >= metric_rollup.last_step THEN excluded.last_step ELSE metric_rollup.last_step END,
	min_value = CASE WHEN metric_rollup.min_value IS NULL OR excluded.min_value < metric_rollup.min_value THEN excluded.min_value ELSE metric_rollup.min_value END,
	max_value = CASE WHEN metric_rollup.max_value IS NULL OR excluded.max_value > metric_rollup.max_value THEN excluded.max_value ELSE metric_rollup.max_value END,
	n = metric_rollup.n + excluded.n`
		if _, err := a.s.exec(ctx, a.tx, text, args...); err != nil {
			return fmt.Errorf("writing metric rollups: %w", err)
		}
	}
	return nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// valuesSQL appends rows of cols placeholders to prefix.
func valuesSQL(prefix string, cols, rows int) string {
	var b strings.Builder
	b.Grow(len(prefix) + rows*(cols*3+3))
	b.WriteString(prefix)
	row := "(" + strings.TrimSuffix(strings.Repeat("?,", cols), ",") + ")"
	for i := 0; i < rows; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(row)
	}
	return b.String()
}

// sameValue compares two metric values, NaN equal to NaN (both are stored
// as NULL).
func sameValue(a, b float64) bool {
	return a == b || (math.IsNaN(a) && math.IsNaN(b))
}
