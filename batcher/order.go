package batcher

import (
	"context"
	"sync"
)

// order answers requests in the order their batches were taken
// (Config.PreserveOrdering, Triton's preserve_ordering): a request whose
// result is in waits until every request numbered before it has been
// answered or given up.
type order struct {
	mu      sync.Mutex
	next    uint64                   // the sequence number the next request gets (from 1)
	through uint64                   // every request up to this one is done
	done    map[uint64]bool          // done requests past through
	waiters map[uint64]chan struct{} // a request waiting for through to reach its number - 1
}

func newOrder() *order {
	return &order{done: map[uint64]bool{}, waiters: map[uint64]chan struct{}{}}
}

// take numbers a request being queued.
func (o *order) take() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.next++
	return o.next
}

// wait returns once every request numbered before seq is done, or with
// ctx's error when ctx ends first; nil at once when base ends (a Close
// that gave up waiting: answers then leave as they are ready).
func (o *order) wait(ctx, base context.Context, seq uint64) error {
	o.mu.Lock()
	if o.through >= seq-1 {
		o.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	o.waiters[seq] = ch
	o.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-base.Done():
		o.mu.Lock()
		delete(o.waiters, seq)
		o.mu.Unlock()
		return nil
	case <-ctx.Done():
		o.mu.Lock()
		delete(o.waiters, seq)
		o.mu.Unlock()
		return ctx.Err()
	}
}

// finish marks request seq done (answered, or gone from the queue), and
// releases the next waiting request once every earlier one is done.
func (o *order) finish(seq uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.done[seq] = true
	for o.done[o.through+1] {
		delete(o.done, o.through+1)
		o.through++
	}
	if ch, ok := o.waiters[o.through+1]; ok {
		delete(o.waiters, o.through+1)
		close(ch)
	}
}
