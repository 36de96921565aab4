package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fw-serve/fw/dashboard/query"
)

// keysetData writes two experiments of random runs with ties everywhere a
// sort can tie (created, name, metric values), runs lacking a key, keys
// logged only as NaN, queued runs (no started), system metrics; in "full"
// every run reports acc (the kept counts then skip the scan for runs
// lacking it).
func keysetData(t *testing.T, st Store, seed int64) {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	base := time.Unix(1_700_000_000, 0)
	var evs []Event
	for i := 0; i < 180; i++ {
		exp := "mixed"
		if i%4 == 3 {
			exp = "full"
		}
		e := &ev{run: fmt.Sprintf("k%03d", rng.Intn(1000)*1000+i)}
		params := map[string]any{"lr": float64(rng.Intn(5)) / 10}
		// opt: text, a number, a bool or absent, with ties.
		if o := []any{"adam", "sgd", "Adam", 3.0, -1.0, true, nil}[rng.Intn(7)]; o != nil {
			params["opt"] = o
		}
		start := e.start(exp, params, map[string]string{"team": []string{"vision", "nlp"}[rng.Intn(2)]})
		start.Time = Timestamp{base.Add(time.Duration(rng.Intn(30)) * time.Second)}
		start.Name = fmt.Sprintf("n%d", rng.Intn(6))
		if rng.Intn(8) == 0 {
			start.Status = StatusQueued
		}
		evs = append(evs, start)
		steps := 1 + rng.Intn(3)
		for s := 0; s < steps; s++ {
			vals := map[string]float64{}
			if exp == "full" || rng.Intn(5) > 0 {
				vals["acc"] = float64(rng.Intn(8)) / 8
			}
			if rng.Intn(3) > 0 {
				v := float64(rng.Intn(4))
				if rng.Intn(6) == 0 {
					v = math.NaN()
				}
				vals["loss"] = v
			}
			if len(vals) > 0 {
				m := e.metrics(int64(s), vals)
				m.Time = Timestamp{base.Add(time.Duration(100+rng.Intn(30)) * time.Second)}
				evs = append(evs, m)
			}
			if rng.Intn(4) == 0 {
				evs = append(evs, e.next(Event{Type: EventSystem, Values: map[string]Float{"cpu": Float(rng.Intn(3))}}))
			}
		}
	}
	for len(evs) > 0 {
		n := min(len(evs), 200)
		mustApply(t, st, evs[:n]...)
		evs = evs[n:]
	}
}

// buildSortIndexes asks for a page of experiment exp sorted by each of
// sorts, letting the store build the metric sort index each needs, and
// waits for every build.
func buildSortIndexes(t *testing.T, st Store, exp string, sorts ...string) {
	t.Helper()
	ss := st.(*sqlStore)
	for _, sort := range sorts {
		for try := 0; ; try++ {
			before := ss.sortIdx.served.Load()
			if _, err := st.ListRuns(context.Background(), ListQuery{Experiment: exp, Sort: sort, Limit: 1}); err != nil {
				t.Fatalf("%s: %v", sort, err)
			}
			ss.sortIdx.wg.Wait()
			if ss.sortIdx.served.Load() > before {
				break
			}
			if try == 3 {
				t.Fatalf("sorting by %s: no sort index after %d pages", sort, try+1)
			}
		}
	}
}

// walk lists every page of q, returning the pages' IDs and next cursors.
func walk(t *testing.T, st Store, q ListQuery) []string {
	t.Helper()
	var out []string
	for i := 0; ; i++ {
		p, err := st.ListRuns(context.Background(), q)
		if err != nil {
			t.Fatalf("%+v: %v", q, err)
		}
		out = append(out, runIDs(p)+" next="+p.Next)
		if p.Next == "" {
			return out
		}
		if i > 1000 {
			t.Fatalf("%+v: no end", q)
		}
		q.Cursor = p.Next
	}
}

