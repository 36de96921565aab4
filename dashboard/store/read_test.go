package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDownsampleKeepsSpike(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		s := open(Config{})
		ctx := context.Background()
		const total = 1_000_000
		const spikeAt = 654_321
		e := &ev{run: "spike"}
		mustApply(t, s, e.start("exp", nil, nil))
		batch := make([]Event, 0, 10000)
		for i := int64(0); i < total; i++ {
			v := math.Sin(float64(i) / 1000)
			if i == spikeAt {
				v = 1e6
			}
			batch = append(batch, e.metrics(i, map[string]float64{"loss": v}))
			if len(batch) == cap(batch) {
				mustApply(t, s, batch...)
				batch = batch[:0]
			}
		}
		for _, n := range []int{1000, 333, 7} {
			ser, err := s.Metrics(ctx, "spike", MetricsQuery{Keys: []string{"loss"}, MaxPoints: n})
			if err != nil {
				t.Fatal(err)
			}
			bs := ser[0].Buckets
			if len(bs) > n || len(bs) < n/2 || !ser[0].Downsampled {
				t.Fatalf("n=%d: %d buckets", n, len(bs))
			}
			var count int64
			found := false
			for i, b := range bs {
				count += b.Count
				if i > 0 && b.StepMin <= bs[i-1].StepMax {
					t.Fatalf("buckets overlap: %+v %+v", bs[i-1], b)
				}
				if b.Max == 1e6 {
					found = b.StepMin <= spikeAt && spikeAt <= b.StepMax
				}
			}
			if !found || count != total || bs[0].StepMin != 0 || bs[len(bs)-1].StepMax != total-1 {
				t.Fatalf("n=%d: spike found=%v count=%d range %d..%d", n, found, count, bs[0].StepMin, bs[len(bs)-1].StepMax)
			}
			if last := bs[len(bs)-1].Last; last != math.Sin(float64(total-1)/1000) {
				t.Fatalf("last value %v", last)
			}
		}
		// A step range reads partial blocks from the raw points.
		lo, hi := int64(spikeAt-5000), int64(spikeAt+123)
		ser, err := s.Metrics(ctx, "spike", MetricsQuery{Keys: []string{"loss"}, MaxPoints: 100, MinStep: &lo, MaxStep: &hi})
		if err != nil {
			t.Fatal(err)
		}
		bs := ser[0].Buckets
		var count int64
		maxV := math.Inf(-1)
		for _, b := range bs {
			count += b.Count
			maxV = math.Max(maxV, b.Max)
		}
		if len(bs) > 100 || count != hi-lo+1 || maxV != 1e6 || bs[0].StepMin != lo || bs[len(bs)-1].StepMax != hi {
			t.Fatalf("range: %d buckets, count %d, max %v, %d..%d", len(bs), count, maxV, bs[0].StepMin, bs[len(bs)-1].StepMax)
		}
		// Small ranges come back raw.
		lo, hi = 10, 19
		ser, _ = s.Metrics(ctx, "spike", MetricsQuery{Keys: []string{"loss"}, MinStep: &lo, MaxStep: &hi})
		if len(ser[0].Buckets) != 10 || ser[0].Downsampled {
			t.Fatalf("raw: %+v", ser[0])
		}
	})
}

// seedRuns creates runs with params, tags and metric summaries for the
// filter and paging tests.
func seedRuns(t *testing.T, s Store) {
	t.Helper()
	type spec struct {
		id, name, status, team string
		lr                     float64
		acc                    []float64
		opt                    string
	}
	specs := []spec{
		{"r01", "resnet-a", "finished", "a", 0.001, []float64{0.5, 0.95, 0.93}, "adam"},
		{"r02", "resnet-b", "finished", "b", 0.1, []float64{0.6, 0.8}, "sgd"},
		{"r03", "vit-a", "failed", "a", 0.005, []float64{0.7, 0.91}, "adam"},
		{"r04", "ResNet-c", "running", "c", 0.02, []float64{0.1}, "sgd"},
		{"r05", "mlp", "finished", "", 0.0001, nil, "adam"},
		{"r06", "resnet 50_x", "stopped", "b", 0.5, []float64{0.99}, ""},
	}
	for i, sp := range specs {
		e := &ev{run: sp.id}
		params := map[string]any{"lr": sp.lr}
		if sp.opt != "" {
			params["opt"] = sp.opt
		}
		tags := map[string]string{}
		if sp.team != "" {
			tags["team"] = sp.team
		}
		evs := []Event{e.next(Event{Type: EventRunStart, Experiment: []string{"cls", "det"}[i%2], Name: sp.name, Params: params, Tags: tags})}
		for step, a := range sp.acc {
			evs = append(evs, e.metrics(int64(step), map[string]float64{"val_acc": a}))
		}
		if sp.status != "running" {
			evs = append(evs, e.next(Event{Type: EventRunEnd, Status: Status(sp.status)}))
		}
		mustApply(t, s, evs...)
	}
}

