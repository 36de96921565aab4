package store

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"math/rand"
	"sync"
	"testing"
)

// recomputedOverview is the experiment summary computed from scratch from
// the runs, as GetExperiment did before the summary was kept at write
// time: run counts by status and, per training metric, the runs reporting
// it and the runs holding its lowest and highest value.
func recomputedOverview(t *testing.T, s *sqlStore, exp string) (map[Status]int, map[string]MetricOverview) {
	t.Helper()
	ctx := context.Background()
	counts := map[Status]int{}
	rows, err := s.rdb.QueryContext(ctx, s.q(`SELECT status, COUNT(*) FROM runs WHERE experiment_id = ? GROUP BY status`), exp)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			t.Fatal(err)
		}
		counts[Status(st)] = n
	}
	rows.Close()
	col := s.collate()
	rows, err = s.rdb.QueryContext(ctx, s.q(`
WITH v AS (SELECT k.name AS name, r.id AS run, s.min_value AS mn, s.max_value AS mx
  FROM metric_summary s JOIN runs r ON r.rid = s.run_rid JOIN metric_keys k ON k.id = s.key_id
  WHERE r.experiment_id = ? AND k.kind = ?),
lo AS (SELECT name, run, mn, ROW_NUMBER() OVER (PARTITION BY name ORDER BY mn, run`+col+`) AS i FROM v WHERE mn IS NOT NULL),
hi AS (SELECT name, run, mx, ROW_NUMBER() OVER (PARTITION BY name ORDER BY mx DESC, run`+col+`) AS i FROM v WHERE mx IS NOT NULL),
c AS (SELECT name, COUNT(*) AS n FROM v GROUP BY name)
SELECT c.name, c.n, lo.mn, lo.run, hi.mx, hi.run
  FROM c LEFT JOIN lo ON lo.name = c.name AND lo.i = 1 LEFT JOIN hi ON hi.name = c.name AND hi.i = 1`), exp, int64(kindMetric))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	ms := map[string]MetricOverview{}
	for rows.Next() {
		var name string
		var o MetricOverview
		var mn, mx sql.NullFloat64
		var minRun, maxRun sql.NullString
		if err := rows.Scan(&name, &o.Runs, &mn, &minRun, &mx, &maxRun); err != nil {
			t.Fatal(err)
		}
		o.Min, o.MinRun = Float(nanIfNull(mn)), minRun.String
		o.Max, o.MaxRun = Float(nanIfNull(mx)), maxRun.String
		ms[name] = o
	}
	return counts, ms
}

func sameFloat(a, b Float) bool {
	return a == b || (math.IsNaN(float64(a)) && math.IsNaN(float64(b)))
}