// TestListRunsIndexedSortsMatchSorted checks that every sort an index serves
// pages exactly as the query that sorts all filtered rows: the same runs in
// the same order (ties by ID), runs lacking the value last, the same
// cursors, through every page, on random data.
func TestListRunsIndexedSortsMatchSorted(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		st := open(Config{})
		keysetData(t, st, 7)
		ss := st.(*sqlStore)
		buildSortIndexes(t, st, "mixed", "metrics.acc", "metrics.acc.min", "metrics.acc.max", "metrics.loss.last", "metrics.loss.min", "metrics.loss.max", "system.cpu", "system.cpu.max")
		served := ss.sortIdx.served.Load()
		sorts := []string{"created", "updated", "started", "id", "name", "metrics.acc", "metrics.acc.min", "metrics.acc.max",
			"metrics.loss.last", "metrics.loss.min", "metrics.loss.max", "metrics.nokey", "system.cpu", "system.cpu.max", "params.lr", "params.opt", "params.nokey", "status"}
		filters := []string{"", "params.lr > 0.15", "tags.team = 'vision'", "metrics.acc > 0.3 and status != 'queued'"}
		checked := 0
		// Every sort, filter and order on "mixed", the sorts alone on
		// "full"; the page size alternates between a small and a large
		// one (the whole product took minutes under -race: modernc's
		// SQLite is Go, and the race detector instruments it all).
		for _, exp := range []string{"mixed", "full"} {
			for _, sort := range sorts {
				for fi, filter := range filters {
					if exp == "full" && filter != "" || raceDetector && (fi > 0 || exp == "full") {
						continue
					}
					for oi, order := range []struct{ desc, idAsc bool }{{false, false}, {true, false}, {true, true}} {
						limits := [][]int{{7}, {40}}[(fi+oi+len(sort))%2]
						if raceDetector {
							limits = []int{40}
						}
						for _, limit := range limits {
							q := ListQuery{Experiment: exp, Sort: sort, Filter: filter, Desc: order.desc, IDAsc: order.idAsc, Limit: limit}
							ss.cfg.sortedPages = false
							got := walk(t, st, q)
							ss.cfg.sortedPages = true
							want := walk(t, st, q)
							ss.cfg.sortedPages = false
							if strings.Join(got, "\n") != strings.Join(want, "\n") {
								t.Fatalf("%+v:\nindexed:\n%s\nsorted:\n%s", q, strings.Join(got, "\n"), strings.Join(want, "\n"))
							}
							checked++
						}
					}
				}
			}
		}
		// Pages of one: every position's cursor, crossing from the runs
		// having the value to those lacking it.
		for _, sort := range []string{"metrics.loss.min", "params.opt"} {
			if raceDetector && sort != "params.opt" {
				continue
			}
			for _, idAsc := range []bool{false, true} {
				q := ListQuery{Experiment: "mixed", Sort: sort, Desc: true, IDAsc: idAsc, Limit: 1}
				got := walk(t, st, q)
				ss.cfg.sortedPages = true
				want := walk(t, st, q)
				ss.cfg.sortedPages = false
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Fatalf("%+v: pages of one differ", q)
				}
			}
		}
		if checked == 0 || ss.sortIdx.served.Load() == served {
			t.Fatalf("nothing checked (%d sorts; pages through a sort index: %d)", checked, ss.sortIdx.served.Load()-served)
		}
	})
}

