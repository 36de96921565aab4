package store

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// TestSpans: spans are stored once (a retry's copy is ignored), a
// deployment's requests are listed newest or slowest first, a trace reads
// whole, and pruning keeps the newest.
func TestSpans(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		ctx := context.Background()
		st := open(Config{})
		base := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC).UnixNano()
		var spans []Span
		for i := range 5 {
			tid := fmt.Sprintf("%032x", i+1)
			srv := Span{TraceID: tid, SpanID: fmt.Sprintf("%016x", 100+i), Service: "fw-serve", Deployment: "dep-a", Name: "POST /predict",
				Kind: 2, Start: base + int64(i)*1e9, End: base + int64(i)*1e9 + int64(i+1)*1e6, Attributes: json.RawMessage(`{"http.response.status_code":200}`)}
			if i == 2 {
				srv.End = srv.Start + 50e6 // the slowest
				srv.Status, srv.StatusMessage = 2, "the engine failed"
			}
			child := Span{TraceID: tid, SpanID: fmt.Sprintf("%016x", 200+i), ParentID: srv.SpanID, Service: "fw-serve", Deployment: "dep-a",
				Name: "infer", Kind: 1, Start: srv.Start + 1e5, End: srv.Start + 2e5, Links: json.RawMessage(`[{"trace_id":"ab","span_id":"cd"}]`)}
			spans = append(spans, srv, child)
		}
		other := Span{TraceID: fmt.Sprintf("%032x", 99), SpanID: "0000000000000001", Service: "fw-serve", Deployment: "dep-b", Name: "POST /predict", Kind: 2, Start: base, End: base + 9e9}
		spans = append(spans, other)
		if err := st.PutSpans(ctx, spans); err != nil {
			t.Fatal(err)
		}
		if err := st.PutSpans(ctx, spans[:2]); err != nil { // a retry
			t.Fatal(err)
		}
		recent, err := st.ListRequests(ctx, RequestQuery{Deployment: "dep-a", Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if len(recent) != 3 || recent[0].TraceID != fmt.Sprintf("%032x", 5) || recent[2].TraceID != fmt.Sprintf("%032x", 3) {
			t.Fatalf("recent: %+v", recent)
		}
		slow, err := st.ListRequests(ctx, RequestQuery{Deployment: "dep-a", Slowest: true, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(slow) != 2 || slow[0].TraceID != fmt.Sprintf("%032x", 3) || slow[0].Status != 2 || slow[0].StatusMessage != "the engine failed" {
			t.Fatalf("slowest: %+v", slow)
		}
		all, err := st.ListRequests(ctx, RequestQuery{Slowest: true})
		if err != nil || len(all) != 6 || all[0].Deployment != "dep-b" {
			t.Fatalf("every sender's: %v %+v", err, all)
		}
		since, err := st.ListRequests(ctx, RequestQuery{Deployment: "dep-a", Since: time.Unix(0, base+3e9)})
		if err != nil || len(since) != 2 {
			t.Fatalf("since: %v %+v", err, since)
		}
		tr, err := st.GetTrace(ctx, fmt.Sprintf("%032x", 3))
		if err != nil {
			t.Fatal(err)
		}
		if len(tr) != 2 || tr[0].Kind != 2 || tr[1].ParentID != tr[0].SpanID || string(tr[1].Links) != `[{"trace_id":"ab","span_id":"cd"}]` ||
			string(tr[0].Attributes) != `{"http.response.status_code":200}` || string(tr[1].Attributes) != `{}` {
			t.Fatalf("trace: %+v", tr)
		}
		if none, err := st.GetTrace(ctx, "nope"); err != nil || len(none) != 0 {
			t.Fatalf("unknown trace: %v %v", none, err)
		}
		// Pruning: nothing is old; keep the newest 4 received (all were
		// received together: ties go too, keeping at most 4).
		n, err := st.PruneSpans(ctx, time.Now().Add(-time.Hour), 4)
		if err != nil || n != 11 {
			t.Fatalf("pruned %d: %v", n, err)
		}
		if err := st.PutSpans(ctx, spans[:2]); err != nil {
			t.Fatal(err)
		}
		if n, err := st.PruneSpans(ctx, time.Now().Add(time.Second), 100); err != nil || n != 2 {
			t.Fatalf("pruned by age %d: %v", n, err)
		}
		if err := st.PutSpans(ctx, make([]Span, MaxSpansPerBatch+1)); ErrorCode(err) != CodeBatchTooLarge {
			t.Fatalf("an oversized batch: %v", err)
		}
	})
}
