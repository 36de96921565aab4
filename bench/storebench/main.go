// Command storebench measures the experiment store (dashboard/store) on
// SQLite and PostgreSQL: metric ingest through Apply, downsampled reads of a
// run with a million points, and listing/filtering 10,000 runs. It writes
// the figures into docs/benchmarks.md between the store markers.
//
//	go run ./bench/storebench            # SQLite, and PostgreSQL through scripts/pg-test.sh
//	FW_BENCH_DATABASE_URL=postgres://... go run ./bench/storebench
//
// Nothing here is asserted: it reports.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/fw-serve/fw/internal/benchdoc"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/fw-serve/fw/dashboard/store"
	_ "github.com/jackc/pgx/v5/stdlib"
)

// result is one measured figure.
type result struct {
	Backend string  `json:"backend"`
	Name    string  `json:"name"`
	Reps    int     `json:"reps"`
	P50ms   float64 `json:"p50_ms"`
	P99ms   float64 `json:"p99_ms"`
	Rate    float64 `json:"rate"` // points/s for ingest, 0 otherwise
	Note    string  `json:"note,omitempty"`
}

type options struct {
	points, runs, reps int
}

func main() {
	out := flag.String("out", "docs/benchmarks.md", "markdown file to update between <!-- bench:store:start --> and <!-- bench:store:end --> (empty: print only)")
	points := flag.Int("points", 1_000_000, "metric points of the big run")
	runs := flag.Int("runs", 10_000, "runs for the listing benchmark")
	reps := flag.Int("reps", 30, "repetitions of each read")
	only := flag.String("only", "", "run one backend: sqlite or postgres")
	jsonOut := flag.String("json", "", "write results as JSON here instead of markdown")
	noPG := flag.Bool("no-postgres", false, "skip PostgreSQL")
	flag.Parse()
	ctx := context.Background()
	o := options{*points, *runs, *reps}
	var results []result
	var pgNote string
	if *only == "" || *only == "sqlite" {
		dir, err := os.MkdirTemp("", "storebench")
		check(err, "creating a temp dir")
		defer os.RemoveAll(dir)
		rs, err := bench(ctx, "SQLite", store.Config{Dir: dir}, o)
		check(err, "SQLite benchmark")
		results = append(results, rs...)
	}
	if (*only == "" && !*noPG) || *only == "postgres" {
		switch u := os.Getenv("FW_BENCH_DATABASE_URL"); {
		case u != "" || *only == "postgres":
			if u == "" {
				u = os.Getenv("FW_TEST_DATABASE_URL")
			}
			rs, err := benchPG(ctx, u, o)
			check(err, "PostgreSQL benchmark")
			results = append(results, rs...)
		default:
			rs, note, err := viaScript(o)
			if err != nil {
				pgNote = "PostgreSQL not measured: " + err.Error()
				fmt.Fprintln(os.Stderr, pgNote)
			} else {
				results = append(results, rs...)
				pgNote = note
			}
		}
	}
	if *jsonOut != "" {
		b, _ := json.Marshal(results)
		check(os.WriteFile(*jsonOut, b, 0o644), "writing results")
		return
	}
	md := render(results, o, pgNote)
	fmt.Print(md)
	if *out != "" {
		check(benchdoc.ReplaceSection(*out, "store", md), "updating "+*out)
		fmt.Fprintf(os.Stderr, "storebench: wrote %s\n", *out)
	}
}

func check(err error, what string) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "storebench: %s: %v\n", what, err)
		os.Exit(1)
	}
}