// TestListRunsCursorTampered checks that a cursor this store did not make
// for the query is refused as an invalid argument, not read as another
// position (nor a database error).
func TestListRunsCursorTampered(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		st := open(Config{})
		keysetData(t, st, 3)
		ctx := context.Background()
		p, err := st.ListRuns(ctx, ListQuery{Experiment: "mixed", Sort: "metrics.acc", Limit: 5})
		if err != nil || p.Next == "" {
			t.Fatalf("first page: %v %q", err, p.Next)
		}
		enc := func(m map[string]any) string {
			b, _ := json.Marshal(m)
			return base64.RawURLEncoding.EncodeToString(b)
		}
		for _, c := range []struct{ sort, cursor string }{
			{"metrics.acc", "not base64!"},
			{"metrics.acc", base64.RawURLEncoding.EncodeToString([]byte("[1,2]"))},
			{"metrics.acc", p.Next[:len(p.Next)-3]},
			{"created", p.Next}, // made for another sort
			{"metrics.acc", enc(map[string]any{"o": "metrics.acc", "id": "x", "m": 2})},
			{"metrics.acc", enc(map[string]any{"o": "metrics.acc", "id": "x", "k": 1})},                 // a metric's value is a number
			{"metrics.acc", enc(map[string]any{"o": "metrics.acc", "id": "x", "s": "text"})},            // not text
			{"metrics.acc", enc(map[string]any{"o": "metrics.acc", "id": "x", "m": 1, "k": 1, "n": 3})}, // missing, with a value
			{"created", enc(map[string]any{"o": "created", "id": "x", "n": 1.5})},                       // a time is an integer
			{"created", enc(map[string]any{"o": "created", "id": "", "k": 1, "i": 5})},                  // no run ID
		} {
			_, err := st.ListRuns(ctx, ListQuery{Experiment: "mixed", Sort: c.sort, Limit: 5, Cursor: c.cursor})
			if ErrorCode(err) != CodeInvalidArgument {
				t.Errorf("sort %s cursor %q: %v, want invalid_argument", c.sort, c.cursor, err)
			}
		}
		// The cursor as made still works, for the indexed and sorted queries.
		for _, sorted := range []bool{false, true} {
			st.(*sqlStore).cfg.sortedPages = sorted
			if _, err := st.ListRuns(ctx, ListQuery{Experiment: "mixed", Sort: "metrics.acc", Limit: 5, Cursor: p.Next}); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestMigration7FillsSummaryExperiments checks that migration 7 gives the
// metric summaries of a version 6 database (written by Apply, then the
// column and indexes taken away) their experiment, so the indexed pages of
// an upgraded database are those of the sorted query.
func TestMigration7FillsSummaryExperiments(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		cfg := Config{Dir: t.TempDir()}
		st := open(cfg)
		keysetData(t, st, 11)
		ss := st.(*sqlStore)
		ctx := context.Background()
		for _, stmt := range []string{
			`DROP INDEX runs_experiment_id`, `DROP INDEX runs_experiment_name`, `DROP INDEX runs_experiment_started`,
			`DROP INDEX params_sort_num`, `DROP INDEX params_sort_str`, `ALTER TABLE params DROP COLUMN experiment_id`, `ALTER TABLE params DROP COLUMN run_id`,
			`ALTER TABLE metric_summary DROP COLUMN experiment_id`, `DELETE FROM schema_migrations WHERE version = 7`,
		} {
			if _, err := ss.wdb.ExecContext(ctx, stmt); err != nil {
				t.Fatalf("%s: %v", stmt, err)
			}
		}
		if ss.d != 0 {
			cfg.DatabaseURL = ss.cfg.DatabaseURL
		}
		st.Close()
		up, err := Open(ctx, cfg)
		if err != nil {
			t.Fatalf("upgrading: %v", err)
		}
		defer up.Close()
		us := up.(*sqlStore)
		buildSortIndexes(t, up, "mixed", "metrics.acc", "metrics.loss.min", "system.cpu.max")
		var unset, total int
		if err := us.rdb.QueryRow(`SELECT COUNT(*) - COUNT(experiment_id), COUNT(*) FROM metric_summary`).Scan(&unset, &total); err != nil || unset != 0 || total == 0 {
			t.Fatalf("after migration 7: %d of %d summaries without experiment (%v)", unset, total, err)
		}
		var wrong int
		if err := us.rdb.QueryRow(`SELECT COUNT(*) FROM metric_summary s JOIN runs r ON r.rid = s.run_rid WHERE s.experiment_id <> r.experiment_id`).Scan(&wrong); err != nil || wrong != 0 {
			t.Fatalf("after migration 7: %d summaries name another experiment (%v)", wrong, err)
		}
		if err := us.rdb.QueryRow(`SELECT COUNT(*) - COUNT(p.experiment_id), COUNT(*) FROM params p JOIN runs r ON r.rid = p.run_rid AND r.id = p.run_id AND r.experiment_id = p.experiment_id`).Scan(&unset, &total); err != nil || unset != 0 || total == 0 {
			t.Fatalf("after migration 7: %d of %d params without experiment (%v)", unset, total, err)
		}
		for _, sort := range []string{"metrics.acc", "metrics.loss.min", "system.cpu.max", "started", "name", "params.opt", "params.lr"} {
			q := ListQuery{Experiment: "mixed", Sort: sort, Desc: true, Limit: 9}
			got := walk(t, up, q)
			us.cfg.sortedPages = true
			want := walk(t, up, q)
			us.cfg.sortedPages = false
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("%+v after the upgrade: indexed and sorted pages differ", q)
			}
		}
	})
}

