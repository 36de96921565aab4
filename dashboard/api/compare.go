package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/fw-serve/fw/dashboard/store"
)

// Compare limits: GET /api/compare takes 2..maxCompareRuns runs.
const (
	minCompareRuns = 2
	maxCompareRuns = 20
)

// point is one metric value at x (a step, or seconds since the run started).
type point struct{ x, v float64 }

// alignedSeries is one metric key of every compared run on a common x grid.
type alignedSeries struct {
	X []float64 `json:"x"`
	// Values holds each run's value at each x (null outside the run's range).
	Values map[string][]*float64 `json:"values"`
}

// paramDiff is one parameter across the runs; a run lacking it is absent
// from Values (and then the parameter differs).
type paramDiff struct {
	Values  map[string]any `json:"values"`
	Differs bool           `json:"differs"`
}

// alignSeries puts each run's points (sorted by x) on one grid: the union of
// their x values, or maxPoints evenly spaced x values over the union's range
// when the union is larger. A run's value at x is its last point at or
// before x, null before its first point and after its last.
func alignSeries(runs []string, pts map[string][]point, maxPoints int) alignedSeries {
	var xs []float64
	for _, r := range runs {
		for _, p := range pts[r] {
			xs = append(xs, p.x)
		}
	}
	slices.Sort(xs)
	xs = slices.Compact(xs)
	if len(xs) > maxPoints && maxPoints > 0 {
		lo, hi := xs[0], xs[len(xs)-1]
		grid := make([]float64, maxPoints)
		for i := range grid {
			if maxPoints == 1 {
				grid[i] = hi
				continue
			}
			grid[i] = lo + (hi-lo)*float64(i)/float64(maxPoints-1)
		}
		grid[len(grid)-1] = hi
		xs = grid
	}
	out := alignedSeries{X: xs, Values: make(map[string][]*float64, len(runs))}
	if out.X == nil {
		out.X = []float64{}
	}
	for _, r := range runs {
		p := pts[r]
		vals := make([]*float64, len(xs))
		j := -1
		for i, x := range xs {
			for j+1 < len(p) && p[j+1].x <= x {
				j++
			}
			if j < 0 || x > p[len(p)-1].x || math.IsNaN(p[j].v) || math.IsInf(p[j].v, 0) {
				continue
			}
			v := p[j].v
			vals[i] = &v
		}
		out.Values[r] = vals
	}
	return out
}

// diffParams sets the runs' params side by side and marks the differing ones.
func diffParams(runs []string, params map[string]map[string]any) map[string]paramDiff {
	out := map[string]paramDiff{}
	for _, r := range runs {
		for k := range params[r] {
			if _, ok := out[k]; ok {
				continue
			}
			d := paramDiff{Values: map[string]any{}}
			var first []byte
			for _, r2 := range runs {
				v, ok := params[r2][k]
				if !ok {
					d.Differs = true
					continue
				}
				d.Values[r2] = v
				b, _ := json.Marshal(v)
				if first == nil {
					first = b
				} else if string(b) != string(first) {
					d.Differs = true
				}
			}
			out[k] = d
		}
	}
	return out
}

// toPoints turns a series' buckets into points at their last step; with
// byTime, x is the seconds since the run started, estimated from the step
// (the store's buckets carry no wall time): linear between the run's start
// (step 0) and the key's last write at its last step.
func toPoints(s store.Series, run store.Run, byTime bool) []point {
	pts := make([]point, 0, len(s.Buckets))
	var secPerStep float64
	if byTime {
		sum, ok := run.Metrics[s.Key]
		if !ok {
			sum, ok = run.System[s.Key]
		}
		if !ok || run.Started == nil || sum.LastStep <= 0 {
			return pts
		}
		secPerStep = sum.LastTime.Sub(*run.Started).Seconds() / float64(sum.LastStep)
	}
	for _, b := range s.Buckets {
		x := float64(b.StepMax)
		if byTime {
			x *= secPerStep
		}
		pts = append(pts, point{x: x, v: b.Last})
	}
	sort.SliceStable(pts, func(i, j int) bool { return pts[i].x < pts[j].x })
	return pts
}

// maxCompareKeyLimit bounds ?key_limit= of /api/compare.
const maxCompareKeyLimit = 2000

