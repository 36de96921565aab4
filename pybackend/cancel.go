package pybackend

import (
	"context"
	"sync"
)

// cancelKey carries a request's soft cancellation in its context.
type cancelKey struct{}

// withCancelRequest returns a context under which a request can be asked
// to stop without being ended: Triton's BLS response iterator's cancel(),
// after which the callee is told (is_cancelled() turns true) and its
// responses, the last one included, still come back. stop may be called
// any number of times.
func withCancelRequest(ctx context.Context) (context.Context, func()) {
	ch := make(chan struct{})
	var once sync.Once
	return context.WithValue(ctx, cancelKey{}, ch), func() { once.Do(func() { close(ch) }) }
}

// cancelRequested returns the channel closed when ctx's request was asked
// to stop (nil when it cannot be).
func cancelRequested(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(cancelKey{}).(chan struct{})
	return ch
}