// TestSortIndexOnDemand checks the metric sort indexes' life: none is kept
// for a key nobody sorts by (writing a point maintains no index for it);
// the first page sorted by a key is sorted in full, right, while its index
// is built; later pages read the index; past the cap a sort stays a full
// sort, right; a reopened store finds the indexes built before.
func TestSortIndexOnDemand(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		cfg := Config{Dir: t.TempDir()}
		st := open(cfg)
		keysetData(t, st, 5)
		ss := st.(*sqlStore)
		ctx := context.Background()
		count := func(s *sqlStore) int {
			_, n, err := s.sortIndexExists(ctx, "none")
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := count(ss); n != 0 {
			t.Fatalf("%d sort indexes before any sort", n)
		}
		q := ListQuery{Experiment: "mixed", Sort: "metrics.loss.max", Desc: true, Limit: 6}
		ss.cfg.sortedPages = true
		want := walk(t, st, q)
		ss.cfg.sortedPages = false
		first := walk(t, st, q) // sorted in full: the index is being built
		if strings.Join(first, "\n") != strings.Join(want, "\n") {
			t.Fatal("the first pages, sorted in full while the index is built, differ")
		}
		ss.sortIdx.wg.Wait()
		served := ss.sortIdx.served.Load()
		if got := walk(t, st, q); strings.Join(got, "\n") != strings.Join(want, "\n") || ss.sortIdx.served.Load() == served {
			t.Fatalf("through the index: same pages %v, pages served by it %d", strings.Join(got, "\n") == strings.Join(want, "\n"), ss.sortIdx.served.Load()-served)
		}
		if n := count(ss); n != 1 {
			t.Fatalf("%d sort indexes after sorting by one key", n)
		}
		// The cap: no second index; the sort stays right.
		ss.sortIdx.max = 1
		q2 := ListQuery{Experiment: "mixed", Sort: "metrics.acc.min", Limit: 8}
		ss.cfg.sortedPages = true
		want2 := walk(t, st, q2)
		ss.cfg.sortedPages = false
		for i := 0; i < 2; i++ {
			if got := walk(t, st, q2); strings.Join(got, "\n") != strings.Join(want2, "\n") {
				t.Fatal("a sort past the cap differs")
			}
			ss.sortIdx.wg.Wait()
		}
		if n := count(ss); n != 1 {
			t.Fatalf("%d sort indexes with a cap of 1", n)
		}
		// More points for the sorted key go through its index.
		e := &ev{run: "late"}
		mustApply(t, st, e.start("mixed", nil, nil), e.metrics(0, map[string]float64{"loss": 1e9}))
		p, err := st.ListRuns(ctx, ListQuery{Experiment: "mixed", Sort: "metrics.loss.max", Desc: true, Limit: 1})
		if err != nil || runIDs(p) != "late" {
			t.Fatalf("the newest maximum first: %q, %v", runIDs(p), err)
		}
		if ss.d != 0 {
			cfg.DatabaseURL = ss.cfg.DatabaseURL
		}
		st.Close()
		re, err := Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer re.Close()
		rs := re.(*sqlStore)
		if _, err := re.ListRuns(ctx, q); err != nil || rs.sortIdx.served.Load() != 1 {
			t.Fatalf("reopened: the index built before is not read (%v, served %d)", err, rs.sortIdx.served.Load())
		}
	})
}

