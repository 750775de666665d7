// Package fakeapi is a loopback fake of the Gemini API for the tests that
// run the real Gemini CLI (GOOGLE_GEMINI_BASE_URL points at it). It
// records every streamGenerateContent request and answers each with what a
// test's reply function scripts, as the server-sent events the CLI reads:
// one candidate with text or a function call, and usage metadata. Other
// calls (the CLI's model router, generateContent) get a plain answer.
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

// Request is one recorded streamGenerateContent call.
type Request struct {
	Model string
	Raw   string
	// Responses are the function responses it carries, as JSON.
	Responses []string
}

// Out is a scripted answer.
type Out struct {
	Text string
	// Call, if set, is a function call (Name, Args as JSON) instead.
	Call    *Call
	Status  int    // an HTTP error instead
	Garbage string // written instead of the stream
	Usage   [2]int // prompt, candidates tokens; default 12, 4
}

// Call is a function call of the model.
type Call struct{ Name, Args string }

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
	s.URL = s.srv.URL
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

// Requests returns the recorded requests.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if !strings.Contains(r.URL.Path, ":streamGenerateContent") {
		// The CLI's router and other one-shot calls.
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"candidates":[{"content":{"parts":[{"text":"{}"}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":1,"totalTokenCount":2}}`)
		return
	}
	req := Request{Raw: string(body)}
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
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	reply := s.reply
	s.mu.Unlock()
	out := reply(req)
	if out.Status != 0 {
		http.Error(w, `{"error":{"code":500,"message":"scripted failure","status":"INTERNAL"}}`, out.Status)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	if out.Garbage != "" {
		fmt.Fprint(w, out.Garbage)
		return
	}
	in, outTok := out.Usage[0], out.Usage[1]
	if in == 0 && outTok == 0 {
		in, outTok = 12, 4
	}
	s.mu.Lock()
	s.served[0] += in
	s.served[1] += outTok
	s.mu.Unlock()
	part := map[string]any{"text": out.Text}
	if c := out.Call; c != nil {
		part = map[string]any{"functionCall": map[string]any{"name": c.Name, "args": json.RawMessage(c.Args)}}
	}
	chunk := map[string]any{
		"candidates":    []any{map[string]any{"content": map[string]any{"parts": []any{part}, "role": "model"}, "finishReason": "STOP", "index": 0}},
		"usageMetadata": map[string]any{"promptTokenCount": in, "candidatesTokenCount": outTok, "totalTokenCount": in + outTok},
	}
	b, _ := json.Marshal(chunk)
	fmt.Fprintf(w, "data: %s\n\n", b)
}
