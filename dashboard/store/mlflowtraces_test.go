package store

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
)

// TestMLflowTraces: the trace rows (read-modify-write, read, scan by
// time both ways, delete with spans) and their removal with their
// experiment.
func TestMLflowTraces(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		st := open(Config{})
		ctx := context.Background()
		exp, err := st.CreateExperiment(ctx, ExperimentInput{Name: "traced"})
		if err != nil {
			t.Fatal(err)
		}
		put := func(id string, at int64) {
			t.Helper()
			_, err := st.UpdateMLflowTrace(ctx, id, func(cur *MLflowTrace) (*MLflowTrace, error) {
				if cur != nil {
					t.Fatalf("%s exists already", id)
				}
				return &MLflowTrace{ExperimentID: exp.ID, RequestTime: at, Body: json.RawMessage(`{"n":1}`)}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		put("tr-a", 10)
		put("tr-b", 30)
		put("tr-c", 20)
		if _, err := st.UpdateMLflowTrace(ctx, "tr-a", func(cur *MLflowTrace) (*MLflowTrace, error) {
			cur.Body = json.RawMessage(`{"n":2}`)
			return cur, nil
		}); err != nil {
			t.Fatal(err)
		}
		got, err := st.GetMLflowTraces(ctx, []string{"tr-a", "tr-x"})
		if err != nil || len(got) != 1 || string(got[0].Body) != `{"n":2}` {
			t.Fatalf("get: %v %v", got, err)
		}
		order := func(asc bool) (ids []string) {
			if err := st.ScanMLflowTraces(ctx, []string{exp.ID}, asc, func(tr MLflowTrace) bool { ids = append(ids, tr.ID); return true }); err != nil {
				t.Fatal(err)
			}
			return ids
		}
		if a, d := order(true), order(false); len(a) != 3 || a[0] != "tr-a" || a[2] != "tr-b" || d[0] != "tr-b" || d[2] != "tr-a" {
			t.Fatalf("scan: %v / %v", a, d)
		}
		if err := st.PutMLflowSpans(ctx, []MLflowSpan{{TraceID: "tr-a", SpanID: "01", StartNs: 2, Content: json.RawMessage(`{}`), Text: "x"},
			{TraceID: "tr-a", SpanID: "02", StartNs: 1, Content: json.RawMessage(`{}`), Text: "y"}}); err != nil {
			t.Fatal(err)
		}
		if err := st.PutMLflowSpans(ctx, []MLflowSpan{{TraceID: "tr-a", SpanID: "01", StartNs: 3, Content: json.RawMessage(`{"again":1}`), Text: "z"}}); err != nil {
			t.Fatal(err)
		}
		spans, err := st.GetMLflowSpans(ctx, "tr-a")
		if err != nil || len(spans) != 2 || spans[0].SpanID != "02" || string(spans[1].Content) != `{"again":1}` {
			t.Fatalf("spans: %v %v", spans, err)
		}
		if n, err := st.DeleteMLflowTraces(ctx, []string{"tr-b", "tr-x"}); err != nil || n != 1 {
			t.Fatalf("delete: %d %v", n, err)
		}
		if err := st.DeleteExperiment(ctx, exp.ID); err != nil {
			t.Fatal(err)
		}
		if got, _ := st.GetMLflowTraces(ctx, []string{"tr-a", "tr-c"}); len(got) != 0 {
			t.Fatalf("traces outlived their experiment: %v", got)
		}
		if spans, _ := st.GetMLflowSpans(ctx, "tr-a"); len(spans) != 0 {
			t.Fatalf("spans outlived their experiment: %v", spans)
		}
	})
}

// TestMLflowTraceScanPages: a scan over more than a page, with many ties
// in time, gives every trace once in order, both ways; its callback may
// read the store (one reader: a scan that held its connection would wait
// for itself).
func TestMLflowTraceScanPages(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		st := open(Config{Readers: 1})
		ctx := context.Background()
		const n = 600
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("tr-%04d", i)
			if _, err := st.UpdateMLflowTrace(ctx, id, func(*MLflowTrace) (*MLflowTrace, error) {
				return &MLflowTrace{ExperimentID: "e", RequestTime: int64(i % 3), Body: json.RawMessage(`{}`)}, nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		for _, asc := range []bool{true, false} {
			var got []MLflowTrace
			err := st.ScanMLflowTraces(ctx, []string{"e"}, asc, func(tr MLflowTrace) bool {
				if _, err := st.GetMLflowSpans(ctx, tr.ID); err != nil { // a read inside the scan
					t.Fatal(err)
				}
				got = append(got, tr)
				return true
			})
			if err != nil || len(got) != n {
				t.Fatalf("asc %v: %d traces, %v", asc, len(got), err)
			}
			seen := map[string]bool{}
			for i, tr := range got {
				if seen[tr.ID] {
					t.Fatalf("asc %v: %s twice", asc, tr.ID)
				}
				seen[tr.ID] = true
				if i > 0 {
					p := got[i-1]
					inOrder := p.RequestTime < tr.RequestTime || (p.RequestTime == tr.RequestTime && p.ID < tr.ID)
					if !asc {
						inOrder = p.RequestTime > tr.RequestTime || (p.RequestTime == tr.RequestTime && p.ID < tr.ID)
					}
					if !inOrder {
						t.Fatalf("asc %v: %v before %v", asc, p, tr)
					}
				}
			}
		}
	})
}
