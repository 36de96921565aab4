package httpapi

import (
	"github.com/fw-serve/fw/internal/apierror"
	"github.com/valyala/fasthttp"
)

// Error codes of the one error shape every non-2xx response uses:
// {"error": {"code": "...", "message": "...", "details": ...}}.
const (
	CodeInvalidJSON      = "invalid_json"           // 400
	CodeBadRequest       = "bad_request"            // 400
	CodeBadImage         = "bad_image"              // 400
	CodeUnauthorized     = "unauthorized"           // 401
	CodeForbidden        = "forbidden"              // 403
	CodeNotFound         = "not_found"              // 404
	CodeLoadFailed       = "load_failed"            // 400
	CodeControlDisabled  = "control_disabled"       // 400
	CodeMethodNotAllowed = "method_not_allowed"     // 405
	CodeTooLarge         = "payload_too_large"      // 413
	CodeUnsupportedMedia = "unsupported_media_type" // 415
	CodeInvalidInput     = "invalid_input"          // 422
	CodeEngine           = "engine_error"           // 500
	CodeInternal         = "internal"               // 500
	CodeOverloaded       = "overloaded"             // 503
	CodeNotReady         = "not_ready"              // 503
	CodeTimeout          = "timeout"                // 504
)

// APIError is an error that knows its HTTP status and public code.
type APIError = apierror.Error

func newError(status int, code, msg string, details any) *APIError {
	return apierror.New(status, code, msg, details)
}

// writeError sends the error shape with its status.
func writeError(ctx *fasthttp.RequestCtx, e *APIError) { apierror.Write(ctx, e) }
