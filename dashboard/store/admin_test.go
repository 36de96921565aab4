package store

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMigrations(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		// From empty: every version is recorded.
		s := open(Config{})
		st := s.(*sqlStore)
		var n, v int
		if err := st.rdb.QueryRow(`SELECT COUNT(*), MAX(version) FROM schema_migrations`).Scan(&n, &v); err != nil || n != LatestSchemaVersion() || v != LatestSchemaVersion() {
			t.Fatalf("from empty: %d migrations, version %d, %v", n, v, err)
		}
	})
	forEach(t, func(t *testing.T, open func(Config) Store) {
		// From version 1: build a v1 database with data, reopen with the
		// current code, check the data and the backfilled rollups.
		cfg := Config{Dir: t.TempDir(), migrateTo: 1}
		old := open(cfg)
		ost := old.(*sqlStore)
		if _, err := ost.rdb.Exec(`SELECT COUNT(*) FROM metric_rollup`); err == nil {
			t.Fatal("a version 1 database has no metric_rollup table")
		}
		// Write through the writer but without rollups or the experiment
		// summary (v1 has none): insert directly, as v1 code would have.
		if err := ost.write(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
			for _, q := range []struct {
				text string
				args []any
			}{
				{`INSERT INTO experiments (id, name, description, created, updated, archived) VALUES (?, 'legacy', '', 1, 1, 0)`, []any{"legacyexp"}},
				{`INSERT INTO runs (id, experiment_id, name, status, created, updated, started) VALUES ('old1', 'legacyexp', 'old1', 'running', 1, 1, 1)`, nil},
				{`INSERT INTO params (run_rid, key, value_json, value_num) SELECT rid, 'lr', '0.3', 0.3 FROM runs WHERE id = 'old1'`, nil},
				{`INSERT INTO run_tags (run_rid, key, value) SELECT rid, 'k', 'v' FROM runs WHERE id = 'old1'`, nil},
			} {
				if _, err := ost.exec(ctx, tx, q.text, q.args...); err != nil {
					return err
				}
			}
			return nil
		}, nil); err != nil {
			t.Fatal(err)
		}
		var rid int64
		ost.rdb.QueryRow(ost.q(`SELECT rid FROM runs WHERE id = ?`), "old1").Scan(&rid)
		if err := ost.write(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
			a := &applier{s: ost, tx: tx, runs: map[string]*runState{}, res: &ApplyResult{}}
			key, err := a.keyID(ctx, kindMetric, "loss")
			if err != nil {
				return err
			}
			for i := int64(0); i < 5000; i++ {
				v := float64(i)
				if i == 4321 {
					v = 1e9
				}
				if _, err := ost.exec(ctx, tx, `INSERT INTO metrics (run_rid, key_id, step, value, wall) VALUES (?, ?, ?, ?, ?)`, rid, key, i, v, i); err != nil {
					return err
				}
			}
			_, err = ost.exec(ctx, tx, `INSERT INTO metric_summary (run_rid, key_id, last_value, last_step, last_time, min_value, min_step, max_value, max_step, n) VALUES (?, ?, 4999, 4999, 0, 0, 0, 1e9, 4321, 5000)`, rid, key)
			return err
		}, nil); err != nil {
			t.Fatal(err)
		}
		dsn := cfg
		if ost.d != 0 {
			dsn.DatabaseURL = ost.cfg.DatabaseURL
		}
		old.Close()
		dsn.migrateTo = 0
		s, err := Open(context.Background(), dsn)
		if err != nil {
			t.Fatalf("upgrading: %v", err)
		}
		defer s.Close()
		r, err := s.GetRun(context.Background(), "old1")
		if err != nil || r.Params["lr"] != 0.3 || r.Tags["k"] != "v" || r.Metrics["loss"].Max != 1e9 {
			t.Fatalf("data after upgrade: %+v %v", r, err)
		}
		ser, err := s.Metrics(context.Background(), "old1", MetricsQuery{MaxPoints: 50})
		if err != nil || len(ser) != 1 || !ser[0].Downsampled || len(ser[0].Buckets) > 50 {
			t.Fatalf("downsampling after upgrade: %+v %v", ser, err)
		}
		var maxV float64
		var count int64
		for _, b := range ser[0].Buckets {
			maxV = max(maxV, b.Max)
			count += b.Count
		}
		if maxV != 1e9 || count != 5000 || ser[0].Buckets[len(ser[0].Buckets)-1].Last != 4999 {
			t.Fatalf("rollups backfilled wrong: max %v count %d", maxV, count)
		}
		d, err := s.GetExperiment(context.Background(), "legacy")
		if m := d.Metrics["loss"]; err != nil || d.Runs != 1 || d.RunCounts[StatusRunning] != 1 || m.Runs != 1 || m.Min != 0 || m.MinRun != "old1" || m.Max != 1e9 || m.MaxRun != "old1" {
			t.Fatalf("experiment summary backfilled wrong: %+v %v", d, err)
		}
	})
}