// checkSummary fails when GetExperiment's summary of every experiment
// differs from the one recomputed from the runs.
func checkSummary(t *testing.T, s Store, step string) {
	t.Helper()
	ctx := context.Background()
	ss := s.(*sqlStore)
	page, err := s.ListExperiments(ctx, ListQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, le := range page.Experiments {
		d, err := s.GetExperiment(ctx, le.ID)
		if err != nil {
			t.Fatal(err)
		}
		counts, ms := recomputedOverview(t, ss, le.ID)
		total := 0
		for _, n := range counts {
			total += n
		}
		if d.Runs != total || len(d.RunCounts) != len(counts) || le.Runs != total || len(le.RunCounts) != len(counts) {
			t.Fatalf("%s: experiment %s: runs %d %v (listed %d %v), recomputed %d %v", step, d.Name, d.Runs, d.RunCounts, le.Runs, le.RunCounts, total, counts)
		}
		for st, n := range counts {
			if d.RunCounts[st] != n || le.RunCounts[st] != n {
				t.Fatalf("%s: experiment %s: run counts %v (listed %v), recomputed %v", step, d.Name, d.RunCounts, le.RunCounts, counts)
			}
		}
		if total == 0 {
			continue
		}
		var last sql.NullInt64
		if err := ss.rdb.QueryRowContext(ctx, ss.q(`SELECT MAX(updated) FROM runs WHERE experiment_id = ?`), le.ID).Scan(&last); err != nil {
			t.Fatal(err)
		}
		if d.LastActivity == nil || d.LastActivity.UnixNano() != last.Int64 {
			t.Fatalf("%s: experiment %s: last activity %v, want %d", step, d.Name, d.LastActivity, last.Int64)
		}
		if len(d.Metrics) != len(ms) {
			t.Fatalf("%s: experiment %s: metrics %+v, recomputed %+v", step, d.Name, d.Metrics, ms)
		}
		for k, want := range ms {
			got, ok := d.Metrics[k]
			if !ok || got.Runs != want.Runs || got.MinRun != want.MinRun || got.MaxRun != want.MaxRun || !sameFloat(got.Min, want.Min) || !sameFloat(got.Max, want.Max) {
				t.Fatalf("%s: experiment %s metric %s: %+v, recomputed %+v", step, d.Name, k, got, want)
			}
		}
	}
}

// TestExperimentSummaryRandomWrites applies random writes, status changes,
// resumes, deletes and re-creations of runs, reconciles and experiment
// deletions (on PostgreSQL through two stores on one schema, as two
// dashboards) and compares the summary kept at write time with the one
// recomputed from scratch after each.
func TestExperimentSummaryRandomWrites(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		ctx := context.Background()
		a := open(Config{})
		stores := []Store{a}
		if u := a.(*sqlStore).cfg.DatabaseURL; u != "" {
			stores = append(stores, open(Config{DatabaseURL: u}))
		}
		rng := rand.New(rand.NewSource(22))
		vals := []float64{-1, 0, 0.5, 1, 2, math.NaN()}
		keys := []string{"acc", "loss", "lr", "val/acc"}
		statuses := []Status{StatusFinished, StatusFailed, StatusStopped, StatusRunning, StatusQueued}
		seq := map[string]int64{}
		next := func(id string) int64 { seq[id]++; return seq[id] }
		ops := 400
		if testing.Short() {
			ops = 150
		}
		for op := 0; op < ops; op++ {
			s := stores[rng.Intn(len(stores))]
			id := fmt.Sprintf("r%02d", rng.Intn(24))
			var step string
			switch x := rng.Intn(100); {
			case x < 4:
				step = "delete " + id
				if err := s.DeleteRun(ctx, id); err != nil && ErrorCode(err) != CodeNotFound {
					t.Fatal(err)
				}
			case x < 5:
				step = "delete experiment e1"
				d, err := s.GetExperiment(ctx, "e1")
				if err == nil {
					if err := s.DeleteExperiment(ctx, d.ID); err != nil {
						t.Fatal(err)
					}
				}
			case x < 8:
				step = "reconcile"
				if _, err := s.Reconcile(ctx, func(Run) bool { return rng.Intn(2) == 0 }, ""); err != nil {
					t.Fatal(err)
				}
			default:
				var evs []Event
				for n := 1 + rng.Intn(4); n > 0; n-- {
					id := fmt.Sprintf("r%02d", rng.Intn(24))
					switch y := rng.Intn(100); {
					case y < 20:
						st := StatusRunning
						if rng.Intn(3) == 0 {
							st = StatusQueued
						}
						evs = append(evs, Event{Type: EventRunStart, RunID: id, Seq: next(id), Experiment: fmt.Sprintf("e%d", rng.Intn(2)), Status: st})
					case y < 30:
						evs = append(evs, Event{Type: EventStatus, RunID: id, Seq: next(id), Status: statuses[rng.Intn(len(statuses))]})
					case y < 35:
						evs = append(evs, Event{Type: EventRunResume, RunID: id, Seq: next(id)})
					case y < 40:
						evs = append(evs, Event{Type: EventSystem, RunID: id, Seq: next(id), Values: map[string]Float{"cpu": Float(rng.Float64())}})
					default:
						m := map[string]Float{}
						for k := 1 + rng.Intn(3); k > 0; k-- {
							m[keys[rng.Intn(len(keys))]] = Float(vals[rng.Intn(len(vals))])
						}
						evs = append(evs, Event{Type: EventMetrics, RunID: id, Seq: next(id), Step: Ptr(int64(rng.Intn(4))), Values: m})
					}
				}
				step = fmt.Sprintf("apply %+v", evs)
				if _, err := s.Apply(ctx, evs); err != nil {
					t.Fatal(err)
				}
			}
			checkSummary(t, a, fmt.Sprintf("op %d (%s)", op, step))
		}
	})
}

