package batcher

import "context"

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