func TestDeleteRemovesRowsAndFiles(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		dir := t.TempDir()
		cfg := Config{CheckpointDir: filepath.Join(dir, "ck"), ArtifactDir: filepath.Join(dir, "art")}
		s := open(cfg)
		ctx := context.Background()
		outside := filepath.Join(dir, "outside.txt")
		os.WriteFile(outside, []byte("keep"), 0o644)
		for _, id := range []string{"d1", "d2"} {
			e := &ev{run: id}
			mustApply(t, s, e.start("delexp", map[string]any{"lr": 1}, map[string]string{"a": "b"}),
				e.metrics(1, map[string]float64{"loss": 1}),
				e.next(Event{Type: EventLog, Stream: "stdout", Lines: []string{"hi"}}),
				e.next(Event{Type: EventCheckpoint, Path: "c/1.pt", Step: Ptr(int64(1))}),
				e.next(Event{Type: EventArtifact, Path: "out.bin", Size: Ptr(int64(3))}))
			for _, p := range []string{filepath.Join(cfg.CheckpointDir, id, "c", "1.pt"), filepath.Join(cfg.ArtifactDir, id, "out.bin")} {
				os.MkdirAll(filepath.Dir(p), 0o755)
				os.WriteFile(p, []byte("x"), 0o644)
			}
		}
		// A symlink planted in the run directory must not lead outside.
		os.Symlink(outside, filepath.Join(cfg.ArtifactDir, "d1", "link"))
		if err := s.DeleteRun(ctx, "d1"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetRun(ctx, "d1"); ErrorCode(err) != CodeNotFound {
			t.Fatalf("run still there: %v", err)
		}
		for _, p := range []string{filepath.Join(cfg.CheckpointDir, "d1"), filepath.Join(cfg.ArtifactDir, "d1")} {
			if _, err := os.Lstat(p); !os.IsNotExist(err) {
				t.Fatalf("%s still exists: %v", p, err)
			}
		}
		if b, err := os.ReadFile(outside); err != nil || string(b) != "keep" {
			t.Fatalf("file outside the root touched: %v", err)
		}
		st := s.(*sqlStore)
		for _, table := range []string{"metrics", "metric_rollup", "metric_summary", "logs", "params", "run_tags", "run_writers", "checkpoints", "artifacts"} {
			var n int
			st.rdb.QueryRow(`SELECT COUNT(*) FROM ` + table).Scan(&n)
			if n == 0 {
				t.Fatalf("%s: the other run's rows are gone too", table)
			}
		}
		d, _ := s.GetExperiment(ctx, "delexp")
		if err := s.DeleteExperiment(ctx, d.ID); err != nil {
			t.Fatal(err)
		}
		for _, table := range []string{"experiments", "runs", "metrics", "metric_rollup", "metric_summary", "logs", "params", "run_tags", "run_writers", "checkpoints", "artifacts", "experiment_tags"} {
			var n int
			st.rdb.QueryRow(`SELECT COUNT(*) FROM ` + table).Scan(&n)
			if n != 0 {
				t.Fatalf("%s: %d rows left", table, n)
			}
		}
		if _, err := os.Stat(filepath.Join(cfg.CheckpointDir, "d2")); !os.IsNotExist(err) {
			t.Fatalf("d2 checkpoints left: %v", err)
		}
		if err := s.DeleteRun(ctx, "d1"); ErrorCode(err) != CodeNotFound {
			t.Fatalf("second delete: %v", err)
		}
	})
}