// viaScript re-runs this program under scripts/pg-test.sh (a throwaway
// cluster, durable settings) for the PostgreSQL figures.
func viaScript(o options) ([]result, string, error) {
	if _, err := os.Stat("scripts/pg-test.sh"); err != nil {
		return nil, "", fmt.Errorf("scripts/pg-test.sh not found (run from the repository root)")
	}
	tmp, err := os.CreateTemp("", "storebench-*.json")
	if err != nil {
		return nil, "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command("bash", "scripts/pg-test.sh", self, "-only", "postgres", "-json", tmp.Name(),
		fmt.Sprint("-points=", o.points), fmt.Sprint("-runs=", o.runs), fmt.Sprint("-reps=", o.reps))
	cmd.Env = append(os.Environ(), "FW_PG_DURABLE=1")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, "", fmt.Errorf("bash scripts/pg-test.sh: %w", err)
	}
	b, err := os.ReadFile(tmp.Name())
	if err != nil {
		return nil, "", err
	}
	var rs []result
	if err := json.Unmarshal(b, &rs); err != nil {
		return nil, "", err
	}
	ver := "version unknown"
	if bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres"); len(bins) > 0 {
		slices.Sort(bins)
		if b, err := exec.Command(bins[len(bins)-1], "--version").Output(); err == nil {
			ver = strings.TrimSpace(string(b))
		}
	}
	return rs, "PostgreSQL: " + ver + ", a throwaway cluster from `scripts/pg-test.sh` (FW_PG_DURABLE=1: default fsync and synchronous_commit) on the same machine, over TCP on 127.0.0.1.", nil
}

// benchPG runs the benchmark in a fresh schema of the database at base.
func benchPG(ctx context.Context, base string, o options) ([]result, error) {
	if base == "" {
		return nil, fmt.Errorf("no FW_BENCH_DATABASE_URL or FW_TEST_DATABASE_URL")
	}
	db, err := sql.Open("pgx", base)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	schema := "storebench_" + store.NewID()
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		return nil, fmt.Errorf("creating schema: %w", err)
	}
	defer db.ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return bench(ctx, "PostgreSQL", store.Config{DatabaseURL: u.String()}, o)
}

func timeIt(reps int, f func() error) ([]time.Duration, error) {
	ds := make([]time.Duration, 0, reps)
	for i := 0; i < reps; i++ {
		t := time.Now()
		if err := f(); err != nil {
			return nil, err
		}
		ds = append(ds, time.Since(t))
	}
	return ds, nil
}

