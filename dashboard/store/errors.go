package store

import (
	"errors"
	"fmt"

	"github.com/fw-serve/fw/dashboard/fault"
)

// Code is a stable error code (part of the HTTP API: clients match on it).
type Code = fault.Code

// Error codes. Per-event codes appear in ApplyResult.Errors; the others are
// returned as *Error.
const (
	// CodeInvalidJSON: an event is not a JSON object of the event shape.
	CodeInvalidJSON Code = "invalid_json"
	// CodeInvalidType: a field has the wrong JSON type, e.g. a string where
	// a number is required ("NaN", "Infinity", "-Infinity" are numbers).
	CodeInvalidType Code = "invalid_type"
	// CodeInvalidEvent: unknown type, missing or out-of-range field.
	CodeInvalidEvent Code = "invalid_event"
	// CodeInvalidID: a run ID breaks ValidateID.
	CodeInvalidID Code = "invalid_id"
	// CodeInvalidName: an experiment or run name breaks ValidateName.
	CodeInvalidName Code = "invalid_name"
	// CodeInvalidKey: a metric, param or tag key breaks ValidateKey, or a
	// value has control characters or is too long.
	CodeInvalidKey Code = "invalid_key"
	// CodeInvalidPath: a checkpoint or artifact path breaks ValidateRelPath.
	CodeInvalidPath Code = "invalid_path"
	// CodeUnknownRun: the run has no run_start (yet).
	CodeUnknownRun Code = "unknown_run"
	// CodeRunConflict: run_start for an existing run of another experiment.
	CodeRunConflict Code = "run_conflict"
	// CodeParamConflict: a param logged again with a different value.
	CodeParamConflict Code = "param_conflict"
	// CodeInvalidTransition: a status change the lifecycle does not allow.
	CodeInvalidTransition Code = "invalid_transition"
	// CodeBatchTooLarge: more than MaxBatchEvents events or MaxBatchValues
	// values; the whole batch is refused.
	CodeBatchTooLarge Code = "batch_too_large"
	// CodeNotFound: no such experiment or run.
	CodeNotFound Code = "not_found"
	// CodeConflict: a unique name is taken.
	CodeConflict Code = "conflict"
	// CodeInvalidArgument: a bad query argument (filter, sort, cursor...).
	CodeInvalidArgument Code = "invalid_argument"
	// CodeClosed: the store is closed.
	CodeClosed Code = "closed"
)

// Error is the store's error: the dashboard's one error type (fault.Error),
// its Kind set from its Code by storeErr.
type Error = fault.Error

// storeErr is an *Error with the Kind its store code means.
func storeErr(code Code, msg string, cause error) *Error {
	return &Error{Kind: kindOf(code), Code: code, Msg: msg, Err: cause}
}

// kindOf classifies the store's codes.
func kindOf(code Code) fault.Kind {
	switch code {
	case CodeNotFound:
		return fault.NotFound
	case CodeConflict, CodeRunConflict, CodeParamConflict, CodeInvalidTransition:
		return fault.Conflict
	case CodeBatchTooLarge:
		return fault.TooLarge
	case CodeClosed:
		return fault.Unavailable
	case "":
		return fault.Internal
	}
	return fault.BadRequest
}

// ErrorCode returns the code of err, or "" when it carries none.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func errf(code Code, format string, args ...any) *Error {
	return storeErr(code, fmt.Sprintf(format, args...), nil)
}

// EventError reports one refused event of a batch.
type EventError struct {
	// Index is the event's position in the batch.
	Index int    `json:"index"`
	Code  Code   `json:"code"`
	Msg   string `json:"message"`
	// RunID and Seq identify the event when known.
	RunID string `json:"run_id,omitempty"`
	Seq   int64  `json:"seq,omitempty"`
}

// Error implements error.
func (e *EventError) Error() string {
	return fmt.Sprintf("event %d: %s: %s", e.Index, e.Code, e.Msg)
}

// ApplyResult says what Apply did with a batch.
type ApplyResult struct {
	// Applied counts events written.
	Applied int `json:"applied"`
	// Duplicates counts events skipped because their seq was already applied.
	Duplicates int `json:"duplicates"`
	// Errors lists refused events; the others were applied.
	Errors []EventError `json:"errors,omitempty"`
	// Acked is, per run and writer, the highest seq applied so far (after
	// this batch): a client may drop everything up to it from its spool.
	Acked []Ack `json:"acked"`
}

// Ack is a per-(run, writer) high-water mark.
type Ack struct {
	RunID  string `json:"run_id"`
	Writer string `json:"writer"`
	Seq    int64  `json:"seq"`
}
