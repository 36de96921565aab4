package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestLeases(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		ctx := context.Background()
		st := open(Config{})
		info := json.RawMessage(`{"url":"http://a"}`)
		l, ok, err := st.AcquireLease(ctx, "job/r1", "a", time.Hour, info, nil)
		if err != nil || !ok || l.Owner != "a" || l.Expired(time.Now()) || string(l.Info) != string(info) {
			t.Fatalf("acquire: %+v %v %v", l, ok, err)
		}
		// Held by a: b cannot take it, and learns who holds it.
		l, ok, err = st.AcquireLease(ctx, "job/r1", "b", time.Hour, nil, nil)
		if err != nil || ok || l.Owner != "a" {
			t.Fatalf("taken from a live owner: %+v %v %v", l, ok, err)
		}
		// ...unless take says the owner is gone.
		var saw Lease
		l, ok, err = st.AcquireLease(ctx, "job/r1", "b", time.Hour, nil, func(cur Lease) bool { saw = cur; return cur.Owner == "a" })
		if err != nil || !ok || l.Owner != "b" || saw.Owner != "a" {
			t.Fatalf("take over: %+v %v %v (saw %+v)", l, ok, err, saw)
		}
		// a's renewal no longer covers it; b's does.
		if names, err := st.RenewLeases(ctx, "a", time.Hour); err != nil || len(names) != 0 {
			t.Fatalf("a renews: %v %v", names, err)
		}
		st.AcquireLease(ctx, "deployment/d1", "b", time.Hour, nil, nil)
		if names, err := st.RenewLeases(ctx, "b", time.Hour); err != nil || fmt.Sprint(names) != "[deployment/d1 job/r1]" {
			t.Fatalf("b renews: %v %v", names, err)
		}
		// Expiry: a short lease may be taken by anyone once it ran out.
		if _, ok, _ := st.AcquireLease(ctx, "job/r2", "a", 50*time.Millisecond, nil, nil); !ok {
			t.Fatal("acquire r2")
		}
		time.Sleep(80 * time.Millisecond)
		if l, ok, err := st.AcquireLease(ctx, "job/r2", "b", time.Hour, nil, nil); err != nil || !ok || l.Owner != "b" {
			t.Fatalf("expired: %+v %v %v", l, ok, err)
		}
		// Listing by prefix (byte order; a prefix with LIKE's wildcards is literal).
		st.AcquireLease(ctx, "job_x", "c", time.Hour, nil, nil)
		ls, err := st.ListLeases(ctx, "job/")
		if err != nil || len(ls) != 2 || ls[0].Name != "job/r1" || ls[1].Name != "job/r2" {
			t.Fatalf("list: %+v %v", ls, err)
		}
		if all, _ := st.ListLeases(ctx, ""); len(all) != 4 {
			t.Fatalf("list all: %+v", all)
		}
		// Release: only by its owner.
		if ok, err := st.ReleaseLease(ctx, "job/r1", "a"); ok || err != nil {
			t.Fatalf("released by a non-owner: %v %v", ok, err)
		}
		if ok, err := st.ReleaseLease(ctx, "job/r1", "b"); !ok || err != nil {
			t.Fatalf("release: %v %v", ok, err)
		}
		if _, err := st.GetLease(ctx, "job/r1"); ErrorCode(err) != CodeNotFound {
			t.Fatalf("released lease still there: %v", err)
		}
		if l, err := st.GetLease(ctx, "job/r2"); err != nil || l.Owner != "b" {
			t.Fatalf("get: %+v %v", l, err)
		}
		// Bad arguments.
		for _, bad := range []func() error{
			func() error { _, _, err := st.AcquireLease(ctx, "", "a", time.Hour, nil, nil); return err },
			func() error { _, _, err := st.AcquireLease(ctx, "x", "a", 0, nil, nil); return err },
			func() error {
				_, _, err := st.AcquireLease(ctx, "x", "a", time.Hour, json.RawMessage(`{`), nil)
				return err
			},
		} {
			if ErrorCode(bad()) != CodeInvalidArgument {
				t.Fatal("a bad lease argument was accepted")
			}
		}
	})
}

// TestLeaseOneOwner: owners on two stores (two dashboards) race for the same
// expired lease many times: exactly one wins each round.
func TestLeaseOneOwner(t *testing.T) {
	forEach(t, func(t *testing.T, open func(Config) Store) {
		ctx := context.Background()
		a := open(Config{})
		b := open(a.(*sqlStore).cfg)
		for round := range 20 {
			name := fmt.Sprintf("deployment/d%d", round)
			var wins atomic.Int32
			var wg sync.WaitGroup
			for i, st := range []Store{a, b, a, b} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, ok, err := st.AcquireLease(ctx, name, fmt.Sprintf("owner-%d", i), time.Hour, nil, nil)
					if err != nil {
						t.Error(err)
					}
					if ok {
						wins.Add(1)
					}
				}()
			}
			wg.Wait()
			if n := wins.Load(); n != 1 {
				t.Fatalf("round %d: %d owners", round, n)
			}
		}
	})
}