func TestFilterQueries(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		s := open(Config{})
		seedRuns(t, s)
		ctx := context.Background()
		f := func(filter, want string) {
			t.Helper()
			page, err := s.ListRuns(ctx, ListQuery{Filter: filter, Sort: "id"})
			if err != nil {
				t.Fatalf("%s: %v", filter, err)
			}
			if got := runIDs(page); got != want {
				t.Errorf("%s:\n got %s\nwant %s", filter, got, want)
			}
		}
		f(``, "r01,r02,r03,r04,r05,r06")
		f(`status = "finished"`, "r01,r02,r05")
		f(`status != "finished"`, "r03,r04,r06")
		f(`params.lr < 0.01`, "r01,r03,r05")
		f(`params.opt = "adam"`, "r01,r03,r05")
		f(`NOT params.opt = "adam"`, "r02,r04,r06")
		f(`tags.team IN ("a", "b")`, "r01,r02,r03,r06")
		f(`tags.team NOT IN ("a")`, "r02,r04,r05,r06")
		f(`metrics.val_acc.max >= 0.9`, "r01,r03,r06")
		f(`metrics.val_acc < 0.9`, "r02,r04")
		f(`metrics.val_acc.count = 3`, "r01")
		f(`name ~ "resnet*"`, "r01,r02,r04,r06")
		f(`name LIKE "*-a"`, "r01,r03")
		f(`name ~ "0_x"`, "r06")
		f(`name ~ "t_a"`, "")
		f(`name ~ "net-?"`, "")
		f(`name ~ "*net-?"`, "r01,r02,r04")
		f(`experiment = "det"`, "r02,r04,r06")
		f(`status = "finished" AND (params.lr < 0.01 OR tags.team IN ("a", "b")) AND NOT metrics.val_acc.max < 0.9 AND name ~ "resnet*"`, "r01")
		f(`status = "finished" OR status = "failed" AND tags.team = "a"`, "r01,r02,r03,r05")
		f(`(status = "finished" OR status = "failed") AND tags.team = "a"`, "r01,r03")
		f(`params.lr >= 0.1 AND params.lr <= 0.5`, "r02,r06")
		f(`ended > "2000-01-01T00:00:00Z" AND NOT status = "running"`, "r01,r02,r03,r05,r06")
		f(`ended > 0`, "r01,r02,r03,r05,r06")
		f(`params.missing = 1`, "")
		f(`NOT params.missing = 1`, "r01,r02,r03,r04,r05,r06")
		for _, bad := range []string{`status = "nope"`, `name = 1`, `params.lr <`, `(status = "failed"`, `bogus = 1`} {
			if _, err := s.ListRuns(ctx, ListQuery{Filter: bad}); ErrorCode(err) != CodeInvalidArgument {
				t.Errorf("%s: %v", bad, err)
			}
		}
		// Sorting by a metric summary and by a param, missing values last.
		page, _ := s.ListRuns(ctx, ListQuery{Sort: "metrics.val_acc.max", Desc: true})
		if got := runIDs(page); got != "r06,r01,r03,r02,r04,r05" {
			t.Errorf("sort by metric: %s", got)
		}
		page, _ = s.ListRuns(ctx, ListQuery{Sort: "params.opt"})
		if got := runIDs(page); got != "r01,r03,r05,r02,r04,r06" {
			t.Errorf("sort by param: %s", got)
		}
		exps, err := s.ListExperiments(ctx, ListQuery{Filter: `name ~ "de"`})
		if err != nil || len(exps.Experiments) != 1 || exps.Experiments[0].Name != "det" {
			t.Fatalf("experiments: %+v %v", exps, err)
		}
		// The listing carries the same run counts as the detail.
		if e := exps.Experiments[0]; e.Runs != 3 || e.RunCounts[StatusRunning] != 1 || e.RunCounts[StatusStopped] != 1 {
			t.Fatalf("listed run counts: %+v", e)
		}
		d, err := s.GetExperiment(ctx, "det")
		if err != nil || d.Runs != 3 || d.RunCounts[StatusRunning] != 1 || d.RunCounts[StatusStopped] != 1 {
			t.Fatalf("experiment detail: %+v %v", d, err)
		}
		// The runs' summary: val_acc over r02, r04, r06, the highest in r06.
		va := d.Metrics["val_acc"]
		if d.LastActivity == nil || va.Runs != 3 || va.MaxRun != "r06" || (va.MinRun != "r02" && va.MinRun != "r04") || va.Min > va.Max {
			t.Fatalf("experiment overview: last %v, val_acc %+v", d.LastActivity, va)
		}
	})
}

