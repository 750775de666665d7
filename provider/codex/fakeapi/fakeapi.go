// Package fakeapi is a loopback fake of the OpenAI Responses API for the
// tests that run the real Codex CLI (its model provider's base_url points
// at it). It records every request and answers each with what a test's
// reply function scripts, streamed as the server-sent events the CLI
// reads: response.created, the output item (a message, or a function
// call), response.completed with usage.
package fakeapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// Request is one recorded POST /v1/responses.
type Request struct {
	Model string            `json:"model"`
	Input []json.RawMessage `json:"input"`
	Raw   string            `json:"-"`
}

// Text returns the texts of the request's input items, joined: the
// conversation as the model sees it.
func (r Request) Text() string { return r.Raw }

// Outputs returns the outputs of the function calls the request carries.
func (r Request) Outputs() []string {
	var out []string
	for _, raw := range r.Input {
		var it struct {
			Type   string          `json:"type"`
			Output json.RawMessage `json:"output"`
		}
		if json.Unmarshal(raw, &it) == nil && it.Type == "function_call_output" {
			out = append(out, string(it.Output))
		}
	}
	return out
}

// Out is a scripted answer.
type Out struct {
	Text string
	// Call, if set, is a function call instead of text: Name, in
	// Namespace (an MCP server's tools are in "mcp__<server>"), with Args.
	Call *Call
	// Status, if set, answers with that HTTP status and no stream.
	Status int
	// Garbage, if set, is written instead of the stream.
	Garbage string
	Usage   [2]int // input, output tokens; default 11, 7
}

// Call is a function call of the model.
type Call struct {
	ID, Name, Namespace, Args string
}

// Server is the fake.
type Server struct {
	URL string
	srv *httptest.Server

	mu     sync.Mutex
	reply  func(Request) Out
	reqs   []Request
	served [2]int // input, output tokens of the answers served
}

// New starts a fake on loopback.
func New(reply func(Request) Out) *Server {
	s := &Server{reply: reply}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL + "/v1"
	return s
}

// Close stops it.
func (s *Server) Close() { s.srv.Close() }

// Served returns the input and output tokens of every answer served so
// far: what the API would bill.
func (s *Server) Served() [2]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served
}

// Requests returns what was asked so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/responses") {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	var req Request
	json.Unmarshal(body, &req)
	req.Raw = string(body)
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	reply := s.reply
	s.mu.Unlock()
	out := reply(req)
	if out.Status != 0 {
		http.Error(w, `{"error":{"message":"scripted failure"}}`, out.Status)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	if out.Garbage != "" {
		fmt.Fprint(w, out.Garbage)
		return
	}
	in, outTok := out.Usage[0], out.Usage[1]
	if in == 0 && outTok == 0 {
		in, outTok = 11, 7
	}
	s.mu.Lock()
	s.served[0] += in
	s.served[1] += outTok
	s.mu.Unlock()
	n := len(s.Requests())
	ev := func(v map[string]any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", v["type"], b)
	}
	ev(map[string]any{"type": "response.created", "response": map[string]any{"id": fmt.Sprintf("resp_%d", n)}})
	var itm map[string]any
	if c := out.Call; c != nil {
		itm = map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%d", n), "call_id": c.ID, "name": c.Name, "arguments": c.Args}
		if c.Namespace != "" {
			itm["namespace"] = c.Namespace
		}
	} else {
		itm = map[string]any{"type": "message", "role": "assistant", "id": fmt.Sprintf("msg_%d", n),
			"content": []any{map[string]any{"type": "output_text", "text": out.Text, "annotations": []any{}}}}
	}
	ev(map[string]any{"type": "response.output_item.done", "output_index": 0, "item": itm})
	ev(map[string]any{"type": "response.completed", "response": map[string]any{"id": fmt.Sprintf("resp_%d", n),
		"usage": map[string]any{"input_tokens": in, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": outTok, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": in + outTok}}})
}
