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

// RequestInfo is what a request says of itself beyond its tensors: its ID
// (V2's "id") and its own parameters (Triton's request parameters that
// are not reserved, and the headers --http-header-forward-pattern and
// --grpc-header-forward-pattern forward), as a JSON object. A backend
// that hands these to the model reads them from the request's context (a
// Python model's request.request_id() and request.parameters()); an
// ensemble's steps see their request's.
type RequestInfo struct {
	ID         string
	Parameters string // a JSON object; "" when the request has none
}

// requestInfoKey carries a request's RequestInfo in its context.
type requestInfoKey struct{}

// WithRequestInfo returns ctx carrying ri.
func WithRequestInfo(ctx context.Context, ri RequestInfo) context.Context {
	return context.WithValue(ctx, requestInfoKey{}, ri)
}

// RequestInfoOf returns the RequestInfo ctx carries; ok is false when it
// carries none.
func RequestInfoOf(ctx context.Context) (ri RequestInfo, ok bool) {
	ri, ok = ctx.Value(requestInfoKey{}).(RequestInfo)
	return ri, ok
}
