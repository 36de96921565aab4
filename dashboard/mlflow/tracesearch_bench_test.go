package mlflow

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/testreq"
)

// BenchmarkTraceSearch: MLflow's trace search over an experiment of
// FW_BENCH_TRACES traces (default 20,000; one span each, every 100th
// an error, every 1,000th mentioning "needle"), SQLite: the newest page,
// a rare status, and a text search. One op is one search of each.
func BenchmarkTraceSearch(b *testing.B) {
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("FW_BENCH_TRACES")); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	srv := New(ctx, st, Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	serve := func(uri string, body string) map[string]any {
		c := testreq.Serve(func(c *fasthttpCtx) { srv.Handler(c, string(c.Path())) }, "POST", uri, "application/json", []byte(body), false)
		if c.Response.StatusCode() != 200 {
			b.Fatalf("%s: %d %s", uri, c.Response.StatusCode(), c.Response.Body())
		}
		out := map[string]any{}
		json.Unmarshal(c.Response.Body(), &out)
		return out
	}
	exp := serve("/api/2.0/mlflow/experiments/create", `{"name":"bench"}`)["experiment_id"].(string)
	t0 := time.Now()
	var spans []store.MLflowSpan
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("tr-%032x", i+1)
		state := "OK"
		if i%100 == 0 {
			state = "ERROR"
		}
		exec := int64(i % 500)
		t := &mlTrace{ID: id, ExperimentID: exp, RequestTime: 1_700_000_000_000 + int64(i), ExecutionMs: &exec, State: state,
			Tags: map[string]string{tagTraceName: "chat", tagSpansLocation: spansInTrackingStor}, Metadata: map[string]string{metaSchemaVersion: "3"}, Finalized: true}
		row, _ := encodeTrace(t)
		if _, err := st.UpdateMLflowTrace(ctx, id, func(*store.MLflowTrace) (*store.MLflowTrace, error) { return row, nil }); err != nil {
			b.Fatal(err)
		}
		text := "chat\nmlflow.spanInputs: {\"q\": \"hello\"}"
		if i%1000 == 0 {
			text += " needle"
		}
		spans = append(spans, store.MLflowSpan{TraceID: id, SpanID: "0000000000000001", StartNs: int64(i), Content: json.RawMessage(`{"name":"chat"}`), Text: text})
		if len(spans) == 1000 {
			if err := st.PutMLflowSpans(ctx, spans); err != nil {
				b.Fatal(err)
			}
			spans = spans[:0]
		}
	}
	if err := st.PutMLflowSpans(ctx, spans); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d traces written in %v", n, time.Since(t0).Round(time.Millisecond))
	loc := `"locations":[{"type":"MLFLOW_EXPERIMENT","mlflow_experiment":{"experiment_id":"` + exp + `"}}]`
	for _, c := range []struct{ name, body string }{
		{"newest 100", `{` + loc + `}`},
		{"status = ERROR (1 %)", `{` + loc + `, "filter": "status = 'ERROR'"}`},
		{"text LIKE needle (0.1 %)", `{` + loc + `, "filter": "trace.text LIKE '%needle%'"}`},
		{"order by execution_time_ms", `{` + loc + `, "order_by": ["execution_time_ms DESC"], "max_results": 10}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				serve("/api/3.0/mlflow/traces/search", c.body)
			}
		})
	}
}