func TestUpdates(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		s := open(Config{})
		ctx := context.Background()
		x, err := s.CreateExperiment(ctx, ExperimentInput{Name: "first", Tags: map[string]string{"a": "1"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateExperiment(ctx, ExperimentInput{Name: "first"}); ErrorCode(err) != CodeConflict {
			t.Fatalf("duplicate name: %v", err)
		}
		if _, err := s.CreateExperiment(ctx, ExperimentInput{Name: "bad\nname"}); ErrorCode(err) != CodeInvalidName {
			t.Fatalf("bad name: %v", err)
		}
		// MLflow's users name experiments freely: names are data, never paths.
		if _, err := s.CreateExperiment(ctx, ExperimentInput{Name: "resnet (baseline), run #1 ../x"}); err != nil {
			t.Fatalf("an MLflow-style name: %v", err)
		}
		// An artifact location is kept as given, or made <root>/<id>; the
		// patch below leaves it alone.
		loc, err := s.CreateExperiment(ctx, ExperimentInput{Name: "local", ArtifactLocation: "/data/mlruns/x"})
		if err != nil || loc.ArtifactLocation != "/data/mlruns/x" {
			t.Fatalf("artifact location: %+v %v", loc, err)
		}
		rooted, err := s.CreateExperiment(ctx, ExperimentInput{Name: "rooted", ArtifactRoot: "file:///data/mlruns/"})
		if err != nil || rooted.ArtifactLocation != "file:///data/mlruns/"+rooted.ID {
			t.Fatalf("artifact root: %+v %v", rooted, err)
		}
		if _, err := s.CreateExperiment(ctx, ExperimentInput{Name: "ctl", ArtifactLocation: "/a\x00b"}); ErrorCode(err) != CodeInvalidArgument {
			t.Fatalf("a location with a control character: %v", err)
		}
		if page, _ := s.ListExperiments(ctx, ListQuery{Filter: "name = 'local'"}); len(page.Experiments) != 1 || page.Experiments[0].ArtifactLocation != "/data/mlruns/x" {
			t.Fatalf("listed location: %+v", page)
		}
		if x.ArtifactLocation != "" {
			t.Fatalf("no location: %q", x.ArtifactLocation)
		}
		got, err := s.UpdateExperiment(ctx, x.ID, ExperimentPatch{Name: Ptr("renamed"), Description: Ptr("d"), Archived: Ptr(true), Tags: map[string]string{"b": "2"}, DeleteTags: []string{"a"}})
		if err != nil || got.Name != "renamed" || !got.Archived || got.Description != "d" || len(got.Tags) != 1 || got.Tags["b"] != "2" {
			t.Fatalf("patch: %+v %v", got, err)
		}
		page, _ := s.ListExperiments(ctx, ListQuery{Filter: "archived = true"})
		if len(page.Experiments) != 1 {
			t.Fatalf("archived filter: %+v", page)
		}
		e := &ev{run: "u1"}
		mustApply(t, s, e.start("renamed", nil, map[string]string{"x": "1"}))
		r, err := s.UpdateRun(ctx, "u1", RunPatch{Name: Ptr("nice name"), Tags: map[string]string{"y": "2"}, DeleteTags: []string{"x"}})
		if err != nil || r.Name != "nice name" || r.Tags["y"] != "2" || len(r.Tags) != 1 {
			t.Fatalf("run patch: %+v %v", r, err)
		}
	})
}

func TestSafeJoin(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	os.MkdirAll(filepath.Join(root, "in"), 0o755)
	os.Symlink(outside, filepath.Join(root, "escape"))
	os.Symlink(filepath.Join(root, "in"), filepath.Join(root, "inner"))
	os.Symlink(filepath.Join(outside, "missing"), filepath.Join(root, "dangling"))
	f := func(rel string, ok bool) {
		t.Helper()
		p, err := SafeJoin(root, rel)
		if (err == nil) != ok {
			t.Errorf("SafeJoin(%q) = %q, %v; want ok=%v", rel, p, err, ok)
		}
		if err == nil && !strings.HasPrefix(p, root) {
			t.Errorf("SafeJoin(%q) = %q outside root", rel, p)
		}
	}
	f("a/b.pt", true)
	f("in/x", true)
	f("inner/x", true)
	f("new/dir/file", true)
	f("../x", false)
	f("a/../../x", false)
	f("a/../b", false)
	f("/etc/passwd", false)
	f("", false)
	f("./a", false)
	f("a//b", false)
	f(`a\b`, false)
	f("escape/x", false)
	f("escape", false)
	f("dangling", false)
	f("a\x00b", false)
}

func TestIDsAndNames(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id := NewID()
		if len(id) != 16 || ValidateID(id) != nil || seen[id] {
			t.Fatalf("bad id %q", id)
		}
		seen[id] = true
	}
	f := func(name string, ok bool) {
		t.Helper()
		if err := ValidateName(name); (err == nil) != ok {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
	f("resnet 50", true)
	f("exp/v2:lr=0.1@gpu+1", true)
	f("Ünïcode_ok-1.2", true)
	f("", false)
	f(" lead", false)
	f(".hidden", false)
	f("a\nb", false)
	f("semi;colon", false)
	f(strings.Repeat("x", 129), false)
	g := func(key string, ok bool) {
		t.Helper()
		if err := ValidateKey(key); (err == nil) != ok {
			t.Errorf("ValidateKey(%q) = %v, want ok=%v", key, err, ok)
		}
	}
	g("val/acc", true)
	g("a b.c", true)
	g("", false)
	g("tab\there", false)
	g(strings.Repeat("k", 251), false)
}

// crashChild applies batches forever and prints the last seq of each
// acknowledged batch; the parent kills it.
func crashChild(dir string) int {
	s, err := Open(context.Background(), Config{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	e := &ev{run: "crash"}
	if _, err := s.Apply(context.Background(), []Event{e.start("crash", nil, nil)}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	out := bufio.NewWriter(os.Stdout)
	for step := int64(0); ; {
		batch := make([]Event, 0, 200)
		for i := 0; i < 200; i++ {
			batch = append(batch, e.metrics(step, map[string]float64{"loss": float64(step)}))
			step++
		}
		if _, err := s.Apply(context.Background(), batch); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintf(out, "ack %d %d\n", e.seq, step-1)
		out.Flush()
	}
}

func TestCrashSafety(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FW_STORE_CRASH_CHILD="+dir)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var lastSeq, lastStep int64 = -1, -1
	acks := 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "ack" {
			continue
		}
		lastSeq, _ = strconv.ParseInt(f[1], 10, 64)
		lastStep, _ = strconv.ParseInt(f[2], 10, 64)
		acks++
		if acks == 40 {
			// Kill mid-ingest: the child is busy writing the next batch.
			cmd.Process.Signal(syscall.SIGKILL)
			break
		}
	}
	// Read what the child acknowledged before it died.
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "ack" {
			lastSeq, _ = strconv.ParseInt(f[1], 10, 64)
			lastStep, _ = strconv.ParseInt(f[2], 10, 64)
		}
	}
	cmd.Wait()
	if lastStep < 0 {
		t.Fatal("the child acknowledged nothing")
	}
	s := mustOpen(t, Config{Dir: dir})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := s.GetRun(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	m := r.Metrics["loss"]
	if m.LastStep < lastStep || m.Count < lastStep+1 {
		t.Fatalf("acknowledged up to step %d (seq %d), found last step %d, count %d", lastStep, lastSeq, m.LastStep, m.Count)
	}
	ser, err := s.Metrics(ctx, "crash", MetricsQuery{MaxPoints: 100000})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, b := range ser[0].Buckets {
		if b.StepMax <= lastStep {
			n += b.Count
		}
	}
	if n != lastStep+1 {
		t.Fatalf("%d of %d acknowledged points survived", n, lastStep+1)
	}
	// Re-delivering everything acknowledged is a no-op (exactly once after a crash).
	e := &ev{run: "crash", seq: 1}
	res, err := s.Apply(ctx, []Event{e.metrics(0, map[string]float64{"loss": -1})})
	if err != nil || res.Duplicates != 1 {
		t.Fatalf("re-delivery after crash: %+v %v", res, err)
	}
}
