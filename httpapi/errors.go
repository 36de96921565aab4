package httpapi

import (
	"encoding/json"
	"strconv"

	"github.com/valyala/fasthttp"
)

// Error codes of the one error shape every non-2xx response uses:
// {"error": {"code": "...", "message": "...", "details": ...}}.
const (
	CodeInvalidJSON      = "invalid_json"           // 400
	CodeBadRequest       = "bad_request"            // 400
	CodeBadImage         = "bad_image"              // 400
	CodeUnauthorized     = "unauthorized"           // 401
	CodeNotFound         = "not_found"              // 404
	CodeMethodNotAllowed = "method_not_allowed"     // 405
	CodeTooLarge         = "payload_too_large"      // 413
	CodeUnsupportedMedia = "unsupported_media_type" // 415
	CodeInvalidInput     = "invalid_input"          // 422
	CodeEngine           = "engine_error"           // 500
	CodeOverloaded       = "overloaded"             // 503
	CodeNotReady         = "not_ready"              // 503
	CodeTimeout          = "timeout"                // 504
)

// APIError is an error that knows its HTTP status and public code.
type APIError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Details any    `json:"details,omitempty"`
	// RetryAfter, in seconds, is sent as the Retry-After header when positive.
	RetryAfter int `json:"-"`
}

func (e *APIError) Error() string { return e.Code + ": " + e.Message }

func newError(status int, code, msg string, details any) *APIError {
	return &APIError{Status: status, Code: code, Message: msg, Details: details}
}

// writeError sends the error shape with its status.
func writeError(ctx *fasthttp.RequestCtx, e *APIError) {
	body, err := json.Marshal(struct {
		Error *APIError `json:"error"`
	}{e})
	if err != nil {
		body = []byte(`{"error":{"code":"engine_error","message":"could not encode the error"}}`)
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
