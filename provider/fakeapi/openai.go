// An OpenAI-compatible chat-completions endpoint (POST
// /v1/chat/completions, streamed), for tests that drive the openai
// provider under a real daemon. Each request is answered with what the
// test's reply function scripts, as events the way OpenAI streams them:
// the role, content deltas, tool calls in pieces (index, id, name, then
// the arguments), a finish reason, a usage event, and [DONE].
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
	"strings"
)

// OpenAIMessage is one message of a request.
type OpenAIMessage struct {
	Role       string     `json:"role"`
	Content    *string    `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// Text returns the content, "" for none.
func (m OpenAIMessage) Text() string {
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

// OpenAIRequest is one recorded request.
type OpenAIRequest struct {
	Model    string          `json:"model"`
	Messages []OpenAIMessage `json:"messages"`
	Tools    []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

// System returns the system message's text.
func (r OpenAIRequest) System() string {
	for _, m := range r.Messages {
		if m.Role == "system" {
			return m.Text()
		}
	}
	return ""
}

// Last returns the last message.
func (r OpenAIRequest) Last() OpenAIMessage {
	if len(r.Messages) == 0 {
		return OpenAIMessage{}
	}
	return r.Messages[len(r.Messages)-1]
}

// ToolNames lists the tools offered.
func (r OpenAIRequest) ToolNames() []string {
	var out []string
	for _, t := range r.Tools {
		out = append(out, t.Function.Name)
	}
	return out
}

// Conversation returns every message's role and text, one a line.
func (r OpenAIRequest) Conversation() string {
	var b strings.Builder
	for _, m := range r.Messages {
		fmt.Fprintf(&b, "%s: %s\n", m.Role, m.Text())
		for _, c := range m.ToolCalls {
			fmt.Fprintf(&b, "%s: call %s %s %s\n", m.Role, c.ID, c.Function.Name, c.Function.Arguments)
		}
	}
	return b.String()
}

// OpenAIOut is a scripted answer: text, or calls (ID, Name, Args), or an
// HTTP error status.
type OpenAIOut struct {
	Text   string
	Calls  []Call
	Status int
	// Header is sent with an error status (Retry-After, rate-limit
	// reset headers).
	Header http.Header
}

// OpenAI is the fake chat-completions endpoint.
type OpenAI struct {
	server[OpenAIRequest, OpenAIOut]
	window    int // guarded by mu
	overflows int // guarded by mu
}

// NewOpenAI starts a fake answering with reply. Close it when done. Its
// URL ends in /v1.
func NewOpenAI(reply func(OpenAIRequest) OpenAIOut) *OpenAI {
	s := &OpenAI{}
	s.start(reply, s.handle, "/v1")
	return s
}

// SetWindow sets the context window, in tokens (0: none).
func (s *OpenAI) SetWindow(tokens int) {
	s.mu.Lock()
	s.window = tokens
	s.mu.Unlock()
}

// Overflows returns how many requests were over the window.
func (s *OpenAI) Overflows() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.overflows
}

// overflow reports whether a request of size bytes is over the window,
// and counts it if so; and returns its prompt tokens and the window.
func (s *OpenAI) overflow(size int) (over bool, prompt, window int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.window <= 0 {
		return false, 50, 0
	}
	prompt = size / 4
	if prompt > s.window {
		s.overflows++
		return true, prompt, s.window
	}
	return false, prompt, s.window
}

func (s *OpenAI) handle(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, `{"error":{"message":"not in the fake"}}`, http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var req OpenAIRequest
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	over, prompt, window := s.overflow(len(body))
	if over {
		fail(w, http.StatusBadRequest, nil, fmt.Sprintf(`{"error":{"message":"This model's maximum context length is %d tokens. However, your messages resulted in %d tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, window, prompt))
		return
	}
	out, _ := s.answer(req)
	if out.Status != 0 && out.Status != http.StatusOK {
		fail(w, out.Status, out.Header, fmt.Sprintf(`{"error":{"message":"scripted status %d","type":"server_error"}}`, out.Status))
		return
	}
	ev := stream(w)
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"choices": []map[string]any{{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	ev("", chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	if out.Text != "" {
		half := len(out.Text) / 2
		ev("", chunk(map[string]any{"content": out.Text[:half]}, nil))
		ev("", chunk(map[string]any{"content": out.Text[half:]}, nil))
	}
	for i, c := range out.Calls {
		ev("", chunk(map[string]any{"tool_calls": []map[string]any{{"index": i, "id": c.ID, "type": "function",
			"function": map[string]string{"name": c.Name, "arguments": ""}}}}, nil))
		half := len(c.Args) / 2
		for _, piece := range []string{c.Args[:half], c.Args[half:]} {
			ev("", chunk(map[string]any{"tool_calls": []map[string]any{{"index": i, "function": map[string]string{"arguments": piece}}}}, nil))
		}
	}
	finish := "stop"
	if len(out.Calls) > 0 {
		finish = "tool_calls"
	}
	ev("", chunk(map[string]any{}, finish))
	ev("", map[string]any{"choices": []any{}, "usage": map[string]int{"prompt_tokens": prompt, "completion_tokens": 10, "total_tokens": prompt + 10}})
	ev("", "[DONE]")
}
