// The OpenAI Responses API, for tests that run the real Codex CLI (its
// model provider's base_url points at it). Each POST .../responses is
// answered with what the test's reply function scripts, as the events the
// CLI reads: response.created, the output item (a message, or a function
// call), response.completed with usage.

package fakeapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// CodexRequest is one recorded POST /v1/responses.
type CodexRequest struct {
	Model string            `json:"model"`
	Input []json.RawMessage `json:"input"`
	Raw   string            `json:"-"`
}

// Text returns the texts of the request's input items, joined: the
// conversation as the model sees it.
func (r CodexRequest) Text() string { return r.Raw }

// Outputs returns the outputs of the function calls the request carries.
func (r CodexRequest) Outputs() []string {
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

// CodexOut is a scripted answer.
type CodexOut struct {
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

// Codex is the fake Responses API.
type Codex struct {
	server[CodexRequest, CodexOut]
}

// NewCodex starts a fake on loopback; its URL ends in /v1.
func NewCodex(reply func(CodexRequest) CodexOut) *Codex {
	s := &Codex{}
	s.start(reply, s.handle, "/v1")
	return s
}

// Served returns the input and output tokens of every answer served so
// far: what the API would bill.
func (s *Codex) Served() [2]int { return s.servedUsage().tokens() }

func (s *Codex) handle(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/responses") {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	var req CodexRequest
	json.Unmarshal(body, &req)
	req.Raw = string(body)
	out, n := s.answer(req)
	if out.Status != 0 {
		http.Error(w, `{"error":{"message":"scripted failure"}}`, out.Status)
		return
	}
	ev := stream(w)
	if out.Garbage != "" {
		fmt.Fprint(w, out.Garbage)
		return
	}
	in, outTok := tokens(out.Usage, 11, 7)
	s.serve(Usage{InputTokens: int64(in), OutputTokens: int64(outTok)})
	ev("response.created", map[string]any{"type": "response.created", "response": map[string]any{"id": fmt.Sprintf("resp_%d", n)}})
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
	ev("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": 0, "item": itm})
	ev("response.completed", map[string]any{"type": "response.completed", "response": map[string]any{"id": fmt.Sprintf("resp_%d", n),
		"usage": map[string]any{"input_tokens": in, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": outTok, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": in + outTok}}})
}

// tokens returns a scripted answer's input and output tokens, or the
// defaults when it scripts none.
func tokens(scripted [2]int, in, out int) (int, int) {
	if scripted[0] == 0 && scripted[1] == 0 {
		return in, out
	}
	return scripted[0], scripted[1]
}

// tokens returns u's input and output tokens.
func (u Usage) tokens() [2]int { return [2]int{int(u.InputTokens), int(u.OutputTokens)} }
