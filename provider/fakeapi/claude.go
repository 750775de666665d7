// The Anthropic Messages API, for tests that run the real Claude Code CLI
// (ANTHROPIC_BASE_URL points at it). Each POST /v1/messages is answered
// with what the test's reply function scripts, streamed in the order the
// CLI reads the events: message_start; per block content_block_start, its
// deltas, content_block_stop; message_delta with the stop reason;
// message_stop.

package fakeapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// ClaudeRequest is one recorded POST /v1/messages.
type ClaudeRequest struct {
	Model    string          `json:"model"`
	System   json.RawMessage `json:"system"`
	Messages []ClaudeMessage `json:"messages"`
	Tools    []struct {
		Name string `json:"name"`
	} `json:"tools"`
	Stream bool `json:"stream"`
	// Raw is the whole body.
	Raw json.RawMessage `json:"-"`
}

// ToolNames lists the names of the tools the request offers.
func (r ClaudeRequest) ToolNames() []string {
	var out []string
	for _, t := range r.Tools {
		out = append(out, t.Name)
	}
	return out
}

// ClaudeMessage is one message of a request.
type ClaudeMessage struct {
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
func (m ClaudeMessage) Blocks() []Block {
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
func (m ClaudeMessage) Text() string {
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
func (r ClaudeRequest) Last() ClaudeMessage {
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
	return ClaudeMessage{}
}

// Conversation returns the text of every message, in order, one per line.
func (r ClaudeRequest) Conversation() string {
	var b strings.Builder
	for _, m := range r.Messages {
		fmt.Fprintf(&b, "%s: %s\n", m.Role, m.Text())
	}
	return b.String()
}

// ClaudeOut is a scripted answer.
type ClaudeOut struct {
	// Text, if set, is the answer's text block.
	Text string
	// ToolUse, if set, is a tool_use block after the text (ID, Name,
	// Args); the stop reason is then tool_use.
	ToolUse *Call
	// Status, if not 0 or 200, answers with this HTTP error instead.
	Status int
	// Usage, if set, is the answer's usage; default 100 input and 20
	// output tokens.
	Usage *Usage
}

// Usage is the token usage of one answer, as the Messages API reports
// it.
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

// Claude is the fake Messages API.
type Claude struct {
	server[ClaudeRequest, ClaudeOut]
	other []string // guarded by mu
}

// NewClaude starts a fake that answers with reply. Close it when done.
func NewClaude(reply func(ClaudeRequest) ClaudeOut) *Claude {
	s := &Claude{}
	s.start(reply, s.handle, "")
	return s
}

// Served returns the sum of the usage of every answer served so far: what
// the API would bill.
func (s *Claude) Served() Usage { return s.servedUsage() }

// Other returns the other requests, as "METHOD PATH".
func (s *Claude) Other() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.other...)
}

func (s *Claude) handle(w http.ResponseWriter, r *http.Request) {
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
	var req ClaudeRequest
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req.Raw = body
	out, n := s.answer(req)
	if out.Status != 0 && out.Status != http.StatusOK {
		fail(w, out.Status, nil, fmt.Sprintf(`{"type":"error","error":{"type":"api_error","message":"scripted status %d"}}`, out.Status))
		return
	}
	u := Usage{InputTokens: 100, OutputTokens: 20}
	if out.Usage != nil {
		u = *out.Usage
	}
	s.serve(u)
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
			content = append(content, map[string]any{"type": "tool_use", "id": tu.ID, "name": tu.Name, "input": json.RawMessage(tu.Args)})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": id, "type": "message", "role": "assistant", "model": req.Model,
			"content": content, "stop_reason": stop, "stop_sequence": nil,
			"usage": u})
		return
	}
	ev := stream(w)
	ev("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": req.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": Usage{InputTokens: u.InputTokens, OutputTokens: 1,
			CacheCreationInputTokens: u.CacheCreationInputTokens, CacheReadInputTokens: u.CacheReadInputTokens}}})
	idx := 0
	block := func(start map[string]any, delta string, text string) {
		ev("content_block_start", map[string]any{"type": "content_block_start", "index": idx, "content_block": start})
		half := len(text) / 2
		key := map[string]string{"text_delta": "text", "input_json_delta": "partial_json"}[delta]
		for _, piece := range []string{text[:half], text[half:]} {
			ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": idx, "delta": map[string]any{"type": delta, key: piece}})
		}
		ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": idx})
		idx++
	}
	if out.Text != "" {
		block(map[string]any{"type": "text", "text": ""}, "text_delta", out.Text)
	}
	if tu := out.ToolUse; tu != nil {
		block(map[string]any{"type": "tool_use", "id": tu.ID, "name": tu.Name, "input": map[string]any{}}, "input_json_delta", tu.Args)
	}
	ev("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]int64{"output_tokens": u.OutputTokens}})
	ev("message_stop", map[string]any{"type": "message_stop"})
}
