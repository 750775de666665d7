// Package fakeapi is a loopback fake of the Anthropic Messages API for
// tests that run the real Claude Code CLI (ANTHROPIC_BASE_URL points at
// it). It records every request and answers each with what a test's Reply
// function scripts, streamed as server-sent events in the order the CLI
// reads them: message_start; per block content_block_start, its deltas,
// content_block_stop; message_delta with the stop reason; message_stop.
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

// Request is one recorded POST /v1/messages.
type Request struct {
	Model    string          `json:"model"`
	System   json.RawMessage `json:"system"`
	Messages []Message       `json:"messages"`
	Tools    []struct {
		Name string `json:"name"`
	} `json:"tools"`
	Stream bool `json:"stream"`
	// Raw is the whole body.
	Raw json.RawMessage `json:"-"`
}

// ToolNames lists the names of the tools the request offers.
func (r Request) ToolNames() []string {
	var out []string
	for _, t := range r.Tools {
		out = append(out, t.Name)
	}
	return out
}

// Message is one message of a request.
type Message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// Block is a content block of a message.
type Block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

// Blocks returns the message's content as blocks (a string content is one
// text block).
func (m Message) Blocks() []Block {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return []Block{{Type: "text", Text: s}}
	}
	var bs []Block
	json.Unmarshal(m.Content, &bs)
	return bs
}

// Text returns the text of the message's text blocks, and of its tool
// results, joined.
func (m Message) Text() string {
	var parts []string
	for _, b := range m.Blocks() {
		switch b.Type {
		case "text":
			parts = append(parts, b.Text)
		case "tool_result":
			parts = append(parts, ResultText(b))
		}
	}
	return strings.Join(parts, "\n")
}

// ResultText returns the text of a tool_result block.
func ResultText(b Block) string {
	var s string
	if json.Unmarshal(b.Content, &s) == nil {
		return s
	}
	var bs []Block
	json.Unmarshal(b.Content, &bs)
	var parts []string
	for _, x := range bs {
		parts = append(parts, x.Text)
	}
	return strings.Join(parts, "\n")
}

// Last returns the last user message that is not only the CLI's own
// context (the CLI may append a message of environment notes after the
// prompt).
func (r Request) Last() Message {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		m := r.Messages[i]
		if m.Role != "user" {
			continue
		}
		if t := m.Text(); strings.HasPrefix(t, "# Environment\n") && i > 0 {
			continue
		}
		return m
	}
	return Message{}
}

// Conversation returns the text of every message, in order, one per line.
func (r Request) Conversation() string {
	var b strings.Builder
	for _, m := range r.Messages {
		fmt.Fprintf(&b, "%s: %s\n", m.Role, m.Text())
	}
	return b.String()
}

// Out is a scripted answer.
type Out struct {
	// Text, if set, is the answer's text block.
	Text string
	// ToolUse, if set, is a tool_use block after the text; the stop reason
	// is then tool_use.
	ToolUse *ToolUse
	// Status, if not 0 or 200, answers with this HTTP error instead.
	Status int
	// Usage, if set, is the answer's usage; default 100 input and 20
	// output tokens.
	Usage *Usage
}

// Usage is the token usage of one answer, as the API reports it.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// Add adds u to v.
func (v *Usage) Add(u Usage) {
	v.InputTokens += u.InputTokens
	v.OutputTokens += u.OutputTokens
	v.CacheCreationInputTokens += u.CacheCreationInputTokens
	v.CacheReadInputTokens += u.CacheReadInputTokens
}

// ToolUse is a scripted tool call.
type ToolUse struct {
	ID    string
	Name  string
	Input string // JSON
}

// Server is the fake.
type Server struct {
	URL string
	srv *httptest.Server

	mu       sync.Mutex
	reply    func(Request) Out
	requests []Request
	other    []string
	served   Usage
}

// New starts a fake that answers with reply. Close it when done.
func New(reply func(Request) Out) *Server {
	s := &Server{reply: reply}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// SetReply replaces the reply function.
func (s *Server) SetReply(reply func(Request) Out) {
	s.mu.Lock()
	s.reply = reply
	s.mu.Unlock()
}

// Requests returns the messages requests so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Served returns the sum of the usage of every answer served so far: what
// the API would bill.
func (s *Server) Served() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served
}

// Other returns the other requests, as "METHOD PATH".
func (s *Server) Other() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.other...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		s.mu.Lock()
		s.other = append(s.other, r.Method+" "+r.URL.Path)
		s.mu.Unlock()
		if r.URL.Path == "/v1/messages/count_tokens" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"input_tokens":10}`)
			return
		}
		http.Error(w, `{"type":"error","error":{"type":"not_found_error","message":"not in the fake"}}`, http.StatusNotFound)
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
	req.Raw = body
	s.mu.Lock()
	s.requests = append(s.requests, req)
	n := len(s.requests)
	reply := s.reply
	s.mu.Unlock()
	out := reply(req)
	if out.Status != 0 && out.Status != http.StatusOK {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(out.Status)
		fmt.Fprintf(w, `{"type":"error","error":{"type":"api_error","message":"scripted status %d"}}`, out.Status)
		return
	}
	u := Usage{InputTokens: 100, OutputTokens: 20}
	if out.Usage != nil {
		u = *out.Usage
	}
	s.mu.Lock()
	s.served.Add(u)
	s.mu.Unlock()
	id := fmt.Sprintf("msg_fake_%d", n)
	stop := "end_turn"
	if out.ToolUse != nil {
		stop = "tool_use"
	}
	if !req.Stream {
		var content []map[string]any
		if out.Text != "" {
			content = append(content, map[string]any{"type": "text", "text": out.Text})
		}
		if tu := out.ToolUse; tu != nil {
			content = append(content, map[string]any{"type": "tool_use", "id": tu.ID, "name": tu.Name, "input": json.RawMessage(tu.Input)})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": id, "type": "message", "role": "assistant", "model": req.Model,
			"content": content, "stop_reason": stop, "stop_sequence": nil,
			"usage": u})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	ev := func(typ string, data any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	ev("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": req.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": Usage{InputTokens: u.InputTokens, OutputTokens: 1,
			CacheCreationInputTokens: u.CacheCreationInputTokens, CacheReadInputTokens: u.CacheReadInputTokens}}})
	idx := 0
	if out.Text != "" {
		ev("content_block_start", map[string]any{"type": "content_block_start", "index": idx, "content_block": map[string]any{"type": "text", "text": ""}})
		half := len(out.Text) / 2
		for _, piece := range []string{out.Text[:half], out.Text[half:]} {
			ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": idx, "delta": map[string]any{"type": "text_delta", "text": piece}})
		}
		ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": idx})
		idx++
	}
	if tu := out.ToolUse; tu != nil {
		ev("content_block_start", map[string]any{"type": "content_block_start", "index": idx, "content_block": map[string]any{"type": "tool_use", "id": tu.ID, "name": tu.Name, "input": map[string]any{}}})
		half := len(tu.Input) / 2
		for _, piece := range []string{tu.Input[:half], tu.Input[half:]} {
			ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": idx, "delta": map[string]any{"type": "input_json_delta", "partial_json": piece}})
		}
		ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": idx})
	}
	ev("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]int64{"output_tokens": u.OutputTokens}})
	ev("message_stop", map[string]any{"type": "message_stop"})
}
