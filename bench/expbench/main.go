// Command expbench generates one big experiment through the store's write
// path (store.Apply, as POST /api/ingest does) and times the reads of the
// experiment page: the experiment summary (GetExperiment, what
// GET /api/experiments/{id} answers), the experiments list, the first page
// of runs and a page sorted by a metric. It is the generator of issue #22's
// sizes: every run finished, with params, tags and 20 metrics x 5 steps.
// -keys, -steps, -params, -tags and -experiments change the shape: the
// FastTrackML shape of issue #22 is -experiments 50 -runs 1500 -keys 1500
// -steps 100 -params 150 -tags 50 (11 billion points; measured here with
// fewer experiments and steps, which the reads of one experiment do not
// depend on but its history reads do).
//
//	go run ./bench/expbench -runs 200000 -dir /tmp/exp200k   # SQLite, kept in -dir
//	go run ./bench/expbench -runs 0 -dir /tmp/exp200k        # reads only, on that database
//	FW_BENCH_DATABASE_URL=postgres://... go run ./bench/expbench -runs 20000
//	go run ./bench/expbench -runs 1000000 -doc docs/benchmarks.md  # make bench-scale
//	go run ./bench/expbench -experiments 2 -runs 1500 -keys 1500 -steps 2 -params 150 -tags 50 -doc docs/benchmarks.md  # make bench-wide
//
// With -doc, the results are also written as the bench:scale section of
// that markdown file, with the command, the commit and the machine.
//
// Nothing here is asserted: it reports.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/benchdoc"
)