func TestCursorPaging(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		s := open(Config{})
		ctx := context.Background()
		var evs []Event
		for i := 0; i < 57; i++ {
			e := &ev{run: fmt.Sprintf("p%02d", i)}
			var params map[string]any
			if i%5 != 0 {
				params = map[string]any{"lr": float64(i % 7)} // ties, and some missing
			}
			evs = append(evs, e.start("exp", params, nil))
		}
		mustApply(t, s, evs...)
		for _, sort := range []string{"params.lr", "name", "created", "metrics.none"} {
			for _, desc := range []bool{false, true} {
				full, err := s.ListRuns(ctx, ListQuery{Sort: sort, Desc: desc, Limit: 1000})
				if err != nil {
					t.Fatal(err)
				}
				var paged []string
				cur := ""
				for pages := 0; ; pages++ {
					p, err := s.ListRuns(ctx, ListQuery{Sort: sort, Desc: desc, Limit: 10, Cursor: cur})
					if err != nil {
						t.Fatal(err)
					}
					if pages == 2 {
						// New runs appearing between pages must not disturb the rest.
						e := &ev{run: fmt.Sprintf("zz%d%v%s", pages, desc, strings.ReplaceAll(sort, ".", ""))}
						mustApply(t, s, e.start("other", map[string]any{"lr": 3.0}, nil))
					}
					for _, r := range p.Runs {
						if !strings.HasPrefix(r.ID, "zz") {
							paged = append(paged, r.ID)
						}
					}
					if p.Next == "" {
						break
					}
					cur = p.Next
				}
				var want []string
				for _, r := range full.Runs {
					if !strings.HasPrefix(r.ID, "zz") {
						want = append(want, r.ID)
					}
				}
				if !slices.Equal(paged, want) || len(want) != 57 {
					t.Fatalf("sort %s desc=%v:\n paged %v\n  full %v", sort, desc, paged, want)
				}
			}
		}
		if _, err := s.ListRuns(ctx, ListQuery{Sort: "name", Cursor: "garbage"}); ErrorCode(err) != CodeInvalidArgument {
			t.Fatalf("bad cursor: %v", err)
		}
	})
}

func TestLogsAndCheckpoints(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		s := open(Config{})
		ctx := context.Background()
		e := &ev{run: "l1"}
		mustApply(t, s, e.start("exp", nil, nil),
			e.next(Event{Type: EventLog, Stream: "stdout", Lines: []string{"a", "b", "c"}}),
			e.next(Event{Type: EventLog, Stream: "stderr", Lines: []string{"oops"}}),
			e.next(Event{Type: EventLog, Stream: "stdout", Lines: []string{"d"}}),
			e.next(Event{Type: EventCheckpoint, Path: "ckpt/step-10.pt", Step: Ptr(int64(10)), Epoch: Ptr(1.0), Values: map[string]Float{"loss": 0.5}}),
			e.next(Event{Type: EventCheckpoint, Path: "ckpt/step-5.pt", Step: Ptr(int64(5))}),
			e.next(Event{Type: EventArtifact, Path: "model.onnx", Size: Ptr(int64(1234))}),
		)
		tail, _ := s.Logs(ctx, "l1", LogQuery{Tail: 2})
		if len(tail) != 2 || tail[0].Line != "oops" || tail[1].Line != "d" {
			t.Fatalf("tail: %+v", tail)
		}
		all, _ := s.Logs(ctx, "l1", LogQuery{})
		after, _ := s.Logs(ctx, "l1", LogQuery{After: all[1].ID})
		if len(all) != 5 || len(after) != 3 || after[0].Line != "c" {
			t.Fatalf("after: %+v", after)
		}
		errOnly, _ := s.Logs(ctx, "l1", LogQuery{Stream: "stderr"})
		if len(errOnly) != 1 || errOnly[0].Line != "oops" {
			t.Fatalf("stream: %+v", errOnly)
		}
		cks, _ := s.Checkpoints(ctx, "l1")
		if len(cks) != 2 || cks[0].Step != 5 || cks[1].Metrics["loss"] != 0.5 || cks[1].Epoch != 1 {
			t.Fatalf("checkpoints: %+v", cks)
		}
		arts, _ := s.Artifacts(ctx, "l1")
		if len(arts) != 1 || arts[0].Size != 1234 {
			t.Fatalf("artifacts: %+v", arts)
		}
		if _, err := s.Logs(ctx, "nope", LogQuery{}); ErrorCode(err) != CodeNotFound {
			t.Fatalf("unknown run: %v", err)
		}
	})
}