func bench(ctx context.Context, backend string, cfg store.Config, o options) ([]result, error) {
	s, err := store.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var out []result
	fmt.Fprintf(os.Stderr, "storebench: %s: ingesting %d points\n", backend, o.points)

	// 1. Ingest: one run, Apply batches of 1,000 single-key metric events.
	seq := int64(1)
	if _, err := s.Apply(ctx, []store.Event{{Type: store.EventRunStart, RunID: "big", Seq: seq, Experiment: "bench"}}); err != nil {
		return nil, err
	}
	const batch = 1000
	var lat []time.Duration
	start := time.Now()
	evs := make([]store.Event, batch)
	for step := 0; step < o.points; step += batch {
		for i := range evs {
			seq++
			st := int64(step + i)
			v := math.Sin(float64(st) / 1000)
			if st == int64(o.points)*2/3 {
				v = 1e6
			}
			evs[i] = store.Event{Type: store.EventMetrics, RunID: "big", Seq: seq, Step: &st, Values: map[string]store.Float{"loss": store.Float(v)}}
		}
		t := time.Now()
		res, err := s.Apply(ctx, evs)
		if err != nil {
			return nil, err
		}
		if len(res.Errors) > 0 {
			return nil, fmt.Errorf("ingest: %+v", res.Errors[0])
		}
		lat = append(lat, time.Since(t))
	}
	total := time.Since(start)
	out = append(out, result{Backend: backend, Name: "ingest: Apply, batches of 1,000 metric events (1 key each)", Reps: len(lat),
		P50ms: benchdoc.PercentileMs(lat, .5), P99ms: benchdoc.PercentileMs(lat, .99), Rate: float64(o.points) / total.Seconds()})

	// Multi-key events: 100 events x 10 keys = 1,000 points per batch.
	lat = lat[:0]
	start = time.Now()
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9"}
	if _, err := s.Apply(ctx, []store.Event{{Type: store.EventRunStart, RunID: "multi", Seq: 1, Experiment: "bench"}}); err != nil {
		return nil, err
	}
	mseq := int64(1)
	n := o.points / 5
	for step := 0; step < n/10; step += 100 {
		evs := make([]store.Event, 100)
		for i := range evs {
			mseq++
			st := int64(step + i)
			vals := make(map[string]store.Float, len(keys))
			for j, k := range keys {
				vals[k] = store.Float(float64(j) + float64(st))
			}
			evs[i] = store.Event{Type: store.EventMetrics, RunID: "multi", Seq: mseq, Step: &st, Values: vals}
		}
		t := time.Now()
		if _, err := s.Apply(ctx, evs); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t))
	}
	total = time.Since(start)
	out = append(out, result{Backend: backend, Name: "ingest: Apply, batches of 100 `metrics` events x 10 keys", Reps: len(lat),
		P50ms: benchdoc.PercentileMs(lat, .5), P99ms: benchdoc.PercentileMs(lat, .99), Rate: float64(n) / total.Seconds()})

	// 2. Downsampled read of the million-point run.
	for _, mp := range []int{1000, 100} {
		var buckets int
		ds, err := timeIt(o.reps, func() error {
			ser, err := s.Metrics(ctx, "big", store.MetricsQuery{Keys: []string{"loss"}, MaxPoints: mp})
			if err == nil {
				buckets = len(ser[0].Buckets)
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		out = append(out, result{Backend: backend, Name: fmt.Sprintf("Metrics: 1 key of %d points to <= %d buckets", o.points, mp), Reps: o.reps,
			P50ms: benchdoc.PercentileMs(ds, .5), P99ms: benchdoc.PercentileMs(ds, .99), Note: fmt.Sprintf("%d buckets", buckets)})
	}
	lo, hi := int64(o.points/3), int64(o.points/3+50_000)
	ds, err := timeIt(o.reps, func() error {
		_, err := s.Metrics(ctx, "big", store.MetricsQuery{Keys: []string{"loss"}, MaxPoints: 1000, MinStep: &lo, MaxStep: &hi})
		return err
	})
	if err != nil {
		return nil, err
	}
	out = append(out, result{Backend: backend, Name: "Metrics: zoom, steps 1/3 .. 1/3+50,000 to <= 1,000 buckets", Reps: o.reps, P50ms: benchdoc.PercentileMs(ds, .5), P99ms: benchdoc.PercentileMs(ds, .99)})

	// 3. 10,000 runs with params, tags and metric summaries.
	fmt.Fprintf(os.Stderr, "storebench: %s: creating %d runs\n", backend, o.runs)
	teams := []string{"a", "b", "c", "d"}
	opts := []string{"adam", "sgd", "adamw"}
	for r := 0; r < o.runs; r += 100 {
		var evs []store.Event
		for i := r; i < min(r+100, o.runs); i++ {
			id := fmt.Sprintf("run%05d", i)
			lr := math.Pow(10, -1-float64(i%40)/10)
			evs = append(evs, store.Event{Type: store.EventRunStart, RunID: id, Seq: 1, Experiment: fmt.Sprintf("exp-%d", i%20), Name: fmt.Sprintf("resnet-%d", i),
				Params: map[string]any{"lr": lr, "batch_size": 32 << (i % 4), "optimizer": opts[i%3], "seed": i},
				Tags:   map[string]string{"team": teams[i%4]}})
			for step := int64(0); step < 5; step++ {
				st := step
				acc := 0.5 + 0.45*float64((i*7919)%1000)/1000*float64(step+1)/5
				evs = append(evs, store.Event{Type: store.EventMetrics, RunID: id, Seq: 2 + step, Step: &st,
					Values: map[string]store.Float{"val_acc": store.Float(acc), "loss": store.Float(1 - acc), "lr": store.Float(lr)}})
			}
			evs = append(evs, store.Event{Type: store.EventRunEnd, RunID: id, Seq: 7, Status: []store.Status{store.StatusFinished, store.StatusFailed, store.StatusFinished, store.StatusStopped}[i%4]})
		}
		res, err := s.Apply(ctx, evs)
		if err != nil {
			return nil, err
		}
		if len(res.Errors) > 0 {
			return nil, fmt.Errorf("seeding runs: %+v", res.Errors[0])
		}
	}
	filter := `status = "finished" AND (params.lr < 0.01 OR tags.team IN ("a", "b")) AND NOT metrics.val_acc.max < 0.7 AND name ~ "resnet*"`
	queries := []struct {
		name string
		q    store.ListQuery
	}{
		{"ListRuns: first page of 100, newest first", store.ListQuery{Desc: true, Limit: 100}},
		{"ListRuns: filter (see below), sorted by metrics.val_acc.max, page of 100", store.ListQuery{Filter: filter, Sort: "metrics.val_acc.max", Desc: true, Limit: 100}},
		{"ListRuns: same filter, sorted by params.lr, page of 100", store.ListQuery{Filter: filter, Sort: "params.lr", Limit: 100}},
		{"ListRuns: all 10,000 runs in one page, sorted by metrics.loss.min", store.ListQuery{Sort: "metrics.loss.min", Limit: 10000}},
	}
	for _, qq := range queries {
		var got int
		ds, err := timeIt(o.reps, func() error {
			p, err := s.ListRuns(ctx, qq.q)
			got = len(p.Runs)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", qq.name, err)
		}
		out = append(out, result{Backend: backend, Name: qq.name, Reps: o.reps, P50ms: benchdoc.PercentileMs(ds, .5), P99ms: benchdoc.PercentileMs(ds, .99), Note: fmt.Sprintf("%d runs returned", got)})
	}
	return out, nil
}

func render(rs []result, o options, pgNote string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Experiment store benchmark (dashboard/store)\n\n")
	fmt.Fprintf(&b, "Generated by `go run ./bench/storebench` on %s, %s. Do not edit by hand: the next run rewrites this section.\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), benchdoc.Commit())
	fmt.Fprintf(&b, "- Machine: %d CPUs, %s, %s/%s. SQLite is modernc.org/sqlite (pure Go) in WAL mode, synchronous=NORMAL, one writer goroutine, in a temporary directory.\n", runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if pgNote != "" {
		fmt.Fprintf(&b, "- %s\n", pgNote)
	}
	fmt.Fprintf(&b, "- Data: one run with %d points of one metric (one spike), one run with %d points over 10 keys, then %d runs with 4 params, a tag, 3 metrics x 5 steps (summaries) and an end status. Reads repeated %d times; ingest latency is per Apply call, the rate is points over the whole ingest.\n", o.points, o.points/5, o.runs, o.reps)
	fmt.Fprintf(&b, "- Targets (from the issue): one metric of a 1,000,000-point run downsampled to 1,000 buckets under 50 ms; listing and filtering 10,000 runs under 100 ms; ingest well above 200,000 points/s on SQLite.\n\n")
	b.WriteString("| backend | measurement | reps | p50 ms | p99 ms | points/s | note |\n|---|---|---:|---:|---:|---:|---|\n")
	for _, r := range rs {
		rate := ""
		if r.Rate > 0 {
			rate = fmt.Sprintf("%.0f", r.Rate)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %.2f | %.2f | %s | %s |\n", r.Backend, r.Name, r.Reps, r.P50ms, r.P99ms, rate, r.Note)
	}
	b.WriteString("\nThe filter: `status = \"finished\" AND (params.lr < 0.01 OR tags.team IN (\"a\", \"b\")) AND NOT metrics.val_acc.max < 0.7 AND name ~ \"resnet*\"`.\n")
	return b.String()
}