// compare answers GET /api/compare?runs=a,b[&keys=k1,k2][&key_limit=N][&align=step|time][&max_points=N].
// metric_keys lists every training metric key of the runs; the series and
// summaries are those of ?keys=, else of the first ?key_limit= of
// metric_keys (all without it): a page of charts of runs logging 1,500
// keys reads its page, not 1,500 x runs series.
func (s *Server) compare(c *call) (any, error) {
	ctx := c.rc
	args := ctx.QueryArgs()
	var ids []string
	for _, id := range strings.Split(string(args.Peek("runs")), ",") {
		if id = strings.TrimSpace(id); id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	if len(ids) < minCompareRuns || len(ids) > maxCompareRuns {
		return nil, apiErr(422, string(store.CodeInvalidArgument), fmt.Sprintf("?runs= names %d distinct runs; compare %d to %d (?runs=ID1,ID2,...)", len(ids), minCompareRuns, maxCompareRuns))
	}
	align := string(args.Peek("align"))
	if align == "" {
		align = "step"
	}
	if align != "step" && align != "time" {
		return nil, apiErr(400, string(store.CodeInvalidArgument), fmt.Sprintf("?align=%q must be step or time", align))
	}
	maxPoints, e := queryInt(ctx, "max_points", 500, 1, 100000)
	if e != nil {
		return nil, e
	}
	keyLimit, e := queryInt(ctx, "key_limit", 0, 1, maxCompareKeyLimit)
	if e != nil {
		return nil, e
	}
	var keys []string
	if k := string(args.Peek("keys")); k != "" {
		for _, key := range strings.Split(k, ",") {
			if key = strings.TrimSpace(key); key != "" && !slices.Contains(keys, key) {
				keys = append(keys, key)
			}
		}
	}

	runs := make(map[string]store.Run, len(ids))
	for _, id := range ids {
		r, err := s.st.GetRun(c.ctx, id)
		if err != nil {
			var se *store.Error
			if errors.As(err, &se) && se.Code == store.CodeNotFound {
				return nil, apiErr(404, CodeNotFound, fmt.Sprintf("no run %q; GET /api/experiments/{id}/runs lists the runs", id))
			}
			return nil, err
		}
		runs[id] = r
	}
	seen := map[string]bool{}
	all := []string{} // every training metric key of any run
	for _, id := range ids {
		for k := range runs[id].Metrics {
			if !seen[k] {
				seen[k] = true
				all = append(all, k)
			}
		}
	}
	slices.Sort(all)
	if keys == nil {
		keys = all
		if keyLimit > 0 && len(keys) > keyLimit {
			keys = keys[:keyLimit]
		}
	}

	pts := map[string]map[string][]point{} // key -> run -> points
	for _, k := range keys {
		pts[k] = map[string][]point{}
	}
	for _, id := range ids {
		var have []string
		for _, k := range keys {
			if _, ok := runs[id].Metrics[k]; ok {
				have = append(have, k)
			}
		}
		if len(have) == 0 {
			continue
		}
		series, err := s.st.Metrics(c.ctx, id, store.MetricsQuery{Keys: have, MaxPoints: maxPoints})
		if err != nil {
			return nil, err
		}
		for _, se := range series {
			if m, ok := pts[se.Key]; ok {
				m[id] = toPoints(se, runs[id], align == "time")
			}
		}
	}
	metrics := make(map[string]alignedSeries, len(keys))
	for _, k := range keys {
		metrics[k] = alignSeries(ids, pts[k], maxPoints)
	}

	params := make(map[string]map[string]any, len(ids))
	summaries := make(map[string]map[string]store.Summary, len(ids))
	infos := make([]map[string]any, 0, len(ids))
	for _, id := range ids {
		r := runs[id]
		params[id] = r.Params
		sums := map[string]store.Summary{}
		for _, k := range keys {
			if sm, ok := r.Metrics[k]; ok {
				sums[k] = sm
			}
		}
		summaries[id] = sums
		infos = append(infos, map[string]any{"id": r.ID, "name": r.Name, "experiment": r.Experiment, "status": r.Status,
			"started": r.Started, "ended": r.Ended})
	}
	return map[string]any{
		"runs":        infos,
		"align":       align,
		"keys":        keys,
		"metric_keys": all,
		"metrics":     metrics,
		"params":      diffParams(ids, params),
		"summaries":   summaries,
	}, nil
}
