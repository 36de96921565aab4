// Package apierror is the one error shape of fw's HTTP APIs (the model
// server and the dashboard): every non-2xx response is
// {"error": {"code": "...", "message": "...", "details": ...}}.
package apierror

import (
	"encoding/json"
	"strconv"

	"github.com/valyala/fasthttp"
)

// Error is an API error: its HTTP status, a stable machine-readable code, a
// message that says how to fix the request, and optional details.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Details any    `json:"details,omitempty"`
	// RetryAfter, in seconds, is sent as the Retry-After header when positive.
	RetryAfter int `json:"-"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// New returns an error with the given status, code, message and details.
func New(status int, code, msg string, details any) *Error {
	return &Error{Status: status, Code: code, Message: msg, Details: details}
}

// Write sends e in the error shape, with Retry-After and, for 401,
// WWW-Authenticate.
func Write(ctx *fasthttp.RequestCtx, e *Error) {
	body, err := json.Marshal(struct {
		Error *Error `json:"error"`
	}{e})
	if err != nil {
		body = []byte(`{"error":{"code":"internal","message":"could not encode the error"}}`)
	}
	ctx.Response.Header.SetContentType("application/json")
	if e.RetryAfter > 0 {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	if e.Status == fasthttp.StatusUnauthorized {
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="fw"`)
	}
	ctx.SetStatusCode(e.Status)
	ctx.SetBody(body)
}

// WriteJSON encodes v with encoding/json (for small, cold responses); an
// encoding failure becomes a 500 in the error shape.
func WriteJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		Write(ctx, New(fasthttp.StatusInternalServerError, "internal", "could not encode the response: "+err.Error(), nil))
		return
	}
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetStatusCode(status)
	ctx.SetBody(b)
}
