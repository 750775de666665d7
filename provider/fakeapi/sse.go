// Package fakeapi holds loopback fakes of the model APIs that the
// provider CLIs and the openai provider talk to, for tests that run them
// for real and offline: the Anthropic Messages API (Claude Code), the
// OpenAI Responses API (Codex), the Gemini API (Gemini CLI) and an
// OpenAI-compatible chat-completions endpoint (the openai provider). A
// file per API; each fake records every request and answers it with what
// a test's reply function scripts, streamed as server-sent events the way
// the API streams them.
//
// The fakes share one server (this file): the recording, the reply
// function, the tokens served, and the event stream.
package fakeapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
)

// Call is a scripted tool call of the model: ID (the API's call id; the
// Gemini API has none), Name, Namespace (the Responses API's namespace
// of an MCP server's tools, "mcp__<server>"; the others have none) and
// Args, the arguments as JSON.
type Call struct {
	ID, Name, Namespace, Args string
}

// server is what every fake has: an HTTP server on loopback, the reply
// function, the requests recorded, and the tokens served.
type server[R, O any] struct {
	// URL is the fake's base URL.
	URL string
	srv *httptest.Server

	mu     sync.Mutex // guards the fields below
	reply  func(R) O
	reqs   []R
	served Usage
}

// start starts s on loopback with the handler serve; its URL is the
// server's with path appended ("/v1", or "").
func (s *server[R, O]) start(reply func(R) O, serve http.HandlerFunc, path string) {
	s.reply = reply
	s.srv = httptest.NewServer(serve)
	s.URL = s.srv.URL + path
}

// Close stops the server.
func (s *server[R, O]) Close() { s.srv.Close() }

// SetReply replaces the reply function.
func (s *server[R, O]) SetReply(reply func(R) O) {
	s.mu.Lock()
	s.reply = reply
	s.mu.Unlock()
}

// Requests returns the requests recorded so far.
func (s *server[R, O]) Requests() []R {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]R(nil), s.reqs...)
}

// answer records req and returns the scripted answer, and how many
// requests are recorded with it.
func (s *server[R, O]) answer(req R) (O, int) {
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	n := len(s.reqs)
	reply := s.reply
	s.mu.Unlock()
	return reply(req), n
}

// serve counts u as served.
func (s *server[R, O]) serve(u Usage) {
	s.mu.Lock()
	s.served.Add(u)
	s.mu.Unlock()
}

// servedUsage returns the sum of the usage of every answer served so
// far: what the API would bill.
func (s *server[R, O]) servedUsage() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served
}

// stream begins a server-sent event stream on w and returns the function
// that sends one event: an "event: NAME" line when name is set, then
// "data: " and data as JSON (a string as it is), flushed.
func stream(w http.ResponseWriter) func(name string, data any) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	return func(name string, data any) {
		if name != "" {
			fmt.Fprintf(w, "event: %s\n", name)
		}
		b, ok := data.(string)
		if !ok {
			j, _ := json.Marshal(data)
			b = string(j)
		}
		fmt.Fprintf(w, "data: %s\n\n", b)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
}

// fail answers with an HTTP error status and a JSON body, with header's
// fields (Retry-After...).
func fail(w http.ResponseWriter, status int, header http.Header, body string) {
	w.Header().Set("Content-Type", "application/json")
	for k, v := range header {
		w.Header()[k] = v
	}
	w.WriteHeader(status)
	fmt.Fprint(w, body)
}