// TestJSONNaN: summaries and buckets of NaN or infinite values encode (as
// the strings Float writes) and decode back.
func TestJSONNaN(t *testing.T) {
	sum := Summary{Last: math.Inf(1), Min: math.NaN(), Max: math.NaN(), LastStep: 4, Count: 2}
	b, err := json.Marshal(map[string]Summary{"loss": sum})
	if err != nil || !strings.Contains(string(b), `{"loss":{"last":"Infinity","last_step":4,`) || !strings.Contains(string(b), `"min":"NaN"`) {
		t.Fatalf("summary: %s %v", b, err)
	}
	var back map[string]Summary
	if err := json.Unmarshal(b, &back); err != nil || !math.IsInf(back["loss"].Last, 1) || !math.IsNaN(back["loss"].Min) || back["loss"].Count != 2 {
		t.Fatalf("summary back: %+v %v", back, err)
	}
	bk := Bucket{StepMin: 1, StepMax: 2, Min: math.NaN(), Max: 3, Last: math.Inf(-1), Count: 2}
	b, err = json.Marshal([]Bucket{bk})
	if err != nil || string(b) != `[{"step_min":1,"step_max":2,"min":"NaN","max":3,"last":"-Infinity","count":2}]` {
		t.Fatalf("bucket: %s %v", b, err)
	}
	var bb []Bucket
	if err := json.Unmarshal(b, &bb); err != nil || len(bb) != 1 || bb[0].Max != 3 || !math.IsNaN(bb[0].Min) || bb[0].StepMax != 2 {
		t.Fatalf("bucket back: %+v %v", bb, err)
	}
	// An experiment's overview of a metric that was only ever NaN.
	b, err = json.Marshal(ExperimentDetail{Metrics: map[string]MetricOverview{"loss": {Runs: 1, Min: Float(math.NaN()), Max: Float(math.NaN())}}})
	if err != nil || !strings.Contains(string(b), `"loss":{"runs":1,"min":"NaN","min_run":"","max":"NaN","max_run":""}`) {
		t.Fatalf("metric overview: %s %v", b, err)
	}
}