// TestColumnsAndParamKeys checks the column projection (a page carries only
// the params and metrics asked for, the same runs in the same order) and
// the experiment's param keys (numbers and text, sorted, each once).
func TestColumnsAndParamKeys(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		st := open(Config{})
		keysetData(t, st, 3)
		ctx := context.Background()
		d, err := st.GetExperiment(ctx, "mixed")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(d.ParamKeys, ",") != "lr,opt" {
			t.Fatalf("param keys %v", d.ParamKeys)
		}
		q := ListQuery{Experiment: "mixed", Sort: "metrics.acc", Limit: 30}
		all, err := st.ListRuns(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		q.Columns = &Columns{Params: []string{"opt"}, Metrics: []string{"loss", "nokey"}, System: []string{"cpu"}}
		some, err := st.ListRuns(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if runIDs(all) != runIDs(some) || all.Next != some.Next {
			t.Fatal("a projection changed the page")
		}
		sawLoss, sawCPU := false, false
		for i, r := range some.Runs {
			for k := range r.Params {
				if k != "opt" {
					t.Fatalf("run %s carries param %s", r.ID, k)
				}
			}
			if _, ok := r.Metrics["acc"]; ok {
				t.Fatalf("run %s carries metric acc", r.ID)
			}
			if s, ok := r.Metrics["loss"]; ok {
				sawLoss = true
				if w := all.Runs[i].Metrics["loss"]; s.Count != w.Count || s.LastStep != w.LastStep {
					t.Fatalf("run %s: loss %+v, want %+v", r.ID, s, w)
				}
			}
			if _, ok := r.System["cpu"]; ok {
				sawCPU = true
			}
			if len(r.Tags) != len(all.Runs[i].Tags) {
				t.Fatalf("run %s: tags dropped", r.ID)
			}
		}
		if !sawLoss || !sawCPU {
			t.Fatalf("projected columns missing: loss %v, cpu %v", sawLoss, sawCPU)
		}
		q.Columns = &Columns{}
		none, err := st.ListRuns(ctx, q)
		if err != nil || runIDs(none) != runIDs(all) {
			t.Fatalf("no columns: %v", err)
		}
		for _, r := range none.Runs {
			if len(r.Params)+len(r.Metrics)+len(r.System) != 0 {
				t.Fatalf("run %s carries columns with none asked for", r.ID)
			}
		}
	})
}

// TestGlobKeepsCaseOnBothBackends: GLOB (MLflow's LIKE) keeps case where
// LIKE does not, in SQLite and PostgreSQL alike.
func TestGlobKeepsCaseOnBothBackends(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		st := open(Config{})
		for i, name := range []string{"Bold-1", "bold-2", "bolder", "x_bold-3"} {
			e := &ev{run: fmt.Sprintf("g%d", i)}
			s := e.start("globs", nil, map[string]string{"k": name})
			s.Name = name
			mustApply(t, st, s)
		}
		for _, c := range []struct{ filter, want string }{
			{`name GLOB "bold-*"`, "g1"},
			{`name LIKE "bold-*"`, "g0,g1"},
			{`tags.k GLOB "*old-?"`, "g0,g1,g3"},
			{`name GLOB "B*"`, "g0"},
		} {
			p, err := st.ListRuns(context.Background(), ListQuery{Experiment: "globs", Filter: c.filter, Sort: "id"})
			if err != nil || runIDs(p) != c.want {
				t.Errorf("%s: %q (%v), want %q", c.filter, runIDs(p), err, c.want)
			}
		}
	})
}

