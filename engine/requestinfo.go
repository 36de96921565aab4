package engine

import "context"

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
