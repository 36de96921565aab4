package store

import (
	"context"
	"database/sql"
	"testing"
)

// TestWriterKeepsStatementsPrepared: on SQLite the writer keeps the
// statements of one transaction prepared for the next ones (parsing a
// batch's multi-row inserts in every transaction was a sixth of a
// log-batch's CPU), and what later transactions write through them, a
// metric sort index built in between included (a schema change), reads back
// whole.
func TestWriterKeepsStatementsPrepared(t *testing.T) {
	s := mustOpen(t, Config{Dir: t.TempDir()})
	ss := s.(*sqlStore)
	e := &ev{run: "r1", writer: "w"}
	mustApply(t, s, e.start("exp", nil, nil))
	batch := func(from int64) {
		var evs []Event
		for step := from; step < from+50; step++ {
			evs = append(evs, e.metrics(step, map[string]float64{"loss": float64(step), "acc": 1 / float64(step+1)}))
		}
		mustApply(t, s, evs...)
	}
	batch(0)
	prepared := func() int {
		// The map is the writer's: read it inside a write request.
		var n int
		if err := ss.write(context.Background(), func(context.Context, *sql.Tx) error { n = len(ss.prepared); return nil }, nil); err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := prepared()
	if n == 0 {
		t.Fatal("no statement kept prepared after a transaction")
	}
	batch(50)
	if m := prepared(); m != n {
		t.Fatalf("a second batch of the same shape prepared %d more statements", m-n)
	}
	// A schema change in between: sorting by a metric builds its index.
	if _, err := s.ListRuns(context.Background(), ListQuery{Experiment: "exp", Sort: "metrics.loss", Limit: 10}); err != nil {
		t.Fatal(err)
	}
	batch(100)
	series, err := s.Metrics(context.Background(), "r1", MetricsQuery{Keys: []string{"loss"}, MaxPoints: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(series) != 1 || len(series[0].Buckets) != 150 || series[0].Downsampled {
		t.Fatalf("loss has %d series, want 1 of 150 points: %+v", len(series), series)
	}
}