// TestSortIndexesBuiltForFinishedSweeps checks the indexes built before a
// sort: once writes pause, the metric keys that at least SortIndexRuns
// runs of a finished experiment report get their three sort indexes, so
// that the first page sorted by one of them reads an index; a smaller
// experiment's keys and a running sweep's get none (until it finishes);
// SortIndexRuns < 0 builds none.
func TestSortIndexesBuiltForFinishedSweeps(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st := open(Config{SortIndexRuns: 20, SortIndexIdle: 20 * time.Millisecond})
		ss := st.(*sqlStore)
		var evs []Event
		var liveRun *ev
		add := func(exp string, runs int, keys ...string) {
			for i := 0; i < runs; i++ {
				e := &ev{run: fmt.Sprintf("%s-%02d", exp, i)}
				evs = append(evs, e.start(exp, nil, nil))
				for step := int64(0); step < 3; step++ {
					vals := map[string]float64{}
					for k, key := range keys {
						vals[key] = float64((i*7+int(step)*3+k)%11) / 4
					}
					evs = append(evs, e.metrics(step, vals))
				}
				if exp == "live" && i == 0 {
					liveRun = e // still running
					continue
				}
				evs = append(evs, e.next(Event{Type: EventRunEnd, Status: StatusFinished}))
			}
		}
		add("sweep", 25, "acc", "loss")
		add("small", 5, "tiny")
		add("live", 25, "live_k")
		mustApply(t, st, evs...)
		if err := WaitSortIndexes(ctx, st); err != nil {
			t.Fatal(err)
		}
		indexes := func() map[string]bool {
			t.Helper()
			got := map[string]bool{}
			for _, key := range []string{"acc", "loss", "tiny", "live_k"} {
				var id int64
				if err := ss.rdb.QueryRowContext(ctx, ss.q(`SELECT id FROM metric_keys WHERE kind = 0 AND name = ?`), key).Scan(&id); err != nil {
					t.Fatal(err)
				}
				for _, col := range []string{"last_value", "min_value", "max_value"} {
					exists, _, err := ss.sortIndexExists(ctx, sortIndexName(id, col))
					if err != nil {
						t.Fatal(err)
					}
					if exists {
						got[key+"."+col] = true
					}
				}
			}
			return got
		}
		want := "acc.last_value acc.max_value acc.min_value loss.last_value loss.max_value loss.min_value"
		got := indexes()
		if s := strings.Join(sortedKeys(got), " "); s != want {
			t.Fatalf("sort indexes after the writes paused: %s, want %s", s, want)
		}
		// The first page sorted by a prebuilt key reads its index, and agrees
		// with the generic sort.
		for _, q := range []ListQuery{
			{Experiment: "sweep", Sort: "metrics.acc.min", Limit: 7},
			{Experiment: "sweep", Sort: "metrics.loss.last", Desc: true, Limit: 7},
		} {
			ss.cfg.sortedPages = true
			wantPages := walk(t, st, q)
			ss.cfg.sortedPages = false
			served := ss.sortIdx.served.Load()
			if got := walk(t, st, q); strings.Join(got, "\n") != strings.Join(wantPages, "\n") || ss.sortIdx.served.Load() == served {
				t.Fatalf("%s: same pages %v, pages served by an index %d", q.Sort, strings.Join(got, "\n") == strings.Join(wantPages, "\n"), ss.sortIdx.served.Load()-served)
			}
		}
		// The live sweep's last run ends: its key's indexes follow.
		mustApply(t, st, liveRun.next(Event{Type: EventRunEnd, Status: StatusFinished}))
		if err := WaitSortIndexes(ctx, st); err != nil {
			t.Fatal(err)
		}
		if got := indexes(); !got["live_k.last_value"] || !got["live_k.min_value"] || !got["live_k.max_value"] || got["tiny.last_value"] {
			t.Fatalf("sort indexes after the live sweep finished: %v", sortedKeys(got))
		}

		// Off: none, for a sweep of the same size.
		off := open(Config{SortIndexRuns: -1, SortIndexIdle: 20 * time.Millisecond})
		mustApply(t, off, evs...)
		if err := WaitSortIndexes(ctx, off); err != nil {
			t.Fatal(err)
		}
		if _, n, err := off.(*sqlStore).sortIndexExists(ctx, "none"); err != nil || n != 0 {
			t.Fatalf("SortIndexRuns -1: %d sort indexes (%v)", n, err)
		}
	})
}

func sortedKeys(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }

