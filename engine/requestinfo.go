package engine

import (
	"context"
	"errors"
	"sync/atomic"
)

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

// ResponseSink receives what a model says of its answer beyond its
// tensors: its response parameters (a Python model's
// InferenceResponse(parameters=...)), as a JSON object. A transport puts one
// in a request's context (WithResponseSink) and reads it once the request
// is answered; a backend that has such parameters sets them. Safe for
// concurrent use: an ensemble's steps share their request's.
type ResponseSink struct{ params atomic.Pointer[string] }

// SetParameters records the answer's parameters (a JSON object).
func (s *ResponseSink) SetParameters(js string) { s.params.Store(&js) }

// Parameters are the answer's parameters; "" when the model gave none.
func (s *ResponseSink) Parameters() string {
	if p := s.params.Load(); p != nil {
		return *p
	}
	return ""
}

// responseSinkKey carries a request's ResponseSink in its context.
type responseSinkKey struct{}

// WithResponseSink returns ctx carrying a new sink, and the sink.
func WithResponseSink(ctx context.Context) (context.Context, *ResponseSink) {
	s := &ResponseSink{}
	return context.WithValue(ctx, responseSinkKey{}, s), s
}

// WithoutResponseSink returns ctx carrying no sink: for the models an
// ensemble runs, whose response parameters are not its answer's.
func WithoutResponseSink(ctx context.Context) context.Context {
	if ResponseSinkOf(ctx) == nil {
		return ctx
	}
	return context.WithValue(ctx, responseSinkKey{}, (*ResponseSink)(nil))
}

// ResponseSinkOf is the sink ctx carries, or nil.
func ResponseSinkOf(ctx context.Context) *ResponseSink {
	s, _ := ctx.Value(responseSinkKey{}).(*ResponseSink)
	return s
}

// ModelAnswer is implemented by an error a model itself answered for a
// request (a Python model's InferenceResponse(error=TritonError(...))):
// ok reports whether it is one; code is Triton's TRITONSERVER_Error_Code
// (0 UNKNOWN, 1 INTERNAL, 2 NOT_FOUND, 3 INVALID_ARG, 4 UNAVAILABLE,
// 5 UNSUPPORTED, 6 ALREADY_EXISTS, 7 CANCELLED). The transports pass msg on
// unchanged, with the status code maps to, as Triton's do.
type ModelAnswer interface {
	ModelAnswer() (code int, msg string, ok bool)
}

// isAnswer reports whether err is (or wraps) an error the model answered.
func isAnswer(err error) bool {
	var ma ModelAnswer
	if errors.As(err, &ma) {
		_, _, ok := ma.ModelAnswer()
		return ok
	}
	return false
}