// TestNegativeSteps: steps may be negative (MLflow allows them, e.g. -1 for
// "before training"): kept, read back raw, downsampled and range-read with
// the same guarantees as positive ones (every point counted once, buckets in
// order, ranges exact), across the rollups' block boundaries.
func TestNegativeSteps(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		s := open(Config{})
		ctx := context.Background()
		e := &ev{run: "neg"}
		mustApply(t, s, e.start("exp", nil, nil))
		const lo0, hi0 = -20000, 5000
		batch := make([]Event, 0, 5000)
		for i := int64(lo0); i <= hi0; i++ {
			batch = append(batch, e.metrics(i, map[string]float64{"v": float64(i)}))
			if len(batch) == cap(batch) {
				mustApply(t, s, batch...)
				batch = batch[:0]
			}
		}
		mustApply(t, s, batch...)
		check := func(name string, lo, hi *int64, n int) {
			t.Helper()
			ser, err := s.Metrics(ctx, "neg", MetricsQuery{Keys: []string{"v"}, MaxPoints: n, MinStep: lo, MaxStep: hi})
			if err != nil {
				t.Fatal(err)
			}
			wantLo, wantHi := int64(lo0), int64(hi0)
			if lo != nil {
				wantLo = *lo
			}
			if hi != nil {
				wantHi = *hi
			}
			bs := ser[0].Buckets
			var count int64
			for i, b := range bs {
				count += b.Count
				if b.Min != float64(b.StepMin) || b.Max != float64(b.StepMax) || b.Last != float64(b.StepMax) {
					t.Fatalf("%s: bucket %+v", name, b)
				}
				if i > 0 && b.StepMin <= bs[i-1].StepMax {
					t.Fatalf("%s: buckets overlap: %+v %+v", name, bs[i-1], b)
				}
			}
			if len(bs) > n || count != wantHi-wantLo+1 || bs[0].StepMin != wantLo || bs[len(bs)-1].StepMax != wantHi {
				t.Fatalf("%s: %d buckets, count %d, %d..%d; want <= %d, %d, %d..%d", name, len(bs), count, bs[0].StepMin, bs[len(bs)-1].StepMax, n, wantHi-wantLo+1, wantLo, wantHi)
			}
		}
		check("all", nil, nil, 100)
		check("all, 7", nil, nil, 7)
		for _, r := range [][2]int64{{-19999, -17}, {-4097, 4095}, {-300, -1}, {-1, 1}, {-8191, -4096}} {
			lo, hi := r[0], r[1]
			check(fmt.Sprintf("%d..%d", lo, hi), &lo, &hi, 50)
		}
		pts, err := s.History(ctx, "neg", HistoryQuery{Key: "v", Limit: 3})
		if err != nil || len(pts) != 3 || pts[0].Step != lo0 || pts[2].Step != lo0+2 {
			t.Fatalf("history: %+v %v", pts, err)
		}
		after := int64(-2)
		pts, _ = s.History(ctx, "neg", HistoryQuery{Key: "v", Limit: 2, AfterStep: &after})
		if len(pts) != 2 || pts[0].Step != -1 || pts[1].Step != 0 {
			t.Fatalf("history after -2: %+v", pts)
		}
		r, _ := s.GetRun(ctx, "neg")
		if m := r.Metrics["v"]; m.LastStep != hi0 || m.Last != hi0 {
			t.Fatalf("summary: %+v", m)
		}
	})
}

func TestFloorCeilDiv(t *testing.T) {
	for _, c := range [][4]int64{{7, 2, 3, 4}, {-7, 2, -4, -3}, {-8, 2, -4, -4}, {0, 16, 0, 0}, {-1, 16, -1, 0}, {-16, 16, -1, -1}, {-17, 16, -2, -1}} {
		if f, cl := floorDiv(c[0], c[1]), ceilDiv(c[0], c[1]); f != c[2] || cl != c[3] {
			t.Errorf("%d/%d: floor %d ceil %d, want %d %d", c[0], c[1], f, cl, c[2], c[3])
		}
	}
}

// TestReplacedValues: fw's series keeps one value per step (the last
// written), and the values a later write replaced are kept for MLflow's
// history (History's Replaced): across writes, within one batch, with NaN,
// an identical replay adding nothing, and gone with the run.
func TestReplacedValues(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		s := open(Config{})
		ctx := context.Background()
		e := &ev{run: "rep"}
		at := func(step int64, ms int64, v float64) Event {
			x := e.metrics(step, map[string]float64{"m": v})
			x.Time = Timestamp{time.UnixMilli(ms).UTC()}
			return x
		}
		mustApply(t, s, e.start("replaced", nil, nil), at(2, 1, 10))
		mustApply(t, s, at(3, 1, 11))
		mustApply(t, s, at(3, 1, 12))                                   // same time, another value
		mustApply(t, s, at(3, 2, 12))                                   // later time, same value
		mustApply(t, s, at(3, 2, 12))                                   // an identical write: nothing more
		mustApply(t, s, at(4, 5, 1), at(4, 6, math.NaN()), at(4, 7, 2)) // one batch, NaN between
		last, err := s.History(ctx, "rep", HistoryQuery{Key: "m"})
		if err != nil || len(last) != 3 || last[1].Value != 12 || last[2].Value != 2 {
			t.Fatalf("one value per step: %+v %v", last, err)
		}
		all, err := s.History(ctx, "rep", HistoryQuery{Key: "m", Replaced: true})
		if err != nil {
			t.Fatal(err)
		}
		type pv struct {
			step, ms int64
			v        float64
		}
		var got []pv
		for _, p := range all {
			got = append(got, pv{p.Step, p.Time.UnixMilli(), p.Value})
		}
		want := []pv{{2, 1, 10}, {3, 1, 11}, {3, 1, 12}, {3, 2, 12}, {4, 5, 1}, {4, 6, math.NaN()}, {4, 7, 2}}
		if len(got) != len(want) {
			t.Fatalf("every value: %+v", got)
		}
		for i := range want {
			if got[i].step != want[i].step || got[i].ms != want[i].ms || !(got[i].v == want[i].v || math.IsNaN(got[i].v) && math.IsNaN(want[i].v)) {
				t.Fatalf("every value: %+v, want %+v", got, want)
			}
		}
		// A page is whole steps: 2 steps, each with all its values.
		page, _ := s.History(ctx, "rep", HistoryQuery{Key: "m", Limit: 2, Replaced: true})
		if len(page) != 4 || page[3].Step != 3 {
			t.Fatalf("a page of 2 steps: %+v", page)
		}
		if err := s.DeleteRun(ctx, "rep"); err != nil {
			t.Fatal(err)
		}
		if n := countRows(t, s, "metric_replaced"); n != 0 {
			t.Fatalf("%d replaced values outlive their run", n)
		}
	})
}

