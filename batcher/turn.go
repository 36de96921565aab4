package batcher

import (
	"context"
	"sync"
	"sync/atomic"
)

// turn orders the queueing of requests that come from one ordered source.
type turn struct {
	prev   <-chan struct{}
	queued func()
}

type turnKey struct{}

// WithTurn returns ctx under which Submit queues its request only once
// prev is closed, and calls queued as soon as the request is queued (or
// starts running at once): a source whose requests come in an order (a
// gRPC stream) chains them so that they reach the queue in that order,
// as Triton's stream does, instead of the order their goroutines happen
// to run in. A nil prev waits for nothing. queued may be called more
// than once (by an ensemble's step batchers too, and by the source when
// the request ends before any batcher); it must not block. A request
// refused before its queue, or retried on another batcher (a reload's),
// is released by its source, not here.
func WithTurn(ctx context.Context, prev <-chan struct{}, queued func()) context.Context {
	return context.WithValue(ctx, turnKey{}, &turn{prev: prev, queued: queued})
}

// awaitTurn waits for the turn ctx carries, if any, and returns it.
func awaitTurn(ctx context.Context) (*turn, error) {
	t, _ := ctx.Value(turnKey{}).(*turn)
	if t == nil || t.prev == nil {
		return t, nil
	}
	select {
	case <-t.prev:
		return t, nil
	case <-ctx.Done():
		return t, ctx.Err()
	}
}

// taken tells t's source that its request is queued; t may be nil.
func (t *turn) taken() {
	if t != nil && t.queued != nil {
		t.queued()
	}
}

// SplitTurn returns n contexts for the parts of one request that queue in
// n batchers side by side (an ensemble's first steps): each part awaits
// ctx's turn, and its source hears that the request is queued once every
// part has queued or been released (ReleaseTurn). Without a turn, or for
// n < 2, each context is ctx.
func SplitTurn(ctx context.Context, n int) []context.Context {
	out := make([]context.Context, max(n, 0))
	t, _ := ctx.Value(turnKey{}).(*turn)
	if t == nil || n < 2 {
		for i := range out {
			out[i] = ctx
		}
		return out
	}
	var left atomic.Int64
	left.Store(int64(n))
	for i := range out {
		var once sync.Once
		part := &turn{prev: t.prev, queued: func() {
			once.Do(func() {
				if left.Add(-1) == 0 {
					t.taken()
				}
			})
		}}
		out[i] = context.WithValue(ctx, turnKey{}, part)
	}
	return out
}

// ReleaseTurn tells the source of ctx's turn, if any, that this part of
// the request will queue no more (it ran without a queue, from a cache,
// or failed first): the source's next request need not wait for it.
func ReleaseTurn(ctx context.Context) {
	t, _ := ctx.Value(turnKey{}).(*turn)
	t.taken()
}

// passTurns tells the sources of reqs' turns that their requests are
// queued now that a call of PassTurn runs them together, without any
// one's context (a call of one request passes its turn to what it runs).
func (b *Batcher) passTurns(reqs []*request) {
	if !b.cfg.PassTurn || (b.cfg.RequestContext && len(reqs) == 1) {
		return
	}
	for _, r := range reqs {
		t, _ := r.ctx.Value(turnKey{}).(*turn)
		t.taken()
	}
}