func main() {
	runs := flag.Int("runs", 200_000, "runs to add to the experiment (0: only read)")
	first := flag.Int("first", 0, "index of the first run added (to grow a kept database)")
	dir := flag.String("dir", "", "SQLite directory (kept); empty: a temporary one, removed")
	reps := flag.Int("reps", 30, "repetitions of each read (0: ingest only)")
	perBatch := flag.Int("batch", 0, "runs per Apply call (0: about 10,000 points per call)")
	var sh shape
	flag.IntVar(&sh.keys, "keys", 20, "metric keys per run")
	flag.IntVar(&sh.steps, "steps", 5, "steps logged per metric key")
	flag.IntVar(&sh.params, "params", 4, "params per run (at least 4: lr, batch_size, seed, optimizer)")
	flag.IntVar(&sh.tags, "tags", 2, "tags per run (at least 2: team, sweep)")
	exps := flag.Int("experiments", 1, "experiments of -runs runs each (the reads are of the first)")
	exp := flag.String("experiment", "sweep", "experiment name")
	deep := flag.Int("deep", 100_000, "position of the deep page of each sort (0: none; -1: no page 2 either)")
	sortIndexRuns := flag.Int("sort-index-runs", 0, "store.Config.SortIndexRuns: keys reported by this many runs get their sort indexes before a sort (0: the store's default; -1: only on a first sort)")
	doc := flag.String("doc", "", "markdown file whose bench:scale section gets the results (docs/benchmarks.md)")
	flag.Parse()
	sh.params, sh.tags, sh.keys, sh.steps = max(4, sh.params), max(2, sh.tags), max(8, sh.keys), max(1, sh.steps)
	if *perBatch <= 0 {
		*perBatch = max(1, 10_000/(sh.keys*sh.steps))
	}
	wide := sh.keys > 100       // the reads of a wide experiment (1,500 keys) are added
	var report strings.Builder  // the -doc section's table rows
	commit := benchdoc.Commit() // the code measured: HEAD now, not when it ends
	ctx := context.Background()
	cfg := store.Config{DatabaseURL: os.Getenv("FW_BENCH_DATABASE_URL"), SortIndexRuns: *sortIndexRuns}
	backend := "PostgreSQL"
	if cfg.DatabaseURL == "" {
		backend = "SQLite"
		cfg.Dir = *dir
		if cfg.Dir == "" {
			d, err := os.MkdirTemp("", "expbench")
			check(err, "temp dir")
			defer os.RemoveAll(d)
			cfg.Dir = d
		}
	}
	t0 := time.Now()
	s, err := store.Open(ctx, cfg)
	check(err, "opening the store")
	defer s.Close()
	fmt.Printf("%s: opened (migrations included) in %.1f s\n", backend, time.Since(t0).Seconds())

	if *runs > 0 {
		cpu0 := cpuTime()
		points, dur := 0, time.Duration(0)
		for e := 0; e < max(1, *exps); e++ {
			name := *exp
			if e > 0 {
				name = fmt.Sprintf("%s-%d", *exp, e+1)
			}
			p, d := ingest(ctx, s, name, *first+e*(*runs), *runs, *perBatch, sh)
			points, dur = points+p, dur+d
		}
		cpu := cpuTime() - cpu0
		line := fmt.Sprintf("ingest: %d experiments of %d runs, %d points in %.1f s: %.0f points/s (%d runs per Apply); CPU %.1f s: %.0f points per CPU-second",
			max(1, *exps), *runs, points, dur.Seconds(), float64(points)/dur.Seconds(), *perBatch, cpu.Seconds(), float64(points)/cpu.Seconds())
		fmt.Println(line)
		fmt.Fprintf(&report, "Ingest through `store.Apply`: %s.\n\n", strings.TrimPrefix(line, "ingest: "))
	}
	if *reps == 0 {
		return
	}
	// The store builds the sort indexes of a large experiment's metric keys
	// once writes pause (store.Config.SortIndexRuns): the reads are timed
	// after them, as a user opening the finished sweep later sees them.
	t1 := time.Now()
	check(store.WaitSortIndexes(ctx, s), "waiting for the sort indexes")
	store.WaitBackground(s) // and PostgreSQL's trigram index of run names
	line := fmt.Sprintf("sort indexes built ahead of a sort: ready %.1f s after the last write (writes must pause %s first)", time.Since(t1).Seconds(), store.DefaultSortIndexIdle)
	fmt.Println(line)
	fmt.Fprintf(&report, "%s.\n\n", strings.ToUpper(line[:1])+line[1:])
	d, err := s.GetExperiment(ctx, *exp)
	check(err, "reading the experiment")
	fmt.Printf("experiment %s: %d runs, %d metrics, %d param keys\n", d.ID, d.Runs, len(d.Metrics), len(d.ParamKeys))
	fmt.Fprintf(&report, "The experiment: %d runs, %d metric keys, %d param keys. Reads, %d repetitions each (ms):\n\n| read | p50 | p99 |\n|---|---:|---:|\n", d.Runs, len(d.Metrics), len(d.ParamKeys), *reps)
	sortKey := sh.key(7)
	reads := []read{
		{"GetExperiment (GET /api/experiments/{id})", func() error { _, err := s.GetExperiment(ctx, d.ID); return err }},
		{"ListExperiments (GET /api/experiments)", func() error { _, err := s.ListExperiments(ctx, store.ListQuery{Limit: 100}); return err }},
	}
	// The runs table's reads (GET /api/experiments/{id}/runs, as the web
	// UI's RunsTable and MLflow's search_runs call it): a first page per
	// sort, the page after it, and a page deep in the listing (its cursor
	// found by walking pages of 10,000 once, untimed).
	pageReads := []struct {
		name, sort, filter string
		desc               bool
	}{
		{"newest first", "created", "", true},
		{"sorted by metrics." + sortKey + ".last desc", "metrics." + sortKey + ".last", "", true},
		{"sorted by metrics." + sortKey + ".min", "metrics." + sortKey + ".min", "", false},
		{"sorted by metrics." + sortKey + ".max desc", "metrics." + sortKey + ".max", "", true},
		{"sorted by params.lr", "params.lr", "", false},
		{"sorted by params.optimizer", "params.optimizer", "", false},
		{"sorted by name", "name", "", false},
		{"filtered lr>0.05,team=vision, by metrics." + sortKey + ".last desc", "metrics." + sortKey + ".last", "params.lr > 0.05 and tags.team = 'vision'", true},
	}
	// The runs table's name search (the UI sends name ~ 'text'): the
	// experiment's oldest run, last in the default order, and a name no run
	// has (every run is looked at).
	oldest, err := s.GetRun(ctx, fmt.Sprintf("run%07d", *first))
	check(err, "reading the oldest run")
	pageReads = append(pageReads, []struct {
		name, sort, filter string
		desc               bool
	}{
		{"searched by name, the oldest run's", "created", "name ~ '" + strings.ReplaceAll(oldest.Name, "'", "\\'") + "'", true},
		{"searched by name, no match", "created", "name ~ 'no-such-run-name'", true},
	}...)
	if wide {
		reads = append(reads, wideReads(ctx, s, d.ID, sh)...)
	}
	var firsts []string // each sort's first request (an index may be built meanwhile)
	for _, pr := range pageReads {
		q := store.ListQuery{Experiment: d.ID, Sort: pr.sort, Filter: pr.filter, Desc: pr.desc, Limit: 100}
		if wide { // the runs table shows 10 metrics and 5 params, as the UI asks
			q.Columns = sh.columns()
		}
		// The first page of a sort by a metric the store has no sort index
		// for is sorted in full while the index is built (then waited for,
		// untimed by the reps below): both times are printed.
		t0 := time.Now()
		_, err := s.ListRuns(ctx, q)
		check(err, "first page, first time")
		first := time.Since(t0)
		store.WaitBackground(s)
		fmt.Printf("%-55s first request %9.2f ms, then background work %9.2f ms\n", "ListRuns: 100 "+pr.name, float64(first.Microseconds())/1000, float64((time.Since(t0)-first).Microseconds())/1000)
		firsts = append(firsts, fmt.Sprintf("%s %.1f ms", pr.name, float64(first.Microseconds())/1000))
		reads = append(reads, read{"ListRuns: 100 " + pr.name, func() error { _, err := s.ListRuns(ctx, q); return err }})
		if *deep < 0 || pr.filter != "" {
			continue
		}
		p1, err := s.ListRuns(ctx, q)
		check(err, "first page")
		q2 := q
		q2.Cursor = p1.Next
		reads = append(reads, read{"  page 2", func() error { _, err := s.ListRuns(ctx, q2); return err }})
		if *deep == 0 {
			continue
		}
		qd := q
		for n := 0; n < *deep; n += 10000 {
			w := qd
			w.Limit = min(10000, *deep-n)
			p, err := s.ListRuns(ctx, w)
			check(err, "walking to the deep page")
			qd.Cursor = p.Next
		}
		reads = append(reads, read{fmt.Sprintf("  page after run %d", *deep), func() error { _, err := s.ListRuns(ctx, qd); return err }})
	}
	parent := ""
	for _, r := range reads {
		ds := make([]time.Duration, 0, *reps)
		for i := 0; i < *reps; i++ {
			t := time.Now()
			check(r.f(), r.name)
			ds = append(ds, time.Since(t))
		}
		p50, p99 := benchdoc.PercentileMs(ds, .5), benchdoc.PercentileMs(ds, .99)
		fmt.Printf("%-55s reps %3d  p50 %9.2f ms  p99 %9.2f ms\n", r.name, *reps, p50, p99)
		name := r.name
		if strings.HasPrefix(name, "  ") { // a later page of the read above
			name = parent + ": " + strings.TrimSpace(name)
		} else {
			parent = name
		}
		fmt.Fprintf(&report, "| %s | %.2f | %.2f |\n", name, p50, p99)
	}
	if *doc == "" {
		return
	}
	fmt.Fprintf(&report, "\nEach sort's first request, before the timed ones (a metric's sort index is built meanwhile): %s.\n", strings.Join(firsts, "; "))
	host, _ := os.Hostname()
	head := fmt.Sprintf("## Tracking at scale: `make bench-scale`\n\nCommand: `go run ./bench/expbench %s` on %s (%s, %s, %d CPUs, host %s); %s.\n\n",
		strings.Join(os.Args[1:], " "), backend, commit, time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), host,
		fmt.Sprintf("each run: %d params, %d tags, %d metrics x %d steps, finished; nothing asserted", sh.params, sh.tags, sh.keys, sh.steps))
	section := "scale"
	if wide {
		section = "wide"
		head = strings.Replace(head, "## Tracking at scale: `make bench-scale`", "## Tracking wide experiments (1,500 metric keys): `make bench-wide`", 1)
	}
	if cfg.DatabaseURL != "" { // PostgreSQL's own section, beside SQLite's
		section += "-postgres"
		head = strings.Replace(head, "`make bench-scale`", "`make bench-scale-pg` (PostgreSQL)", 1)
		head = strings.Replace(head, "`make bench-wide`", "`make bench-wide` (PostgreSQL)", 1)
	}
	check(benchdoc.ReplaceSection(*doc, section, head+report.String()), "writing "+*doc)
	fmt.Printf("wrote the bench:%s section of %s\n", section, *doc)
}