// countRows counts a table's rows (the test's store is a *sqlStore).
func countRows(t *testing.T, s Store, table string) int {
	t.Helper()
	ss, ok := s.(*sqlStore)
	if !ok {
		t.Fatalf("store is a %T", s)
	}
	var n int
	if err := ss.rdb.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMetricsManyKeysMatchPerKey: Metrics over many keys (smallSeries reads
// the short ones in a few queries, more than one chunk of keys here) answers
// exactly what reading each key alone (series) does, for every shape: a few
// points, more points than buckets (downsampled), negative and far steps,
// NaN, a step logged twice, step bounds that leave a key empty.
func TestMetricsManyKeysMatchPerKey(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		s := open(Config{})
		ctx := context.Background()
		const keys = 2*smallKeysPerQuery + 203
		e := &ev{run: "wide"}
		mustApply(t, s, e.start("exp", nil, nil))
		at := map[int64]map[string]float64{}
		put := func(step int64, k string, v float64) {
			if at[step] == nil {
				at[step] = map[string]float64{}
			}
			at[step][k] = v
		}
		var names []string
		for i := 0; i < keys; i++ {
			k := fmt.Sprintf("k%04d", i)
			names = append(names, k)
			switch i % 4 {
			case 0:
				for st := int64(0); st < 3; st++ {
					put(st, k, float64(i)+float64(st))
				}
			case 1:
				for st := int64(0); st < 40; st++ {
					put(st, k, math.Sin(float64(i+int(st))))
				}
			case 2:
				for st := int64(-5); st < 0; st++ {
					put(st, k, float64(st))
				}
				put(5000, k, 1)
			case 3:
				put(1, k, math.NaN())
				put(2, k, 7)
			}
		}
		steps := make([]int64, 0, len(at))
		for st := range at {
			steps = append(steps, st)
		}
		slices.Sort(steps)
		for _, st := range steps {
			mustApply(t, s, e.metrics(st, at[st]))
		}
		mustApply(t, s, e.metrics(2, map[string]float64{"k0003": 8})) // k0003's step 2 again
		st := s.(*sqlStore)
		rid, err := st.runRID(ctx, "wide")
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]int64{}
		rows, err := st.rdb.QueryContext(ctx, `SELECT id, name FROM metric_keys`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			var name string
			if err := rows.Scan(&id, &name); err != nil {
				t.Fatal(err)
			}
			ids[name] = id
		}
		rows.Close()
		p := func(v int64) *int64 { return &v }
		for _, n := range []int{10, 1000} {
			for _, b := range []struct{ lo, hi *int64 }{{nil, nil}, {p(1), p(30)}, {p(-3), nil}, {p(6000), nil}, {nil, p(-1)}} {
				got, err := s.Metrics(ctx, "wide", MetricsQuery{MaxPoints: n, MinStep: b.lo, MaxStep: b.hi})
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != keys {
					t.Fatalf("n=%d: %d series for %d keys", n, len(got), keys)
				}
				for i, ser := range got {
					if ser.Key != names[i] {
						t.Fatalf("series %d is %q, want %q", i, ser.Key, names[i])
					}
					want, err := st.series(ctx, rid, ids[ser.Key], n, b.lo, b.hi)
					if err != nil {
						t.Fatal(err)
					}
					want.Key = ser.Key
					if g, w := fmt.Sprintf("%+v", ser), fmt.Sprintf("%+v", want); g != w {
						t.Fatalf("n=%d bounds %v..%v key %s:\n got %s\nwant %s", n, b.lo, b.hi, ser.Key, g, w)
					}
				}
			}
		}
	})
}
