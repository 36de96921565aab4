package sequence

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The requests of one sequence run in the order they were admitted; one
// given up early does not let a later one overtake an earlier one; other
// sequences and requests without a sequence do not wait; a finished
// sequence is forgotten.
func TestOrder(t *testing.T) {
	o := NewOrder()
	ctx := context.Background()
	a, b, c := o.Enter(ID{N: 7}), o.Enter(ID{N: 7}), o.Enter(ID{N: 7})
	other, none := o.Enter(ID{S: "x"}), o.Enter(ID{})
	if n := o.Active(); n != 2 {
		t.Fatalf("%d active sequences, want 2", n)
	}
	ran := make(chan string, 8)
	aGo, aDone := make(chan struct{}), make(chan struct{})
	go func() {
		_ = a.Run(ctx, func(context.Context) error { <-aGo; ran <- "a"; return nil })
		close(aDone)
	}()
	b.Release() // given up while a still runs
	cDone := make(chan struct{})
	go func() { _ = c.Run(ctx, func(context.Context) error { ran <- "c"; return nil }); close(cDone) }()
	for _, tn := range []*Turn{other, none} {
		if err := tn.Run(ctx, func(context.Context) error { ran <- "free"; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-cDone:
		t.Fatal("c ran before a finished")
	case <-time.After(50 * time.Millisecond):
	}
	close(aGo)
	<-aDone
	<-cDone
	close(ran)
	var order []string
	for r := range ran {
		order = append(order, r)
	}
	if len(order) != 4 || order[2] != "a" || order[3] != "c" {
		t.Fatalf("ran %v, want free, free, a, c", order)
	}
	if n := o.Active(); n != 0 {
		t.Fatalf("%d active sequences after all finished", n)
	}
	// A turn whose context ends while it waits fails and passes the turn on.
	d, e := o.Enter(ID{N: 9}), o.Enter(ID{N: 9})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := e.Run(cctx, func(context.Context) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	if err := d.Run(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := e.Run(ctx, func(context.Context) error { t.Error("a turn ran twice"); return nil }); err == nil {
		t.Fatal("a turn run twice: no error")
	}
	deadline := time.Now().Add(2 * time.Second)
	for o.Active() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := o.Active(); n != 0 {
		t.Fatalf("%d active sequences after all finished", n)
	}
	var nilTurn *Turn
	nilTurn.Release()
}