// TestKeysetParamTiesSeek checks, by SQLite's query plan, that a later page
// sorted by a param starts its index scan at the cursor's (value, run ID),
// not at the first run of the cursor's value: a param of few values ties
// many runs, and scanning the ties before the cursor made a deep page cost
// time in proportion to its depth (90 ms at a million runs).
func TestKeysetParamTiesSeek(t *testing.T) {
	st := mustOpen(t, Config{Dir: t.TempDir()})
	keysetData(t, st, 9)
	ss := st.(*sqlStore)
	ctx := context.Background()
	for _, sort := range []string{"params.opt", "params.lr"} {
		q := ListQuery{Experiment: "mixed", Sort: sort, Limit: 5}
		p1, err := st.ListRuns(ctx, q)
		if err != nil || p1.Next == "" {
			t.Fatalf("%s: first page: next %q, %v", sort, p1.Next, err)
		}
		var plans []string
		ss.cfg.segmentQuery = func(text string, args []any) {
			rows, err := ss.rdb.QueryContext(ctx, "EXPLAIN QUERY PLAN "+text, args...)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				var id, parent, unused int
				var detail string
				if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
					t.Fatal(err)
				}
				plans = append(plans, detail)
			}
		}
		q.Cursor = p1.Next
		if _, err := st.ListRuns(ctx, q); err != nil {
			t.Fatal(err)
		}
		ss.cfg.segmentQuery = nil
		plan := strings.Join(plans, "\n")
		if !strings.Contains(plan, ",run_id)>(?,?)") {
			t.Fatalf("%s: page 2 does not seek to the cursor's (value, run ID):\n%s", sort, plan)
		}
	}
}

