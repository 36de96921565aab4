package api

import (
	"errors"
	"log/slog"

	"github.com/valyala/fasthttp"

	"github.com/fw-serve/fw/dashboard/fault"
	"github.com/fw-serve/fw/dashboard/query"
	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/apierror"
)

// HTTP-level error codes; store codes (store.Code) pass through unchanged.
const (
	CodeBadRequest       = "bad_request"            // 400
	CodeUnauthorized     = "unauthorized"           // 401
	CodeNotFound         = "not_found"              // 404
	CodeMethodNotAllowed = "method_not_allowed"     // 405
	CodeTooLarge         = "payload_too_large"      // 413
	CodeConflict         = "conflict"               // 409
	CodeUnsupportedMedia = "unsupported_media_type" // 415
	CodeInternal         = "internal"               // 500
	CodeBadGateway       = "bad_gateway"            // 502
	CodeUnavailable      = "unavailable"            // 503
)

// Error is the one error shape of every non-2xx response:
// {"error": {"code": "...", "message": "...", "details": ...}}.
type Error = apierror.Error

func apiErr(status int, code, msg string) *Error {
	return apierror.New(status, code, msg, nil)
}

// statusOf maps what went wrong to its HTTP status: the one place where the
// errors of the dashboard's packages (store, jobs, registry: all
// fault.Error) meet HTTP.
func statusOf(k fault.Kind) int {
	switch k {
	case fault.BadRequest:
		return fasthttp.StatusBadRequest
	case fault.Unprocessable:
		return fasthttp.StatusUnprocessableEntity
	case fault.NotFound:
		return fasthttp.StatusNotFound
	case fault.Conflict:
		return fasthttp.StatusConflict
	case fault.TooLarge:
		return fasthttp.StatusRequestEntityTooLarge
	case fault.Unavailable:
		return fasthttp.StatusServiceUnavailable
	}
	return fasthttp.StatusInternalServerError
}

// fromError turns an error of the dashboard's packages into the error shape
// with the status its Kind means. Errors without a fault.Error, and internal
// ones, are logged and reported without their text.
func fromError(log *slog.Logger, err error) *Error {
	fe := fault.As(err)
	if fe == nil || fe.Kind == fault.Internal {
		log.Error("dashboard failure", "err", err)
		return apiErr(fasthttp.StatusInternalServerError, CodeInternal, "the dashboard failed on this request; see its log")
	}
	if fe.Code == store.CodeClosed {
		return apiErr(fasthttp.StatusServiceUnavailable, CodeUnavailable, "the dashboard is shutting down; retry against the next instance")
	}
	status, msg := statusOf(fe.Kind), fe.Msg
	if fe.Err != nil && fe.Kind == fault.BadRequest {
		// A refused request: the cause says how to fix it ("filter: expected
		// ')' at column 23"); a filter or sort error also carries its column.
		var qe *query.Error
		if errors.As(fe.Err, &qe) {
			return apierror.New(status, string(fe.Code), fe.Msg+": "+fe.Err.Error(),
				map[string]any{"field": fe.Msg, "column": qe.Column, "reason": qe.Msg})
		}
		msg += ": " + fe.Err.Error()
	}
	return apierror.New(status, string(fe.Code), msg, fe.Details)
}

func writeError(ctx *fasthttp.RequestCtx, e *Error) { apierror.Write(ctx, e) }

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) { apierror.WriteJSON(ctx, status, v) }
