package api

import (
	"errors"
	"fmt"
)

// Error codes.
const (
	CodeParse          = "parse_error"       // the line is not JSON
	CodeTooLong        = "line_too_long"     // the line exceeds MaxLine
	CodeUnknownMethod  = "unknown_method"    // no such method
	CodeInvalidParams  = "invalid_params"    // params do not fit the method
	CodeNotFound       = "not_found"         // no such agent, message...
	CodeAmbiguous      = "ambiguous"         // a ref matches several agents
	CodeConflict       = "conflict"          // the request clashes with the state
	CodeInvalidRequest = "invalid_request"   // well-formed but not allowed
	CodeInternal       = "internal"          // the daemon failed; see its log
	CodeUnavailable    = "unavailable"       // shutting down, or a disk error
	CodePermission     = "permission_denied" // wrong peer uid
)

// Error is the error of a method: the core returns it, the socket carries
// it, and the CLI prints it. Hint, when set, tells the user what to do.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// AsError returns err as an *Error, wrapping a plain error as internal.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}