// TestExperimentSummaryConcurrentWrites has writers race on one
// experiment's keys (on PostgreSQL through two stores, as two dashboards),
// with runs deleted meanwhile; the summary then equals the recomputed one.
func TestExperimentSummaryConcurrentWrites(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		ctx := context.Background()
		a := open(Config{})
		stores := []Store{a}
		if u := a.(*sqlStore).cfg.DatabaseURL; u != "" {
			stores = append(stores, open(Config{DatabaseURL: u}))
		}
		// A PostgreSQL deadlock (40P01) between the two stores' group
		// commits is the writer's to retry (runGroup): no write may fail.
		retry := func(f func() error) error { return f() }
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				s := stores[w%len(stores)]
				rng := rand.New(rand.NewSource(int64(w)))
				for r := 0; r < 10; r++ {
					id := fmt.Sprintf("w%dr%d", w, r)
					evs := []Event{{Type: EventRunStart, RunID: id, Seq: 1, Experiment: "race"}}
					for st := int64(0); st < 5; st++ {
						evs = append(evs, Event{Type: EventMetrics, RunID: id, Seq: 2 + st, Step: Ptr(st), Values: map[string]Float{
							"loss": Float(float64(rng.Intn(50)) / 10), "acc": Float(float64(rng.Intn(50)) / 10)}})
					}
					evs = append(evs, Event{Type: EventRunEnd, RunID: id, Seq: 7})
					if err := retry(func() error { _, err := s.Apply(ctx, evs); return err }); err != nil {
						errs <- err
						return
					}
					if r%3 == 2 {
						del := fmt.Sprintf("w%dr%d", w, rng.Intn(r))
						if err := retry(func() error { return s.DeleteRun(ctx, del) }); err != nil && ErrorCode(err) != CodeNotFound {
							errs <- err
							return
						}
					}
				}
			}(w)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		var retried int64
		for _, s := range stores {
			retried += s.(*sqlStore).groupRetries.Load()
		}
		t.Logf("write groups run again after a deadlock: %d", retried)
		checkSummary(t, a, "after the race")
	})
}

// TestExperimentSummaryMigration builds the summary of a database written
// before it was kept (migration 6 from the runs' summaries).
func TestExperimentSummaryMigration(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		ctx := context.Background()
		cfg := Config{Dir: t.TempDir()}
		s := open(cfg)
		rng := rand.New(rand.NewSource(6))
		for r := 0; r < 30; r++ {
			id := fmt.Sprintf("m%02d", r)
			e := &ev{run: id}
			evs := []Event{e.start(fmt.Sprintf("x%d", r%3), nil, nil)}
			for st := int64(0); st < 3; st++ {
				evs = append(evs, e.metrics(st, map[string]float64{"loss": float64(rng.Intn(7)), "acc": float64(rng.Intn(7))}))
			}
			if r%4 != 0 {
				evs = append(evs, e.next(Event{Type: EventRunEnd}))
			}
			mustApply(t, s, evs...)
		}
		ss := s.(*sqlStore)
		for _, q := range []string{`DROP TABLE experiment_metrics`, `DROP TABLE experiment_run_counts`, `DROP INDEX runs_experiment_updated`, `DELETE FROM schema_migrations WHERE version = 6`} {
			if _, err := ss.wdb.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		if ss.cfg.DatabaseURL != "" {
			cfg = Config{DatabaseURL: ss.cfg.DatabaseURL}
		}
		s.Close()
		checkSummary(t, open(cfg), "after migration 6")
	})
}
