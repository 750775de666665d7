// Package rpc is the daemon's wire protocol: newline-delimited JSON over a
// Unix socket.
//
// A client writes one request per line:
//
//	{"id":1,"method":"agent.list","params":{...}}
//
// and the server answers each with exactly one final line, either
//
//	{"id":1,"result":{...}}   or   {"id":1,"error":{"code":"not_found","message":"..."}}
//
// Methods that stream (agent.send, agent.attach, daemon.watch) first write
// any number of frames, {"id":1,"frame":{...}}, then the final line. A
// request line longer than MaxLine gets an error reply and the connection
// is closed. Requests on one connection are handled one at a time; clients
// that want concurrency open more connections.
package rpc

import (
	"encoding/json"
	"errors"
	"fmt"
)

// MaxLine is the longest request or response line, newline included.
const MaxLine = 1 << 20

// Request is one line from a client.
type Request struct {
	ID     uint64          `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// Response is one line from the server: a frame of a streaming call, or
// the final result or error.
type Response struct {
	ID     uint64          `json:"id"`
	Frame  json.RawMessage `json:"frame,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

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

// Error is an RPC error. Hint, when set, tells the user what to do.
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
