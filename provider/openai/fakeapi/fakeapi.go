// Package fakeapi is a loopback fake of an OpenAI-compatible
// chat-completions endpoint (POST /v1/chat/completions, streamed), for
// tests that drive the openai provider under a real daemon. It records
// every request and answers each with what a test's Reply function
// scripts, as server-sent events the way OpenAI streams them: the role,
// content deltas, tool calls in pieces (index, id, name, then the
// arguments), a finish reason, a usage event, and [DONE].
//
// With a context window set (SetWindow), it plays a server with a small
// model: a request over the window (its bytes / 4) is answered 400 with
// OpenAI's context_length_exceeded, not recorded, and counted
// (Overflows); the usage it reports counts prompt tokens the same way.
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

// Message is one message of a request.
type Message struct {
	Role       string     `json:"role"`
	Content    *string    `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// Text returns the content, "" for none.
func (m Message) Text() string {
	if m.Content == nil {
		return ""
	}
	return *m.Content
}

// ToolCall is a call in an assistant message.
type ToolCall struct {
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Request is one recorded request.
type Request struct {
	Model    string    `json:"model"`
	Messages []Message `json:"messages"`
	Tools    []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

// System returns the system message's text.
func (r Request) System() string {
	for _, m := range r.Messages {
		if m.Role == "system" {
			return m.Text()
		}
	}
	return ""
}

// Last returns the last message.
func (r Request) Last() Message {
	if len(r.Messages) == 0 {
		return Message{}
	}
	return r.Messages[len(r.Messages)-1]
}

// ToolNames lists the tools offered.
func (r Request) ToolNames() []string {
	var out []string
	for _, t := range r.Tools {
		out = append(out, t.Function.Name)
	}
	return out
}

// Conversation returns every message's role and text, one a line.
func (r Request) Conversation() string {
	var b strings.Builder
	for _, m := range r.Messages {
		fmt.Fprintf(&b, "%s: %s\n", m.Role, m.Text())
		for _, c := range m.ToolCalls {
			fmt.Fprintf(&b, "%s: call %s %s %s\n", m.Role, c.ID, c.Function.Name, c.Function.Arguments)
		}
	}
	return b.String()
}

// Call is a scripted tool call.
type Call struct {
	ID, Name, Args string
}

// Out is a scripted answer: text, or calls, or an HTTP error status.
type Out struct {
	Text   string
	Calls  []Call
	Status int
	// Header is sent with an error status (Retry-After, rate-limit
	// reset headers).
	Header http.Header
}

// Server is the fake.
type Server struct {
	URL string // the base URL, with /v1
	srv *httptest.Server

	mu        sync.Mutex
	reply     func(Request) Out
	requests  []Request
	window    int
	overflows int
}

// SetWindow sets the context window, in tokens (0: none).
func (s *Server) SetWindow(tokens int) {
	s.mu.Lock()
	s.window = tokens
	s.mu.Unlock()
}

// Overflows returns how many requests were over the window.
func (s *Server) Overflows() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.overflows
}

// New starts a fake answering with reply. Close it when done.
func New(reply func(Request) Out) *Server {
	s := &Server{reply: reply}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL + "/v1"
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Requests returns the requests so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, `{"error":{"message":"not in the fake"}}`, http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var req Request
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	prompt := 50
	s.mu.Lock()
	if s.window > 0 {
		prompt = len(body) / 4
		if prompt > s.window {
			s.overflows++
			window := s.window
			s.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":{"message":"This model's maximum context length is %d tokens. However, your messages resulted in %d tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, window, prompt)
			return
		}
	}
	s.requests = append(s.requests, req)
	reply := s.reply
	s.mu.Unlock()
	out := reply(req)
	if out.Status != 0 && out.Status != http.StatusOK {
		w.Header().Set("Content-Type", "application/json")
		for k, v := range out.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(out.Status)
		fmt.Fprintf(w, `{"error":{"message":"scripted status %d","type":"server_error"}}`, out.Status)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	ev := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"choices": []map[string]any{{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	ev(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	if out.Text != "" {
		half := len(out.Text) / 2
		ev(chunk(map[string]any{"content": out.Text[:half]}, nil))
		ev(chunk(map[string]any{"content": out.Text[half:]}, nil))
	}
	for i, c := range out.Calls {
		ev(chunk(map[string]any{"tool_calls": []map[string]any{{"index": i, "id": c.ID, "type": "function",
			"function": map[string]string{"name": c.Name, "arguments": ""}}}}, nil))
		half := len(c.Args) / 2
		for _, piece := range []string{c.Args[:half], c.Args[half:]} {
			ev(chunk(map[string]any{"tool_calls": []map[string]any{{"index": i, "function": map[string]string{"arguments": piece}}}}, nil))
		}
	}
	finish := "stop"
	if len(out.Calls) > 0 {
		finish = "tool_calls"
	}
	ev(chunk(map[string]any{}, finish))
	ev(map[string]any{"choices": []any{}, "usage": map[string]int{"prompt_tokens": prompt, "completion_tokens": 10, "total_tokens": prompt + 10}})
	fmt.Fprint(w, "data: [DONE]\n\n")
}
