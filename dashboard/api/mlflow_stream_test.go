package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fw-serve/fw/dashboard/mlflow"
	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/dashboard/stream"
	"github.com/fw-serve/fw/dashboard/tracking"
	"github.com/fw-serve/fw/internal/testreq"
)

// TestMLflowLoggingReachesTheStream: runs logged through MLflow's API are
// first-class: their metrics and status changes reach the live stream's
// subscribers like fw.track's.
func TestMLflowLoggingReachesTheStream(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	st, err := store.Open(ctx, store.Config{Dir: dir, Feed: tracking.FeedOf})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hub := stream.NewHub(stream.Config{})
	defer hub.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	tail := tracking.NewFeedTailer(st, hub, 0, log)
	if err := tail.Start(ctx); err != nil {
		t.Fatal(err)
	}
	tailed := make(chan struct{})
	go func() { defer close(tailed); tail.Run(ctx) }()
	defer func() { cancel(); <-tailed }()
	ml := mlflow.New(ctx, st, mlflow.Config{ArtifactDir: filepath.Join(dir, "artifacts")}, log)
	srv := New(ctx, st, Config{Hub: hub, ArtifactDir: filepath.Join(dir, "artifacts"), Mounts: []Mount{ml}}, log)
	sub := hub.Subscribe(stream.Filter{All: true}, nil)
	call := func(path, body string) map[string]any {
		t.Helper()
		c := testreq.Serve(srv.Handler, "POST", "/api/2.0/mlflow/"+path, "application/json", []byte(body), false)
		var out map[string]any
		if c.Response.StatusCode() != 200 || json.Unmarshal(c.Response.Body(), &out) != nil {
			t.Fatalf("%s: %d %s", path, c.Response.StatusCode(), c.Response.Body())
		}
		return out
	}
	id := call("runs/create", `{"experiment_id":"0","run_name":"streamed"}`)["run"].(map[string]any)["info"].(map[string]any)["run_id"].(string)
	call("runs/log-batch", `{"run_id":"`+id+`","metrics":[{"key":"loss","value":0.5,"timestamp":1700000000000,"step":3}]}`)
	call("runs/update", `{"run_id":"`+id+`","status":"FINISHED","end_time":1700000001000}`)

	var sawMetric, sawEnd bool
	deadline := time.After(10 * time.Second)
	for !sawMetric || !sawEnd {
		select {
		case m := <-sub.C():
			var ev struct {
				Type  string          `json:"type"`
				RunID string          `json:"run_id"`
				Data  json.RawMessage `json:"data"`
			}
			if err := json.Unmarshal(m.Msg, &ev); err != nil || ev.RunID != id {
				continue
			}
			d := string(ev.Data)
			sawMetric = sawMetric || (ev.Type == stream.TypeMetric && strings.Contains(d, `"loss"`) && strings.Contains(d, "0.5"))
			sawEnd = sawEnd || (ev.Type == stream.TypeStatus && strings.Contains(d, `"finished"`))
		case <-deadline:
			t.Fatalf("the stream did not carry the MLflow run's metric (%v) and end (%v)", sawMetric, sawEnd)
		}
	}
}