// shape is what each run logs.
type shape struct{ keys, steps, params, tags int }

// key is metric key k's name: m07 with up to 100 keys, m0007 beyond.
func (sh shape) key(k int) string {
	if sh.keys > 100 {
		return fmt.Sprintf("m%04d", k)
	}
	return fmt.Sprintf("m%02d", k)
}

// columns is what the runs table of a wide experiment shows: 10 metric
// keys spread over the experiment's, and 5 params.
func (sh shape) columns() *store.Columns {
	c := &store.Columns{Params: []string{"lr", "batch_size", "seed", "optimizer", "p004"}}
	for i := 0; i < 10; i++ {
		c.Metrics = append(c.Metrics, sh.key(i*sh.keys/10+7))
	}
	return c
}

// ingest writes n finished runs, each: run_start with sh.params params and
// sh.tags tags, sh.steps metrics events of sh.keys keys, run_end; perBatch
// runs per Apply.
func ingest(ctx context.Context, s store.Store, exp string, first, n, perBatch int, sh shape) (int, time.Duration) {
	teams := []string{"vision", "nlp", "speech", "rl"}
	start := time.Now()
	points := 0
	for r := first; r < first+n; r += perBatch {
		var evs []store.Event
		for i := r; i < min(r+perBatch, first+n); i++ {
			id := fmt.Sprintf("run%07d", i)
			lr := math.Pow(10, -1-float64(i%40)/10)
			params := map[string]any{"lr": lr, "batch_size": 32 << (i % 4), "seed": i, "optimizer": []string{"adam", "sgd", "adamw"}[i%3]}
			for p := 4; p < sh.params; p++ {
				params[fmt.Sprintf("p%03d", p)] = (i*31 + p) % 97
			}
			tags := map[string]string{"team": teams[i%4], "sweep": "s1"}
			for t := 2; t < sh.tags; t++ {
				tags[fmt.Sprintf("t%02d", t)] = fmt.Sprintf("v%d", (i+t)%7)
			}
			evs = append(evs, store.Event{Type: store.EventRunStart, RunID: id, Seq: 1, Experiment: exp, Params: params, Tags: tags})
			for step := int64(0); step < int64(sh.steps); step++ {
				st := step
				vals := make(map[string]store.Float, sh.keys)
				for k := 0; k < sh.keys; k++ {
					// A deterministic spread: each key's extremes fall on
					// different runs.
					h := uint64(i)*2654435761 + uint64(k)*40503 + uint64(step)*97
					vals[sh.key(k)] = store.Float(float64(h%1_000_003) / 1_000_003)
				}
				evs = append(evs, store.Event{Type: store.EventMetrics, RunID: id, Seq: 2 + step, Step: &st, Values: vals})
				points += sh.keys
			}
			evs = append(evs, store.Event{Type: store.EventRunEnd, RunID: id, Seq: 2 + int64(sh.steps), Status: store.StatusFinished})
		}
		res, err := s.Apply(ctx, evs)
		check(err, "ingest")
		if len(res.Errors) > 0 {
			check(fmt.Errorf("%+v", res.Errors[0]), "ingest")
		}
		if (r-first)%(perBatch*max(1, 200*100/perBatch)) == 0 && r > first {
			el := time.Since(start).Seconds()
			fmt.Fprintf(os.Stderr, "expbench: %d runs, %.0f points/s\n", r-first, float64(points)/el)
		}
	}
	return points, time.Since(start)
}

