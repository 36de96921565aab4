package api

import (
	"errors"
	"log/slog"

	"github.com/fw-serve/fw/dashboard/query"
	"github.com/fw-serve/fw/dashboard/store"
	"github.com/fw-serve/fw/internal/apierror"
	"github.com/valyala/fasthttp"
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

// storeStatus maps a store error code to its HTTP status.
func storeStatus(code store.Code) int {
	switch code {
	case store.CodeNotFound:
		return fasthttp.StatusNotFound
	case store.CodeConflict, store.CodeRunConflict, store.CodeParamConflict, store.CodeInvalidTransition:
		return fasthttp.StatusConflict
	case store.CodeBatchTooLarge:
		return fasthttp.StatusRequestEntityTooLarge
	case store.CodeClosed:
		return fasthttp.StatusServiceUnavailable
	case "":
		return fasthttp.StatusInternalServerError
	}
	return fasthttp.StatusBadRequest
}

// fromStore turns a store error into the error shape; errors without a code
// are logged and reported as internal without their text.
func fromStore(log *slog.Logger, err error) *Error {
	var se *store.Error
	if errors.As(err, &se) {
		if se.Code == store.CodeClosed {
			return apiErr(fasthttp.StatusServiceUnavailable, CodeUnavailable, "the dashboard is shutting down; retry against the next instance")
		}
		status := storeStatus(se.Code)
		if se.Err == nil || status >= 500 {
			return apiErr(status, string(se.Code), se.Msg)
		}
		// A refused request: the cause says how to fix it ("filter: expected
		// ')' at column 23"); a filter or sort error also carries its column.
		var qe *query.Error
		if errors.As(se.Err, &qe) {
			return apierror.New(status, string(se.Code), se.Msg+": "+se.Err.Error(),
				map[string]any{"field": se.Msg, "column": qe.Column, "reason": qe.Msg})
		}
		return apiErr(status, string(se.Code), se.Msg+": "+se.Err.Error())
	}
	log.Error("store failure", "err", err)
	return apiErr(fasthttp.StatusInternalServerError, CodeInternal, "the store failed; see the dashboard's log")
}

func writeError(ctx *fasthttp.RequestCtx, e *Error) { apierror.Write(ctx, e) }

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) { apierror.WriteJSON(ctx, status, v) }
