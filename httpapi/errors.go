package httpapi

import (
	"github.com/fw-serve/fw/internal/apierror"
	"github.com/valyala/fasthttp"
)

// Error codes of the one error shape every non-2xx response uses:
// {"error": {"code": "...", "message": "...", "details": ...}}, with the
// status each has on fw's routes. The /v2 routes answer Triton's statuses
// (v2Status), and where Triton answers 500 for a request it refuses, so do
// they, with the code saying the request is at fault (bad_request,
// load_failed).
const (
	CodeInvalidJSON      = "invalid_json"           // 400
	CodeBadRequest       = "bad_request"            // 400
	CodeBadImage         = "bad_image"              // 400
	CodeUnauthorized     = "unauthorized"           // 401
	CodeForbidden        = "forbidden"              // 403
	CodeNotFound         = "not_found"              // 404
	CodeLoadFailed       = "load_failed"            // 400
	CodeControlDisabled  = "control_disabled"       // 400
	CodeNotImplemented   = "not_implemented"        // 501
	CodeMethodNotAllowed = "method_not_allowed"     // 405
	CodeTooLarge         = "payload_too_large"      // 413
	CodeUnsupportedMedia = "unsupported_media_type" // 415
	CodeInvalidInput     = "invalid_input"          // 422
	CodeEngine           = "engine_error"           // 500
	CodeModelError       = "model_error"            // 500
	CodeInternal         = "internal"               // 500
	CodeOverloaded       = "overloaded"             // 503
	CodeNotReady         = "not_ready"              // 503
	CodeTimeout          = "timeout"                // 504
)

// v2Status is an error's status on the /v2 routes, which answer as Triton
// does: fw's 413 (too large) and 422 (invalid input) are Triton's
// INVALID_ARG, 400.
func v2Status(status int) int {
	if status == fasthttp.StatusRequestEntityTooLarge || status == fasthttp.StatusUnprocessableEntity {
		return fasthttp.StatusBadRequest
	}
	return status
}

// APIError is an error that knows its HTTP status and public code.
type APIError = apierror.Error

func newError(status int, code, msg string, details any) *APIError {
	return apierror.New(status, code, msg, details)
}

// writeError sends the error shape with its status.
func writeError(ctx *fasthttp.RequestCtx, e *APIError) { apierror.Write(ctx, e) }
