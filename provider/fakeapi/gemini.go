// The Gemini API, for tests that run the real Gemini CLI
// (GOOGLE_GEMINI_BASE_URL points at it). Each streamGenerateContent call
// is answered with what the test's reply function scripts, as the one
// event the CLI reads: a candidate with text or a function call, and
// usage metadata. Other calls (the CLI's model router, generateContent)
// get a plain answer.

package fakeapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// GeminiRequest is one recorded streamGenerateContent call.
type GeminiRequest struct {
	Model string
	Raw   string
	// Responses are the function responses it carries, as JSON.
	Responses []string
}

// GeminiOut is a scripted answer.
type GeminiOut struct {
	Text string
	// Call, if set, is a function call (Name, Args as JSON) instead.
	Call    *Call
	Status  int    // an HTTP error instead
	Garbage string // written instead of the stream
	Usage   [2]int // prompt, candidates tokens; default 12, 4
}

// Gemini is the fake Gemini API.
type Gemini struct {
	server[GeminiRequest, GeminiOut]
}

// NewGemini starts a fake on loopback.
func NewGemini(reply func(GeminiRequest) GeminiOut) *Gemini {
	s := &Gemini{}
	s.start(reply, s.handle, "")
	return s
}

// Served returns the input and output tokens of every answer served so
// far: what the API would bill.
func (s *Gemini) Served() [2]int { return s.servedUsage().tokens() }

func (s *Gemini) handle(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if !strings.Contains(r.URL.Path, ":streamGenerateContent") {
		// The CLI's router and other one-shot calls.
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"candidates":[{"content":{"parts":[{"text":"{}"}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":1,"totalTokenCount":2}}`)
		return
	}
	req := GeminiRequest{Raw: string(body)}
	if i := strings.Index(r.URL.Path, "/models/"); i >= 0 {
		req.Model = strings.TrimSuffix(r.URL.Path[i+len("/models/"):], ":streamGenerateContent")
	}
	var parsed struct {
		Contents []struct {
			Parts []struct {
				FunctionResponse json.RawMessage `json:"functionResponse"`
			} `json:"parts"`
		} `json:"contents"`
	}
	json.Unmarshal(body, &parsed)
	for _, c := range parsed.Contents {
		for _, p := range c.Parts {
			if len(p.FunctionResponse) > 0 {
				req.Responses = append(req.Responses, string(p.FunctionResponse))
			}
		}
	}
	out, _ := s.answer(req)
	if out.Status != 0 {
		http.Error(w, `{"error":{"code":500,"message":"scripted failure","status":"INTERNAL"}}`, out.Status)
		return
	}
	ev := stream(w)
	if out.Garbage != "" {
		fmt.Fprint(w, out.Garbage)
		return
	}
	in, outTok := tokens(out.Usage, 12, 4)
	s.serve(Usage{InputTokens: int64(in), OutputTokens: int64(outTok)})
	part := map[string]any{"text": out.Text}
	if c := out.Call; c != nil {
		part = map[string]any{"functionCall": map[string]any{"name": c.Name, "args": json.RawMessage(c.Args)}}
	}
	ev("", map[string]any{
		"candidates":    []any{map[string]any{"content": map[string]any{"parts": []any{part}, "role": "model"}, "finishReason": "STOP", "index": 0}},
		"usageMetadata": map[string]any{"promptTokenCount": in, "candidatesTokenCount": outTok, "totalTokenCount": in + outTok},
	})
}
