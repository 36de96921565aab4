package store

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestRecords(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		ctx := context.Background()
		st := open(Config{})
		if _, err := st.GetRecord(ctx, "model", "m"); ErrorCode(err) != CodeNotFound {
			t.Fatalf("missing record: %v", err)
		}
		put := func(key, body string) Record {
			t.Helper()
			r, err := st.UpdateRecord(ctx, "model", key, func(*Record) (json.RawMessage, error) { return json.RawMessage(body), nil })
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		r := put("b", `{"n":1}`)
		if r.Rev != 1 || r.Kind != "model" || r.Key != "b" || string(r.Body) != `{"n":1}` || r.Created.IsZero() {
			t.Fatalf("created: %+v", r)
		}
		put("a", `{"n":0}`)
		if _, err := st.UpdateRecord(ctx, "export", "a", func(*Record) (json.RawMessage, error) { return json.RawMessage(`[]`), nil }); err != nil {
			t.Fatal(err)
		}
		// The callback sees the current body; its answer is the next one.
		r, err := st.UpdateRecord(ctx, "model", "b", func(cur *Record) (json.RawMessage, error) {
			if cur == nil || string(cur.Body) != `{"n":1}` || cur.Rev != 1 {
				t.Errorf("callback saw %+v", cur)
			}
			return json.RawMessage(`{"n":2}`), nil
		})
		if err != nil || r.Rev != 2 || string(r.Body) != `{"n":2}` {
			t.Fatalf("updated: %+v %v", r, err)
		}
		// ErrKeep changes nothing; another error aborts.
		if r, err := st.UpdateRecord(ctx, "model", "b", func(*Record) (json.RawMessage, error) { return nil, ErrKeep }); err != nil || r.Rev != 2 {
			t.Fatalf("keep: %+v %v", r, err)
		}
		boom := errors.New("boom")
		if _, err := st.UpdateRecord(ctx, "model", "b", func(*Record) (json.RawMessage, error) { return json.RawMessage(`{}`), boom }); !errors.Is(err, boom) {
			t.Fatalf("abort: %v", err)
		}
		if g, _ := st.GetRecord(ctx, "model", "b"); g.Rev != 2 || string(g.Body) != `{"n":2}` {
			t.Fatalf("after keep and abort: %+v", g)
		}
		// Bad JSON, oversized bodies and bad names are refused.
		if _, err := st.UpdateRecord(ctx, "model", "c", func(*Record) (json.RawMessage, error) { return json.RawMessage(`{`), nil }); ErrorCode(err) != CodeInvalidArgument {
			t.Fatalf("bad JSON: %v", err)
		}
		big := json.RawMessage(`"` + strings.Repeat("x", MaxRecordBytes) + `"`)
		if _, err := st.UpdateRecord(ctx, "model", "c", func(*Record) (json.RawMessage, error) { return big, nil }); ErrorCode(err) != CodeInvalidArgument {
			t.Fatalf("oversized: %v", err)
		}
		if _, err := st.GetRecord(ctx, "model", "bad\nkey"); ErrorCode(err) != CodeInvalidArgument {
			t.Fatalf("bad key: %v", err)
		}
		// Listing is per kind, by key.
		list, err := st.ListRecords(ctx, "model")
		if err != nil || len(list) != 2 || list[0].Key != "a" || list[1].Key != "b" {
			t.Fatalf("list: %+v %v", list, err)
		}
		// A nil body deletes; DeleteRecord too.
		if _, err := st.UpdateRecord(ctx, "model", "a", func(*Record) (json.RawMessage, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
		if ok, err := st.DeleteRecord(ctx, "model", "b"); !ok || err != nil {
			t.Fatalf("delete: %v %v", ok, err)
		}
		if ok, err := st.DeleteRecord(ctx, "model", "b"); ok || err != nil {
			t.Fatalf("delete again: %v %v", ok, err)
		}
		if list, _ := st.ListRecords(ctx, "model"); len(list) != 0 {
			t.Fatalf("left: %+v", list)
		}
		if list, _ := st.ListRecords(ctx, "export"); len(list) != 1 {
			t.Fatalf("other kind: %+v", list)
		}
	})
}

// TestRecordsTwoStores updates one record from two stores on the same
// database (two dashboards sharing it) at once: no increment is lost, and
// the concurrent creation of a missing record is seen, not duplicated.
func TestRecordsTwoStores(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		ctx := context.Background()
		a := open(Config{})
		b := open(a.(*sqlStore).cfg)
		const per = 25
		var wg sync.WaitGroup
		errs := make(chan error, 4*per)
		for _, st := range []Store{a, b, a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range per {
					_, err := st.UpdateRecord(ctx, "counter", "n", func(cur *Record) (json.RawMessage, error) {
						n := 0
						if cur != nil {
							n, _ = strconv.Atoi(string(cur.Body))
						}
						return json.RawMessage(strconv.Itoa(n + 1)), nil
					})
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		r, err := b.GetRecord(ctx, "counter", "n")
		if err != nil || string(r.Body) != strconv.Itoa(4*per) || r.Rev != 4*per {
			t.Fatalf("counter: %+v %v; want %d", r, err, 4*per)
		}
	})
}

// TestSameStartTwoStores: the same run_start reaches two dashboards on one
// database at once (a retry sent to another replica), and new runs of one
// new experiment start on both: neither batch fails, the run and the
// experiment exist once, and the repeated run_start counts as a duplicate.
func TestSameStartTwoStores(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		ctx := context.Background()
		a := open(Config{})
		b := open(a.(*sqlStore).cfg)
		for round := range 10 {
			exp := "exp-" + strconv.Itoa(round)
			same := (&ev{run: "same-" + strconv.Itoa(round), writer: "w"}).start(exp, nil, nil)
			var wg sync.WaitGroup
			results := make([]ApplyResult, 2)
			errs := make([]error, 2)
			for i, st := range []Store{a, b} {
				own := (&ev{run: "own-" + strconv.Itoa(round) + "-" + strconv.Itoa(i), writer: "w"}).start(exp, nil, nil)
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i], errs[i] = st.Apply(ctx, []Event{own, same})
				}()
			}
			wg.Wait()
			for i := range 2 {
				if errs[i] != nil || len(results[i].Errors) > 0 {
					t.Fatalf("round %d, store %d: %+v %v", round, i, results[i], errs[i])
				}
			}
			if d := results[0].Duplicates + results[1].Duplicates; d != 1 {
				t.Fatalf("round %d: %d duplicates, want the repeated run_start once", round, d)
			}
			page, err := a.ListRuns(ctx, ListQuery{Experiment: exp})
			if err != nil || len(page.Runs) != 3 {
				t.Fatalf("round %d: runs of %s: %v %v", round, exp, runIDs(page), err)
			}
		}
	})
}
