// Package fault is the one error type of the dashboard's packages (store,
// jobs, registry): a stable code clients match on, a message that says how
// to fix the request, optional details, the cause, and a Kind that says what
// went wrong without naming a transport. The dashboard's API maps Kinds to
// HTTP statuses in one place (dashboard/api/errors.go).
package fault

import (
	"errors"
	"fmt"
)

// Kind is what went wrong.
type Kind int

// Kinds. The zero value is Internal: an error nobody classified is the
// server's fault, never the client's.
const (
	Internal      Kind = iota // the server failed (HTTP 500)
	BadRequest                // the request is malformed (400)
	Unprocessable             // well-formed, but its content cannot be done (422)
	NotFound                  // what it names does not exist (404)
	Conflict                  // it clashes with the current state (409)
	TooLarge                  // it is bigger than allowed (413)
	Unavailable               // the service cannot take it now, retry (503)
)

// Code is a stable error code (part of the HTTP API: clients match on it).
type Code string

// Error is the dashboard's error: see the package comment.
type Error struct {
	Kind Kind
	Code Code
	Msg  string
	// Details, when not nil, travel with the message (a list of problems,
	// the parameter at fault...).
	Details any
	// Err is the underlying cause, if any.
	Err error
}

// New returns an error of kind with code and message.
func New(kind Kind, code Code, msg string) *Error {
	return &Error{Kind: kind, Code: code, Msg: msg}
}

// Newf is New with a formatted message.
func Newf(kind Kind, code Code, format string, a ...any) *Error {
	return &Error{Kind: kind, Code: code, Msg: fmt.Sprintf(format, a...)}
}

// Error implements error: "code: message[: cause]".
func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Msg, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Msg)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// As returns err's *Error, or nil when it carries none.
func As(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}
