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
// Methods that stream (api.StreamMethod: agent.send, agent.attach,
// agent.events, daemon.watch, inbox.follow, agent.shell) first write any
// number of frames, {"id":1,"frame":{...}}, then the final line. A
// result too long for one line (a list of 10,000 agents) comes in parts:
// lines {"id":1,"part":"<a piece of the result's JSON text>"}, then the
// final {"id":1,"parts":N}; the client joins the pieces. No answer is
// bounded by the line limit. A request line longer than MaxLine gets an
// error reply and the connection is closed. Requests on one connection are handled one at a time; clients
// that want concurrency open more connections.
//
// Both ends speak through the method descriptors of package api: a
// client calls Call(ctx, c, api.AgentInspect, api.RefParams{Ref: "lead"})
// (Stream for an api.StreamMethod) and the daemon serves with
// Handle(s, api.AgentInspect, h), so params, frames and results that do
// not match their method fail to compile.
package rpc

import (
	"encoding/json"

	"github.com/substrat/substrat/supervisor/api"
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
	Error  *api.Error      `json:"error,omitempty"`
	// Part is a piece of a result sent in parts; Parts, on the final
	// line, says how many there were.
	Part  string `json:"part,omitempty"`
	Parts int    `json:"parts,omitempty"`
}

// PartSize is the most result bytes one part line carries: escaped as a
// JSON string (at most six bytes for one) it stays under MaxLine.
const PartSize = 128 << 10

// MaxResult bounds a result a client takes in parts.
const MaxResult = 1 << 30