// cpuTime is the user and system CPU time of this process so far: on a
// shared machine, a steadier measure of the write path's cost than the
// wall clock.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func check(err error, what string) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "expbench: %s: %v\n", what, err)
		os.Exit(1)
	}
}

// read is one timed read of the experiment's pages.
type read struct {
	name string
	f    func() error
}

// wideReads are the reads a wide experiment's pages add: a run's page
// (its 1,500 metric summaries and 150 params), a page of charts (24 keys,
// as RunCharts asks), one key's history, and what GET /api/compare reads
// of 20 runs (each run, then every key's series at 500 points: the compare
// page asks for all keys).
func wideReads(ctx context.Context, s store.Store, exp string, sh shape) []read {
	page, err := s.ListRuns(ctx, store.ListQuery{Experiment: exp, Sort: "created", Desc: true, Limit: 20, Columns: &store.Columns{}})
	check(err, "listing 20 runs")
	var ids []string
	for _, r := range page.Runs {
		ids = append(ids, r.ID)
	}
	one := ids[0]
	var chartKeys []string
	for k := 0; k < 24; k++ {
		chartKeys = append(chartKeys, sh.key(k))
	}
	return []read{
		{"GetRun: a run of " + fmt.Sprint(sh.keys) + " metric keys (its page)", func() error { _, err := s.GetRun(ctx, one); return err }},
		{"Metrics: a page of 24 charts (1,000 points each)", func() error {
			_, err := s.Metrics(ctx, one, store.MetricsQuery{Keys: chartKeys, MaxPoints: 1000})
			return err
		}},
		{"History: one key of a run", func() error { _, err := s.History(ctx, one, store.HistoryQuery{Key: sh.key(7)}); return err }},
		{"ListRuns: 100 newest, every column (no projection)", func() error {
			_, err := s.ListRuns(ctx, store.ListQuery{Experiment: exp, Sort: "created", Desc: true, Limit: 100})
			return err
		}},
		{"compare 20 runs, a page of 24 keys (the compare page: GetRun x 20, 24 series each)", func() error { return compare(ctx, s, ids, 24) }},
		{fmt.Sprintf("compare 20 runs, every key (GetRun x 20, %d series each)", sh.keys), func() error { return compare(ctx, s, ids, 0) }},
	}
}

// compare does the store reads of GET /api/compare for runs ids: each run,
// then the series (500 points) of the first limit keys (sorted; 0: all).
func compare(ctx context.Context, s store.Store, ids []string, limit int) error {
	runs := make([]store.Run, len(ids))
	seen := map[string]bool{}
	var keys []string
	for i, id := range ids {
		r, err := s.GetRun(ctx, id)
		if err != nil {
			return err
		}
		runs[i] = r
		for k := range r.Metrics {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	if limit > 0 && len(keys) > limit {
		keys = keys[:limit]
	}
	for _, id := range ids {
		if _, err := s.Metrics(ctx, id, store.MetricsQuery{Keys: keys, MaxPoints: 500}); err != nil {
			return err
		}
	}
	return nil
}