// TestNameSearch checks the runs table's name search (name ~ 'text') read
// through the names' trigram index (SQLite's FTS5, PostgreSQL's pg_trgm):
// the same pages as the search
// checking every run's name, which are the runs whose names contain the
// text in any ASCII case; a renamed run is found by its new name only, a
// deleted one not at all; texts the index cannot narrow (short, wildcards)
// and searches matching more than maxNameCandidates runs read in order as
// before.
func TestNameSearch(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		st := open(Config{})
		ss := st.(*sqlStore)
		ctx := context.Background()
		adj := []string{"amber", "Brisk", "calm", "ALPHA", "delta"}
		noun := []string{"aurora", "falcon", "alphabet", "river"}
		base := time.Unix(1_700_000_000, 0)
		var evs []Event
		names := map[string]string{} // run ID -> name, in "names"
		for i := 0; i < 60; i++ {
			for _, exp := range []string{"names", "other"} {
				e := &ev{run: fmt.Sprintf("%s%02d", exp[:1], i)}
				start := e.start(exp, map[string]any{"i": float64(i % 7)}, nil)
				start.Name = fmt.Sprintf("%s-%s-%d", adj[i%5], noun[i%4], i)
				start.Time = Timestamp{base.Add(time.Duration(i%9) * time.Second)}
				evs = append(evs, start)
				if exp == "names" {
					names[e.run] = start.Name
				}
			}
		}
		mustApply(t, st, evs...)
		newName := "renamed-zebra-7"
		if _, err := st.UpdateRun(ctx, "n07", RunPatch{Name: &newName}); err != nil {
			t.Fatal(err)
		}
		names["n07"] = newName
		if err := st.DeleteRun(ctx, "n08"); err != nil {
			t.Fatal(err)
		}
		delete(names, "n08")
		WaitBackground(st) // PostgreSQL's trigram index of the names
		if ss.d == query.Postgres && !ss.nameIndex.Load() {
			t.Log("PostgreSQL without pg_trgm: the search reads every run, the index's narrowing is not checked")
		}
		contains := func(text string) map[string]bool {
			out := map[string]bool{}
			for id, n := range names {
				if strings.Contains(strings.ToLower(n), strings.ToLower(text)) {
					out[id] = true
				}
			}
			return out
		}
		for _, c := range []struct {
			text   string
			narrow bool // read through the names' index (SQLite)
		}{
			{"alpha", true}, {"ALPHA-al", true}, {"a-fal", true}, {"zebra", true}, {"amber-aurora", true},
			{"nothing-like-it", true}, {"brisk", true}, {"-1", false}, {"al", false}, {"a*a", false},
		} {
			for _, q := range []ListQuery{
				{Experiment: "names", Filter: "name ~ '" + c.text + "'", Limit: 4},
				{Experiment: "names", Filter: "params.i >= 2 and name ~ '" + c.text + "'", Sort: "name", Limit: 3},
			} {
				ss.cfg.maxNameCandidates = -1
				want := walk(t, st, q)
				ss.cfg.maxNameCandidates = 0
				if got := walk(t, st, q); strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Fatalf("%q: through the names' index:\n%s\nchecking every run:\n%s", q.Filter, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
				ss.cfg.maxNameCandidates = 3 // most searches match more: read in order
				if got := walk(t, st, q); strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Fatalf("%q: past maxNameCandidates:\n%s\nwant:\n%s", q.Filter, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
				ss.cfg.maxNameCandidates = 0
			}
			// The matches themselves (so that both readings are not wrong
			// alike), and that the index narrowed the search.
			q := ListQuery{Experiment: "names", Filter: "name ~ '" + c.text + "'", Limit: 1000}
			page, err := st.ListRuns(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for _, r := range page.Runs {
				got[r.ID] = true
			}
			if want := contains(c.text); fmt.Sprint(sortedKeys(got)) != fmt.Sprint(sortedKeys(want)) {
				t.Fatalf("%q: runs %v, want %v", c.text, sortedKeys(got), sortedKeys(want))
			}
			if ss.d == query.Postgres && !ss.nameIndex.Load() {
				continue // no pg_trgm here (logged above)
			}
			var expID string
			if err := ss.rdb.QueryRowContext(ctx, `SELECT id FROM experiments WHERE name = 'names'`).Scan(&expID); err != nil {
				t.Fatal(err)
			}
			cands, few, err := ss.nameCandidates(ctx, expID, c.text)
			if err != nil || few != c.narrow || few && len(cands) < len(got) {
				t.Fatalf("%q: narrowed %v (want %v), %d candidates for %d runs, %v", c.text, few, c.narrow, len(cands), len(got), err)
			}
		}
	})
}

// TestListRunsAcrossExperiments checks the runs of several experiments
// (MLflow's search_runs of several), read as a keyset page of each and
// merged: the same pages, through every cursor, as the query sorting all
// the listed experiments' filtered runs, for every sort an index serves
// and for one none does; an unknown experiment adds nothing.
func TestListRunsAcrossExperiments(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		st := open(Config{})
		keysetData(t, st, 11)
		ss := st.(*sqlStore)
		ctx := context.Background()
		var ids []string
		for _, name := range []string{"mixed", "full"} {
			d, err := st.GetExperiment(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, d.ID)
		}
		buildSortIndexes(t, st, "mixed", "metrics.acc.min", "metrics.loss.max")
		merged := 0
		for _, c := range []struct {
			sort, filter string
			desc, idAsc  bool
		}{
			{"created", "", true, false},
			{"started", "", true, true}, // MLflow's default order
			{"name", "", false, false},
			{"params.lr", "", false, false},
			{"params.opt", "", true, true},
			{"metrics.acc.min", "", false, false},
			{"metrics.loss.max", "tags.team = 'vision'", true, false},
			{"tags.team", "", false, false}, // no index: the generic query
		} {
			for _, limit := range []int{9, 1000} {
				q := ListQuery{Experiments: append(append([]string{}, ids...), "no-such-experiment", ids[0]), Sort: c.sort, Filter: c.filter, Desc: c.desc, IDAsc: c.idAsc, Limit: limit}
				ss.cfg.sortedPages = true
				want := walk(t, st, q)
				ss.cfg.sortedPages = false
				_, _, served, err := ss.mergedKeysetRuns(ctx, ids, mustParse(t, q))
				if err != nil {
					t.Fatal(err)
				}
				if served {
					merged++
				}
				if got := walk(t, st, q); strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Fatalf("%+v: merged pages differ:\n%s\nwant:\n%s", c, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
		}
		if merged == 0 {
			t.Fatal("no listing was read through the merged keyset pages")
		}
		if _, err := st.ListRuns(ctx, ListQuery{Experiment: "mixed", Experiments: ids}); ErrorCode(err) != CodeInvalidArgument {
			t.Fatalf("both Experiment and Experiments: %v", err)
		}
	})
}

func mustParse(t *testing.T, q ListQuery) listParams {
	t.Helper()
	p, err := parseList(q, query.Runs)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
