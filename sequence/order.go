package sequence

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// Order runs the requests of each sequence one after another, in the
// order they were admitted, with no controls, state or slots: for a model
// that passes its requests' sequences on to other models (an ensemble,
// whose stateful steps then see a sequence's requests in the order the
// client sent them, as Triton's ensemble scheduler does). The zero value
// is not usable; use NewOrder. It is safe for concurrent use.
type Order struct {
	mu    sync.Mutex
	tails map[ID]*orderTail
}

// orderTail is the last admitted request of one sequence, and how many of
// its requests have not finished.
type orderTail struct {
	done    chan struct{}
	pending int
}

// NewOrder returns an empty Order.
func NewOrder() *Order { return &Order{tails: map[ID]*orderTail{}} }

// Active is the number of sequences with requests admitted and not finished.
func (o *Order) Active() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.tails)
}

// Enter admits a request of sequence id after those of id admitted before
// it. A zero id names no sequence: its turn comes at once. The turn must
// be Run or Released, or the sequence's later requests wait forever.
func (o *Order) Enter(id ID) *Turn {
	if id.Zero() {
		return &Turn{prev: closedChan}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.tails[id]
	prev := closedChan
	if t == nil {
		t = &orderTail{}
		o.tails[id] = t
	} else {
		prev = t.done
	}
	t.done = make(chan struct{})
	t.pending++
	return &Turn{o: o, id: id, prev: prev, done: t.done}
}

// Turn is a request's place in its sequence's Order.
type Turn struct {
	o          *Order
	id         ID
	prev, done chan struct{}
	used       atomic.Bool
}

// Run waits until the requests of the sequence admitted before this one
// have finished (or ctx ends), then runs fn; the next request's turn comes
// when it returns.
func (t *Turn) Run(ctx context.Context, fn func(context.Context) error) error {
	if !t.used.CompareAndSwap(false, true) {
		return errors.New("sequence: a turn runs once")
	}
	defer t.finish()
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-t.prev:
	case <-ctx.Done():
		return ctx.Err()
	}
	return fn(ctx)
}

// Release gives the turn up without running (the request failed before
// it ran). It does nothing after Run, and on nil.
func (t *Turn) Release() {
	if t != nil && t.used.CompareAndSwap(false, true) {
		t.finish()
	}
}

// finish passes the turn on once the request before it has finished, so
// that a request given up early does not let a later one overtake an
// earlier one still running.
func (t *Turn) finish() {
	if t.o == nil {
		return
	}
	done := func() {
		t.o.mu.Lock()
		if tail := t.o.tails[t.id]; tail != nil {
			tail.pending--
			if tail.pending == 0 {
				delete(t.o.tails, t.id)
			}
		}
		t.o.mu.Unlock()
		close(t.done)
	}
	afterPrev(t.prev, done)
}
