package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/internal/retry"
	"github.com/substrat/substrat/provider/providertest"
)

// fakeAPI is a loopback chat-completions server. Unless a scripted
// response is queued, it plays a model:
//   - a last message from a tool: "tool said: <content>";
//   - a last user message "CALL name {args}": a call of tool name;
//   - any other: "echo: <content>", streamed in two pieces.
type fakeAPI struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	requests []recorded
	queue    []func(w http.ResponseWriter, r *http.Request)
}

type recorded struct {
	header http.Header
	body   chatRequest
	raw    map[string]any
}

func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{t: t}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// then queues scripted responses for the next requests.
func (f *fakeAPI) then(h ...func(w http.ResponseWriter, r *http.Request)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queue = append(f.queue, h...)
}

func (f *fakeAPI) got() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.requests...)
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, "not found: "+r.Method+" "+r.URL.Path, http.StatusNotFound)
		return
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var rec recorded
	rec.header = r.Header.Clone()
	if err := json.Unmarshal(data, &rec.body); err != nil {
		http.Error(w, "bad json: "+err.Error(), http.StatusBadRequest)
		return
	}
	json.Unmarshal(data, &rec.raw)
	f.mu.Lock()
	f.requests = append(f.requests, rec)
	var h func(w http.ResponseWriter, r *http.Request)
	if len(f.queue) > 0 {
		h, f.queue = f.queue[0], f.queue[1:]
	}
	f.mu.Unlock()
	if h != nil {
		h(w, r)
		return
	}
	playModel(w, rec.body)
}

// playModel plays the default model.
func playModel(w http.ResponseWriter, req chatRequest) {
	last := req.Messages[len(req.Messages)-1]
	content := ""
	if last.Content != nil {
		content = *last.Content
	}
	// A framed prompt (the daemon's): the command is the last CALL line.
	if i := strings.LastIndex(content, "\nCALL "); i >= 0 && strings.HasPrefix(content, "[") {
		content, _, _ = strings.Cut(content[i+1:], "\n")
	}
	w.Header().Set("Content-Type", "text/event-stream")
	switch {
	case last.Role == "tool":
		sse(w, `{"choices":[{"index":0,"delta":{"role":"assistant","content":"tool said: "}}]}`)
		sse(w, fmt.Sprintf(`{"choices":[{"index":0,"delta":{"content":%s},"finish_reason":"stop"}]}`, jsonString(content)))
	case strings.HasPrefix(content, "CALL "):
		name, args, _ := strings.Cut(strings.TrimPrefix(content, "CALL "), " ")
		half := len(args) / 2
		sse(w, fmt.Sprintf(`{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_%d","type":"function","function":{"name":%s,"arguments":%s}}]}}]}`,
			len(req.Messages), jsonString(name), jsonString(args[:half])))
		sse(w, fmt.Sprintf(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":%s}}]},"finish_reason":"tool_calls"}]}`, jsonString(args[half:])))
	default:
		half := len(content) / 2
		sse(w, fmt.Sprintf(`{"choices":[{"index":0,"delta":{"role":"assistant","content":%s}}]}`, jsonString("echo: "+content[:half])))
		sse(w, fmt.Sprintf(`{"choices":[{"index":0,"delta":{"content":%s},"finish_reason":"stop"}]}`, jsonString(content[half:])))
	}
	sse(w, `{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`)
	sse(w, "[DONE]")
}

func sse(w http.ResponseWriter, data string) {
	fmt.Fprintf(w, "data: %s\n\n", data)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func status(code int, retryAfter string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"error":{"message":"scripted %d","type":"test_error"}}`, code)
	}
}

// reset closes the connection with a TCP RST, before or after some output.
func reset(partial bool) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		if partial {
			w.Header().Set("Content-Type", "text/event-stream")
			sse(w, `{"choices":[{"index":0,"delta":{"content":"half"}}]}`)
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
	}
}

func raw(contentType, body string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		io.WriteString(w, body)
	}
}

var fastRetry = retry.Policy{Tries: 3, Base: 5 * time.Millisecond}

var agentSeq atomic.Int64

func config(t *testing.T) provider.Config {
	n := agentSeq.Add(1)
	return provider.Config{
		AgentID:      fmt.Sprintf("0199aaaa-0000-7000-8000-%012d", n),
		Name:         fmt.Sprintf("agent%d", n),
		Model:        "fake-model",
		Instructions: "You are a test agent.",
		WorkDir:      t.TempDir(),
	}
}

func testTools() []Tool {
	return []Tool{{Name: "send_message", Description: "Send a message.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"recipient":{"type":"string"},"text":{"type":"string"}},"required":["recipient","text"]}`)}}
}

