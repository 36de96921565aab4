package engine

import (
	"context"
	"errors"
	"testing"
)

// Responses keeps order, ends at the final response (later ones dropped),
// runs its end function once (at once when set after the end), and rides
// in a context.
func TestResponses(t *testing.T) {
	q := NewResponses()
	ends := 0
	q.OnEnd(func() { ends++ })
	q.Put(Response{Outs: []Tensor{FromFloat32([]int64{1}, []float32{1})}})
	if !q.Put(Response{Final: true}) || q.Put(Response{Err: errors.New("late")}) {
		t.Fatal("the final response was refused or a later one queued")
	}
	q.Fail(errors.New("after the end"))
	select {
	case <-q.Ready():
	default:
		t.Fatal("not ready with responses queued")
	}
	got := q.Take()
	if len(got) != 2 || got[0].Outs == nil || !got[1].Final || !q.Ended() || ends != 1 {
		t.Fatalf("took %+v, ended %v, end ran %d times", got, q.Ended(), ends)
	}
	q.OnEnd(func() { ends++ })
	if ends != 2 {
		t.Fatal("OnEnd after the end did not run at once")
	}
	if ResponsesOf(WithResponses(context.Background(), q)) != q || ResponsesOf(context.Background()) != nil {
		t.Fatal("the context does not carry the queue")
	}
}

// A reader that falls behind ends its request instead of growing the
// queue without bound.
func TestResponsesBounded(t *testing.T) {
	q := NewResponses()
	big := Tensor{DType: Uint8, Shape: []int64{1 << 20}, Data: make([]byte, 1<<20)}
	for range MaxQueuedBytes >> 20 {
		if !q.Put(Response{Outs: []Tensor{big}}) {
			t.Fatal("refused under the limit")
		}
	}
	q.Put(Response{Outs: []Tensor{big}})
	if q.Put(Response{Outs: []Tensor{big}}) || !q.Ended() {
		t.Fatal("the queue grew past its limit")
	}
	got := q.Take()
	last := got[len(got)-1]
	if !last.Final || last.Err == nil || last.Outs != nil {
		t.Fatalf("last response %+v, want the final error", last)
	}
	// One response larger than the limit goes when nothing waits.
	q = NewResponses()
	huge := Tensor{DType: Uint8, Shape: []int64{MaxQueuedBytes + 1}, Data: make([]byte, MaxQueuedBytes+1)}
	if !q.Put(Response{Outs: []Tensor{huge}}) || q.Ended() {
		t.Fatal("a single large response to a reader that keeps up was refused")
	}
	// The final flag alone after it still ends the request cleanly.
	if !q.Put(Response{Final: true}) {
		t.Fatal("the final response was refused")
	}
	if got := q.Take(); len(got) != 2 || got[1].Err != nil || !got[1].Final {
		t.Fatalf("took %+v, want the large response and a clean end", got)
	}
}
