package store

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
)

// BenchmarkListRunsMetricFilter is a page of 100 runs of an experiment of
// 10,000, filtered and ordered by a metric (MLflow's search_runs, fw's run
// table): go test -run '^$' -bench ListRunsMetricFilter ./dashboard/store
func BenchmarkListRunsMetricFilter(b *testing.B) {
	ctx := context.Background()
	st, err := Open(ctx, Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	rng := rand.New(rand.NewSource(1))
	var evs []Event
	for i := 0; i < 10000; i++ {
		id := fmt.Sprintf("r%05d", i)
		evs = append(evs,
			Event{Type: EventRunStart, RunID: id, Seq: 1, Experiment: "big", Params: map[string]any{"lr": "0.01"}, Tags: map[string]string{"group": "g", "mlflow.runName": id}},
			Event{Type: EventMetrics, RunID: id, Seq: 2, Step: Ptr(int64(0)), Values: map[string]Float{"acc": Float(rng.Float64()), "loss": Float(rng.Float64())}},
			Event{Type: EventRunEnd, RunID: id, Seq: 3, Status: StatusFinished})
		if len(evs) >= 3000 {
			if _, err := st.Apply(ctx, evs); err != nil {
				b.Fatal(err)
			}
			evs = nil
		}
	}
	if _, err := st.Apply(ctx, evs); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, filter, sort string }{
		{"metric-filter-and-order", `metrics."acc".last > 0.5 AND NOT tags."fw.lifecycle" = "deleted"`, `metrics."acc".last`},
		{"started", `NOT tags."fw.lifecycle" = "deleted"`, "started"},
		{"started-nofilter", "", "started"},
		{"id-nofilter", "", "id"},
	} {
		for _, lim := range []int{1, 100} {
			b.Run(fmt.Sprintf("%s/limit-%d", c.name, lim), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					page, err := st.ListRuns(ctx, ListQuery{Experiment: "big", Filter: c.filter, Sort: c.sort, Desc: true, Limit: lim})
					if err != nil || len(page.Runs) != lim {
						b.Fatalf("%v %d", err, len(page.Runs))
					}
				}
			})
		}
	}
}
