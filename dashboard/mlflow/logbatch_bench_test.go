package mlflow

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/testreq"
)

// BenchmarkLogBatch1000: MLflow's bulk logging path, one log-batch of 1000
// metrics (100 steps of 10 keys, the body MLflow's client sends) per op,
// new steps each time, into SQLite. go test -bench LogBatch -benchtime 200x.
func BenchmarkLogBatch1000(b *testing.B) {
	st, err := store.Open(context.Background(), store.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	srv := New(context.Background(), st, Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	serve := func(uri string, body []byte) map[string]any {
		ctx := testreq.Serve(func(ctx *fasthttpCtx) { srv.Handler(ctx, string(ctx.Path())) }, "POST", uri, "application/json", body, false)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("%s: %d %s", uri, ctx.Response.StatusCode(), ctx.Response.Body())
		}
		out := map[string]any{}
		json.Unmarshal(ctx.Response.Body(), &out)
		return out
	}
	exp := serve("/api/2.0/mlflow/experiments/create", []byte(`{"name":"bench"}`))["experiment_id"].(string)
	run := serve("/api/2.0/mlflow/runs/create", []byte(`{"experiment_id":"`+exp+`","start_time":"1700000000000"}`))["run"].(map[string]any)["info"].(map[string]any)["run_id"].(string)
	bodies := make([][]byte, b.N)
	for i := range bodies {
		var sb strings.Builder
		sb.WriteString(`{"run_id": "` + run + `", "metrics": [`)
		for s := 0; s < 100; s++ {
			for k := 0; k < 10; k++ {
				if s+k > 0 {
					sb.WriteString(", ")
				}
				step := i*100 + s
				fmt.Fprintf(&sb, `{"key": "k%d", "value": %g, "timestamp": "1700000000000", "step": "%d"}`, k, float64(step)*0.001, step)
			}
		}
		sb.WriteString(`]}`)
		bodies[i] = []byte(sb.String())
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		serve("/api/2.0/mlflow/runs/log-batch", bodies[i])
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "points/s")
}
