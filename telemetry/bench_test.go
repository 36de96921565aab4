package telemetry

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkTracedRequest is one traced request's whole cost: the decision,
// one inference with its engine call, and its spans exported over
// OTLP/HTTP to a receiver on loopback.
func BenchmarkTracedRequest(b *testing.B) {
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(200)
	}))
	defer rcv.Close()
	cfg, _, err := FromEnv(func(string) string { return "" }, rcv.URL, ProtocolHTTP)
	if err != nil {
		b.Fatal(err)
	}
	cfg.Export.MaxQueue = 1 << 20 // nothing dropped: every span is encoded and sent
	tr, err := New(cfg, slog.Default())
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	obs := tr.Observer("m", "1")
	ctxs := make([]context.Context, 1)
	b.ReportAllocs()
	for b.Loop() {
		now := time.Now()
		sp := tr.Start(nil, nil, now)
		ctx, call := StartCall(With(context.Background(), sp))
		ctxs[0] = ctx
		obs.EngineCall(ctxs, 1, now, time.Microsecond, nil)
		call.Done("m", "1", time.Microsecond, nil)
		sp.End("POST /predict", 2, nil, time.Now(), false, "")
	}
}
