package engine

import "context"

// Correlation is a request's place in a sequence (Triton's sequence
// batcher): its correlation ID, numeric (ID) or a string (IDString), and
// whether it starts or ends the sequence. A backend that hands these to
// the model reads them from the request's context (a Python model's
// request.correlation_id() and flags()).
type Correlation struct {
	ID         uint64
	IDString   string
	Start, End bool
}

// correlationKey carries a request's Correlation in its context.
type correlationKey struct{}

// WithCorrelation returns ctx carrying c.
func WithCorrelation(ctx context.Context, c Correlation) context.Context {
	return context.WithValue(ctx, correlationKey{}, c)
}

// CorrelationOf returns the Correlation ctx carries; ok is false when it
// carries none (a request outside any sequence).
func CorrelationOf(ctx context.Context) (c Correlation, ok bool) {
	c, ok = ctx.Value(correlationKey{}).(Correlation)
	return c, ok
}