func newProvider(f *fakeAPI) *Provider {
	return New(Options{BaseURL: f.srv.URL + "/v1", APIKey: "sk-test", Retry: fastRetry, Tools: testTools})
}

func create(t *testing.T, p *Provider) provider.Session {
	t.Helper()
	s, err := p.Create(context.Background(), config(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	return s
}

type toolsFunc func(ctx context.Context, c provider.ToolCall) provider.ToolResult

func (f toolsFunc) CallTool(ctx context.Context, c provider.ToolCall) provider.ToolResult {
	return f(ctx, c)
}

func TestConformance(t *testing.T) {
	f := newFakeAPI(t)
	providertest.Run(t, providertest.Harness{
		New:    func(t *testing.T) provider.Provider { return newProvider(f) },
		Config: config,
		ToolPrompt: func(name, args string) string {
			return "CALL " + name + " " + args
		},
		Timeout: 20 * time.Second,
	})
}

func TestPlainReply(t *testing.T) {
	f := newFakeAPI(t)
	s := create(t, newProvider(f))
	var chunks []provider.Chunk
	res, err := s.Send(context.Background(), provider.Turn{Prompt: "hello there", Output: func(c provider.Chunk) { chunks = append(chunks, c) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "echo: hello there" {
		t.Errorf("text %q", res.Text)
	}
	if res.Usage.InputTokens != 10 || res.Usage.OutputTokens != 5 {
		t.Errorf("usage %+v, want 10 in, 5 out", res.Usage)
	}
	if len(chunks) != 2 || chunks[0].Text+chunks[1].Text != "echo: hello there" {
		t.Errorf("chunks %+v, want the two streamed pieces", chunks)
	}
	reqs := f.got()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if got := r.header.Get("Authorization"); got != "Bearer sk-test" {
		t.Errorf("Authorization %q", got)
	}
	if r.body.Model != "fake-model" || !r.body.Stream {
		t.Errorf("model %q stream %v", r.body.Model, r.body.Stream)
	}
	if so, _ := r.raw["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Errorf("stream_options %v, want include_usage", r.raw["stream_options"])
	}
	if len(r.body.Tools) != 1 || r.body.Tools[0].Type != "function" || r.body.Tools[0].Function.Name != "send_message" {
		t.Errorf("tools %+v", r.body.Tools)
	}
	if m := r.body.Messages; len(m) != 2 || m[0].Role != "system" || *m[0].Content != "You are a test agent." || m[1].Role != "user" {
		t.Errorf("messages %+v", m)
	}
}

func TestToolRoundTrip(t *testing.T) {
	f := newFakeAPI(t)
	s := create(t, newProvider(f))
	var calls []provider.ToolCall
	tools := toolsFunc(func(ctx context.Context, c provider.ToolCall) provider.ToolResult {
		calls = append(calls, c)
		return provider.ToolResult{Text: "delivered"}
	})
	res, err := s.Send(context.Background(), provider.Turn{Prompt: `CALL send_message {"recipient":"USER","text":"hi"}`, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "tool said: delivered" {
		t.Errorf("text %q", res.Text)
	}
	if len(calls) != 1 || calls[0].Name != "send_message" || calls[0].ID != "call_2" || string(calls[0].Args) != `{"recipient":"USER","text":"hi"}` {
		t.Fatalf("calls %+v", calls)
	}
	if res.Usage.InputTokens != 20 || res.Usage.OutputTokens != 10 {
		t.Errorf("usage %+v, want the sum of two requests", res.Usage)
	}
	reqs := f.got()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	m := reqs[1].body.Messages
	if len(m) != 4 || m[2].Role != "assistant" || len(m[2].ToolCalls) != 1 || m[2].ToolCalls[0].ID != "call_2" ||
		m[3].Role != "tool" || m[3].ToolCallID != "call_2" || *m[3].Content != "delivered" {
		b, _ := json.Marshal(m)
		t.Errorf("second request's messages %s", b)
	}
}

func TestBadToolArgs(t *testing.T) {
	f := newFakeAPI(t)
	s := create(t, newProvider(f))
	called := false
	tools := toolsFunc(func(ctx context.Context, c provider.ToolCall) provider.ToolResult {
		called = true
		return provider.ToolResult{Text: "no"}
	})
	res, err := s.Send(context.Background(), provider.Turn{Prompt: `CALL send_message [1,2]`, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	if called || !strings.Contains(res.Text, "not a JSON object") {
		t.Errorf("called %v, text %q", called, res.Text)
	}
}

func TestRetryAfter429(t *testing.T) {
	f := newFakeAPI(t)
	f.then(status(429, "0.3"))
	s := create(t, newProvider(f))
	start := time.Now()
	res, err := s.Send(context.Background(), provider.Turn{Prompt: "again"})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("retried after %v, before the 300ms Retry-After", took)
	}
	if res.Text != "echo: again" || len(f.got()) != 2 {
		t.Errorf("text %q after %d requests", res.Text, len(f.got()))
	}
}

func TestRetry500(t *testing.T) {
	f := newFakeAPI(t)
	f.then(status(500, ""), status(502, ""))
	s := create(t, newProvider(f))
	res, err := s.Send(context.Background(), provider.Turn{Prompt: "again"})
	if err != nil || res.Text != "echo: again" || len(f.got()) != 3 {
		t.Fatalf("Send = %q, %v after %d requests", res.Text, err, len(f.got()))
	}
}

func TestRetryConnectionReset(t *testing.T) {
	for _, partial := range []bool{false, true} {
		t.Run(fmt.Sprint("partial=", partial), func(t *testing.T) {
			f := newFakeAPI(t)
			f.then(reset(partial))
			s := create(t, newProvider(f))
			res, err := s.Send(context.Background(), provider.Turn{Prompt: "again"})
			if err != nil || res.Text != "echo: again" || len(f.got()) != 2 {
				t.Fatalf("Send = %q, %v after %d requests", res.Text, err, len(f.got()))
			}
		})
	}
}

func TestRetryStreamCut(t *testing.T) {
	f := newFakeAPI(t)
	f.then(raw("text/event-stream", "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"par\"}}]}\n\n"))
	s := create(t, newProvider(f))
	res, err := s.Send(context.Background(), provider.Turn{Prompt: "again"})
	if err != nil || res.Text != "echo: again" || len(f.got()) != 2 {
		t.Fatalf("Send = %q, %v after %d requests", res.Text, err, len(f.got()))
	}
}

func TestRetryOverloadedEvent(t *testing.T) {
	f := newFakeAPI(t)
	f.then(raw("text/event-stream", "data: {\"error\":{\"message\":\"Overloaded\",\"type\":\"overloaded_error\"}}\n\n"))
	s := create(t, newProvider(f))
	res, err := s.Send(context.Background(), provider.Turn{Prompt: "again"})
	if err != nil || res.Text != "echo: again" || len(f.got()) != 2 {
		t.Fatalf("Send = %q, %v after %d requests", res.Text, err, len(f.got()))
	}
}

func TestRetriesExhausted(t *testing.T) {
	f := newFakeAPI(t)
	f.then(status(503, ""), status(503, ""), status(503, ""))
	s := create(t, newProvider(f))
	_, err := s.Send(context.Background(), provider.Turn{Prompt: "again"})
	if !errors.Is(err, provider.ErrRetryable) {
		t.Fatalf("Send: %v, want ErrRetryable", err)
	}
	for _, want := range []string{"3 times", "503", "scripted 503", "/chat/completions"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// The failed turn left the conversation alone.
	if _, err := s.Send(context.Background(), provider.Turn{Prompt: "next"}); err != nil {
		t.Fatal(err)
	}
	last := f.got()[3].body.Messages
	if len(last) != 2 || *last[1].Content != "next" {
		t.Errorf("after a failed turn the conversation is %+v", last)
	}
}

func TestClientErrorNotRetried(t *testing.T) {
	f := newFakeAPI(t)
	f.then(status(401, ""))
	s := create(t, newProvider(f))
	_, err := s.Send(context.Background(), provider.Turn{Prompt: "again"})
	if err == nil || errors.Is(err, provider.ErrRetryable) || !strings.Contains(err.Error(), "401") || len(f.got()) != 1 {
		t.Fatalf("Send: %v after %d requests, want a 401 error at once", err, len(f.got()))
	}
}

func TestGarbage(t *testing.T) {
	for name, h := range map[string]func(http.ResponseWriter, *http.Request){
		"not-json":       raw("text/event-stream", "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: {this is not json\n\n"),
		"not-sse":        raw("text/event-stream", "<html>502 Bad Gateway</html>\n"),
		"json-garbage":   raw("application/json", "{\"choices\": oops"),
		"nameless-call":  raw("text/event-stream", "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n"),
		"index-too-high": raw("text/event-stream", "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":7,\"id\":\"c\",\"function\":{\"name\":\"x\"}}]}}]}\n\n"),
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeAPI(t)
			f.then(h)
			s := create(t, newProvider(f))
			_, err := s.Send(context.Background(), provider.Turn{Prompt: "hi"})
			if !errors.Is(err, provider.ErrProtocol) || errors.Is(err, provider.ErrRetryable) {
				t.Fatalf("Send: %v, want ErrProtocol", err)
			}
			if len(f.got()) != 1 {
				t.Errorf("garbage was retried: %d requests", len(f.got()))
			}
			if res, err := s.Send(context.Background(), provider.Turn{Prompt: "hi"}); err != nil || res.Text != "echo: hi" {
				t.Errorf("Send after garbage = %q, %v", res.Text, err)
			}
		})
	}
}

func TestPlainJSONCompletion(t *testing.T) {
	f := newFakeAPI(t)
	f.then(raw("application/json", `{"choices":[{"index":0,"message":{"role":"assistant","content":"whole"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`))
	s := create(t, newProvider(f))
	res, err := s.Send(context.Background(), provider.Turn{Prompt: "hi"})
	if err != nil || res.Text != "whole" || res.Usage.InputTokens != 3 {
		t.Fatalf("Send = %+v, %v", res, err)
	}
}

func TestConversationIsTheBlob(t *testing.T) {
	f := newFakeAPI(t)
	p := newProvider(f)
	cfg := config(t)
	s, err := p.Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Send(context.Background(), provider.Turn{Prompt: "remember PAPAYA"}); err != nil {
		t.Fatal(err)
	}
	blob, err := s.Suspend(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var b map[string]any
	if err := json.Unmarshal(blob, &b); err != nil || b["version"] != float64(1) || !strings.Contains(string(blob), "PAPAYA") {
		t.Fatalf("blob %s (%v)", blob, err)
	}
	cfg.Instructions = "New instructions."
	r, err := p.Restore(context.Background(), cfg, blob)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if _, err := r.Send(context.Background(), provider.Turn{Prompt: "what was it?"}); err != nil {
		t.Fatal(err)
	}
	m := f.got()[1].body.Messages
	if len(m) != 4 || *m[0].Content != "New instructions." || *m[1].Content != "remember PAPAYA" || *m[3].Content != "what was it?" {
		b, _ := json.Marshal(m)
		t.Errorf("restored conversation %s", b)
	}
	// Restore(nil) keeps only the system prompt.
	n, err := p.Restore(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	if _, err := n.Send(context.Background(), provider.Turn{Prompt: "fresh"}); err != nil {
		t.Fatal(err)
	}
	if m := f.got()[2].body.Messages; len(m) != 2 || m[0].Role != "system" {
		t.Errorf("fresh conversation %+v", m)
	}
}

func TestNoModel(t *testing.T) {
	t.Setenv("OPENAI_MODEL", "")
	cfg := config(t)
	cfg.Model = ""
	if _, err := New(Options{}).Create(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "--model") {
		t.Errorf("Create without a model: %v", err)
	}
}

func TestEnvConfig(t *testing.T) {
	f := newFakeAPI(t)
	t.Setenv("OPENAI_BASE_URL", f.srv.URL+"/v1/")
	t.Setenv("OPENAI_API_KEY", "sk-env")
	s := create(t, New(Options{Retry: fastRetry}))
	if _, err := s.Send(context.Background(), provider.Turn{Prompt: "hi"}); err != nil {
		t.Fatal(err)
	}
	if got := f.got()[0].header.Get("Authorization"); got != "Bearer sk-env" {
		t.Errorf("Authorization %q", got)
	}
	if f.got()[0].body.Tools != nil {
		t.Errorf("tools advertised without Options.Tools")
	}
}

func TestConversationSurvivesCrash(t *testing.T) {
	f := newFakeAPI(t)
	home := t.TempDir()
	cfg := config(t)
	cfg.WorkDir = filepath.Join(home, "agents", cfg.AgentID)
	if err := os.MkdirAll(cfg.WorkDir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := newProvider(f)
	s, err := p.Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Send(context.Background(), provider.Turn{Prompt: "remember PAPAYA"}); err != nil {
		t.Fatal(err)
	}
	saved := filepath.Join(home, "providers", "openai", "sessions", cfg.AgentID+".json")
	if data, err := os.ReadFile(saved); err != nil || !strings.Contains(string(data), "PAPAYA") {
		t.Fatalf("saved conversation %s: %v", data, err)
	}
	// A crash: no Suspend; the daemon restores with nil.
	r, err := p.Restore(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if _, err := r.Send(context.Background(), provider.Turn{Prompt: "what was it?"}); err != nil {
		t.Fatal(err)
	}
	if m := f.got()[1].body.Messages; len(m) != 4 || *m[1].Content != "remember PAPAYA" {
		b, _ := json.Marshal(m)
		t.Errorf("after Restore(nil) the conversation is %s", b)
	}
	// A reset (Create again) starts afresh, also after a crash.
	if _, err := p.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(saved); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Create left the old conversation: %v", err)
	}
	// An unreadable saved conversation is reported, naming the file.
	os.MkdirAll(filepath.Dir(saved), 0o700)
	os.WriteFile(saved, []byte("{garbage"), 0o600)
	if _, err := p.Restore(context.Background(), cfg, nil); !errors.Is(err, provider.ErrBadState) || !strings.Contains(err.Error(), saved) {
		t.Errorf("Restore(nil) with a garbage file: %v", err)
	}
}

// TestTurnInstructions: instructions changed while the session lives are
// the system message of the next request, in place of the old.
func TestTurnInstructions(t *testing.T) {
	f := newFakeAPI(t)
	s := create(t, newProvider(f))
	if _, err := s.Send(context.Background(), provider.Turn{Prompt: "one"}); err != nil {
		t.Fatal(err)
	}
	now := "You are changed."
	if _, err := s.Send(context.Background(), provider.Turn{Prompt: "two", Instructions: &now}); err != nil {
		t.Fatal(err)
	}
	m := f.got()[1].body.Messages
	if m[0].Role != "system" || *m[0].Content != now {
		t.Errorf("first message %+v", m[0])
	}
	for _, x := range m[1:] {
		if x.Role == "system" {
			t.Errorf("a second system message: %q", *x.Content)
		}
	}
}
