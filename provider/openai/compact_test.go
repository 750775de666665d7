package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/substrat/substrat/provider"
)

// windowFake is a chat-completions server with a small context window: a
// request over it (its bytes / 4, plus max_tokens) is answered 400 with
// OpenAI's context_length_exceeded. It counts prompt tokens the same way
// in its usage. A summary request (its system message starts "You write
// the summary") is answered with "SUMMARY of" and the turn markers
// ("turn N:") it was given; any other with "reply to turn N" padded to
// about reply bytes.
type windowFake struct {
	t      testing.TB
	srv    *httptest.Server
	window int
	// models, if set, is the GET /v1/models body.
	models string
	// errBody is the body of a 400 over the window; %d is the window.
	errBody string
	reply   int
	// failSummaries answers summary requests 400.
	failSummaries bool

	mu        sync.Mutex
	chats     int
	overflows int
	summaries int
	maxTokens int // the largest request accepted
	last      chatRequest
}

const openaiOverflow = `{"error":{"message":"This model's maximum context length is %d tokens. However, your messages resulted in more tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`

func newWindowFake(t testing.TB, window int) *windowFake {
	f := &windowFake{t: t, window: window, errBody: openaiOverflow, reply: 380}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

var turnMarker = regexp.MustCompile(`turn (\d+):`)

func (f *windowFake) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/v1/models" && f.models != "" {
		io.WriteString(w, f.models)
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	tokens := len(body)/4 + req.MaxTokens
	f.mu.Lock()
	f.chats++
	if tokens > f.window {
		f.overflows++
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		if strings.Contains(f.errBody, "%d") {
			fmt.Fprintf(w, f.errBody, f.window)
		} else {
			io.WriteString(w, f.errBody)
		}
		return
	}
	f.maxTokens = max(f.maxTokens, tokens)
	sys := ""
	if len(req.Messages) > 0 && req.Messages[0].Role == "system" && req.Messages[0].Content != nil {
		sys = *req.Messages[0].Content
	}
	var text string
	if strings.HasPrefix(sys, "You write the summary") && f.failSummaries {
		f.summaries++
		f.mu.Unlock()
		http.Error(w, `{"error":{"message":"no summaries today","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	if strings.HasPrefix(sys, "You write the summary") {
		f.summaries++
		var seen []string
		for _, m := range turnMarker.FindAllStringSubmatch(*req.Messages[1].Content, -1) {
			seen = append(seen, m[1])
		}
		text = "SUMMARY of turns " + strings.Join(seen, ",")
	} else {
		f.last = req
		last := req.Messages[len(req.Messages)-1]
		n := ""
		if m := turnMarker.FindStringSubmatch(*last.Content); m != nil {
			n = m[1]
		}
		text = "reply to turn " + n + " " + strings.Repeat("r", max(0, f.reply-20))
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	sse(w, fmt.Sprintf(`{"choices":[{"index":0,"delta":{"role":"assistant","content":%s},"finish_reason":"stop"}]}`, jsonString(text)))
	sse(w, fmt.Sprintf(`{"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, len(body)/4, len(text)/4))
	sse(w, "[DONE]")
}

// prompt is turn n's prompt, about 95 tokens: a turn (prompt and reply)
// is about 190.
func prompt(n int) string {
	p := fmt.Sprintf("turn %d: ", n)
	return p + strings.Repeat("p", 380-len(p))
}

func windowProvider(f *windowFake, stateDir string) *Provider {
	return New(Options{BaseURL: f.srv.URL + "/v1", APIKey: "sk-test", Retry: fastRetry, StateDir: stateDir})
}

// stateSize is the bytes of the agent's state files.
func stateSize(t testing.TB, p *Provider, cfg provider.Config) int64 {
	t.Helper()
	var n int64
	f := p.stateFiles(cfg)
	for _, name := range []string{f.base, f.journal} {
		if st, err := os.Stat(name); err == nil {
			n += st.Size()
		}
	}
	return n
}

// checkHistory checks that the saved conversation is whole: turns
// summarized+1..turns, each once and in order, after a summary of the
// others if there are any.
func checkHistory(t *testing.T, b *blob, turns int) {
	t.Helper()
	if b.Turns != turns {
		t.Errorf("saved %d turns, want %d", b.Turns, turns)
	}
	want := b.Summarized + 1
	for _, m := range b.Messages {
		if m.Role != "user" {
			continue
		}
		got := turnMarker.FindStringSubmatch(*m.Content)
		if got == nil || got[1] != strconv.Itoa(want) {
			t.Fatalf("saved conversation: a user message %.20q where turn %d was due", *m.Content, want)
		}
		want++
	}
	if want != turns+1 {
		t.Errorf("saved conversation ends before turn %d, want %d", want, turns+1)
	}
	if b.Summarized > 0 && !strings.Contains(b.Summary, "SUMMARY") && !strings.Contains(b.Summary, "dropped") {
		t.Errorf("turns 1-%d replaced, but the summary is %q", b.Summarized, b.Summary)
	}
}

// TestLongLifeInSmallWindow: 60 turns of about 190 tokens each in a
// 3,000-token window (reported by GET /v1/models, as vLLM does) all
// answer, compacting as they go; the state files stay small; the
// conversation restored after a crash goes on.
func TestLongLifeInSmallWindow(t *testing.T) {
	f := newWindowFake(t, 3000)
	f.models = `{"object":"list","data":[{"id":"other","max_model_len":100},{"id":"fake-model","object":"model","max_model_len":3000}]}`
	p := windowProvider(f, t.TempDir())
	cfg := config(t)
	s, err := p.Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	var all []provider.Compaction
	var maxState int64
	var usage provider.Usage
	for i := 1; i <= 60; i++ {
		res, err := s.Send(context.Background(), provider.Turn{Prompt: prompt(i)})
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		if !strings.HasPrefix(res.Text, fmt.Sprintf("reply to turn %d ", i)) {
			t.Fatalf("turn %d answered %.30q", i, res.Text)
		}
		if res.ContextWindow != 3000 || res.ContextTokens <= 0 || res.ContextTokens > 3000 {
			t.Errorf("turn %d: context %d of %d", i, res.ContextTokens, res.ContextWindow)
		}
		all = append(all, res.Compactions...)
		usage.InputTokens += res.Usage.InputTokens
		maxState = max(maxState, stateSize(t, p, cfg))
	}
	if f.overflows != 0 {
		t.Errorf("%d requests over the window", f.overflows)
	}
	if len(all) < 3 || f.summaries != len(all) {
		t.Fatalf("%d compactions, %d summary requests", len(all), f.summaries)
	}
	next := 1
	for _, c := range all {
		if c.Reason != provider.CompactThreshold || c.FirstTurn != next || c.LastTurn < c.FirstTurn || c.TokensAfter >= c.TokensBefore ||
			c.Replaced != fmt.Sprintf("turns %d-%d", c.FirstTurn, c.LastTurn) || !strings.Contains(c.Summary, "SUMMARY of turns") {
			t.Errorf("compaction %+v", c)
		}
		next = c.LastTurn + 1
	}
	t.Logf("%d compactions, the last %+v; largest request %d tokens; state at most %d bytes", len(all), all[len(all)-1], f.maxTokens, maxState)
	// The state: a base and a journal, bounded by the window.
	if limit := int64(4 * 3000 * 3); maxState > limit {
		t.Errorf("state files grew to %d bytes, over %d", maxState, limit)
	}
	// The last request: the instructions, then the summary, then the
	// recent turns in order.
	sys := *f.last.Messages[0].Content
	if !strings.HasPrefix(sys, "You are a test agent.\n\n# Earlier in this conversation") || !strings.Contains(sys, fmt.Sprintf("Turns 1-%d", next-1)) {
		t.Errorf("system message %q", sys)
	}
	// A crash: the conversation comes back from the files.
	b, err := p.stateFiles(cfg).load()
	if err != nil {
		t.Fatal(err)
	}
	checkHistory(t, b, 60)
	r, err := p.Restore(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if _, err := r.Send(context.Background(), provider.Turn{Prompt: prompt(61)}); err != nil {
		t.Fatal(err)
	}
	if b, err := p.stateFiles(cfg).load(); err != nil {
		t.Fatal(err)
	} else {
		checkHistory(t, b, 61)
	}
}

// TestOverflowCompactsAndRetries: a server that does not report its
// window, smaller than the default, answers over it with a 400; the
// turn compacts, retries once, and does not fail, for each server's way
// of saying so.
func TestOverflowCompactsAndRetries(t *testing.T) {
	for name, body := range map[string]string{
		"openai":    `{"error":{"message":"Request too large.","type":"invalid_request_error","code":"context_length_exceeded"}}`,
		"vllm":      `{"object":"error","message":"This model's maximum context length is %d tokens. However, you requested 3500 tokens in the messages, Please reduce the length of the messages.","type":"BadRequestError","param":null,"code":400}`,
		"llama.cpp": `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":3500,"n_ctx":3000}}`,
	} {
		t.Run(name, func(t *testing.T) {
			f := newWindowFake(t, 3000)
			f.errBody = body
			p := windowProvider(f, t.TempDir())
			cfg := config(t)
			s, err := p.Create(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Stop()
			var overflow int
			for i := 1; i <= 40; i++ {
				res, err := s.Send(context.Background(), provider.Turn{Prompt: prompt(i)})
				if err != nil {
					t.Fatalf("turn %d: %v", i, err)
				}
				for _, c := range res.Compactions {
					if c.Reason == provider.CompactOverflow {
						overflow++
					}
				}
			}
			if f.overflows == 0 || overflow == 0 {
				t.Errorf("%d answers over the window, %d compactions for them", f.overflows, overflow)
			}
			if w := p.window(context.Background(), "fake-model", 0); w > 3000 {
				t.Errorf("window still %d", w)
			}
			b, err := p.stateFiles(cfg).load()
			if err != nil {
				t.Fatal(err)
			}
			checkHistory(t, b, 40)
		})
	}
}

func TestContextErrors(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		want   bool
		window int
	}{
		{400, fmt.Sprintf(openaiOverflow, 8192), true, 8192},
		{400, `{"error":{"message":"x","code":"context_length_exceeded"}}`, true, 0},
		{400, `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion).","type":"BadRequestError","code":400}`, true, 4096},
		{400, `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}`, true, 4096},
		{400, `{"error":{"message":"the input length exceeds the context length","type":"api_error"}}`, true, 0},
		{400, `{"error":"Trying to keep the first 5000 tokens when context the overflows. However, the model is loaded with context length of only 4096 tokens"}`, true, 0},
		{400, `{"error":{"message":"model 'x' not found","type":"invalid_request_error"}}`, false, 0},
		{429, `{"error":{"message":"Rate limit reached: too many tokens per minute"}}`, false, 0},
	} {
		var e struct {
			Error *apiError `json:"error"`
		}
		msg := c.body
		if json.Unmarshal([]byte(c.body), &e) == nil && e.Error != nil {
			msg = e.Error.String()
		}
		ce := asContextError(c.status, []byte(c.body), msg)
		if (ce != nil) != c.want || ce != nil && ce.window != c.window {
			t.Errorf("%d %s: %+v", c.status, c.body, ce)
		}
	}
}

// TestWindowFromServer: the window as vLLM, llama.cpp and Ollama report
// it; configured; the default.
func TestWindowFromServer(t *testing.T) {
	for _, c := range []struct {
		name   string
		routes map[string]string
		opts   map[string]int
		env    string
		want   int
		turn   int // provider.Turn.ContextWindow
	}{
		{"vllm", map[string]string{"GET /v1/models": `{"data":[{"id":"fake-model","max_model_len":32768}]}`}, nil, "", 32768, 0},
		{"openrouter", map[string]string{"GET /v1/models": `{"data":[{"id":"fake-model","context_length":16000}]}`}, nil, "", 16000, 0},
		{"llama.cpp", map[string]string{"GET /v1/models": `{"data":[{"id":"fake-model","meta":{"n_ctx_train":131072}}]}`,
			"GET /props": `{"default_generation_settings":{"n_ctx":8192},"total_slots":1}`}, nil, "", 8192, 0},
		{"ollama num_ctx", map[string]string{"GET /v1/models": `{"data":[{"id":"fake-model"}]}`,
			"POST /api/show": `{"parameters":"stop \"<|eot|>\"\nnum_ctx                        12288","model_info":{"llama.context_length":131072}}`}, nil, "", 12288, 0},
		{"ollama default", map[string]string{"POST /api/show": `{"parameters":"","model_info":{"llama.context_length":131072}}`}, nil, "", 4096, 0},
		{"ollama small model", map[string]string{"POST /api/show": `{"model_info":{"gemma.context_length":2048}}`}, nil, "", 2048, 0},
		{"config", map[string]string{"GET /v1/models": `{"data":[{"id":"fake-model","max_model_len":32768}]}`}, map[string]int{"fake-model": 6000}, "", 6000, 0},
		{"env", nil, nil, "7000", 7000, 0},
		{"config.json", map[string]string{"GET /v1/models": `{"data":[{"id":"fake-model","max_model_len":32768}]}`}, map[string]int{"fake-model": 6000}, "7000", 5000, 5000},
		{"default", nil, nil, "", DefaultContextWindow, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if body, ok := c.routes[r.Method+" "+r.URL.Path]; ok {
					io.WriteString(w, body)
					return
				}
				http.NotFound(w, r)
			}))
			defer srv.Close()
			t.Setenv("OPENAI_CONTEXT_WINDOW", c.env)
			p := New(Options{BaseURL: srv.URL + "/v1", ContextWindows: c.opts})
			if got := p.window(context.Background(), "fake-model", c.turn); got != c.want {
				t.Errorf("window %d, want %d", got, c.want)
			}
		})
	}
}

// TestJournalDamage: a torn last line is cut off and kept; a bad line
// with good lines after it is refused.
func TestJournalDamage(t *testing.T) {
	f := newWindowFake(t, 100000)
	dir := t.TempDir()
	p := windowProvider(f, dir)
	cfg := config(t)
	s, err := p.Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if _, err := s.Send(context.Background(), provider.Turn{Prompt: prompt(i)}); err != nil {
			t.Fatal(err)
		}
	}
	s.Stop()
	files := p.stateFiles(cfg)
	good, _ := os.ReadFile(files.journal)
	if n := strings.Count(string(good), "\n"); n != 2 {
		t.Fatalf("journal of %d lines after 3 turns (the first is in the base)", n)
	}
	// Torn: half a line more.
	os.WriteFile(files.journal, append(append([]byte(nil), good...), `{"gen":1,"turn":4,"mess`...), 0o600)
	b, err := files.load()
	if err != nil {
		t.Fatal(err)
	}
	checkHistory(t, b, 3)
	if data, _ := os.ReadFile(files.journal); string(data) != string(good) {
		t.Errorf("torn tail not cut: %q", data)
	}
	if data, _ := os.ReadFile(files.journal + ".broken"); string(data) != `{"gen":1,"turn":4,"mess` {
		t.Errorf(".broken %q", data)
	}
	// Damage in the middle.
	lines := strings.SplitAfter(string(good), "\n")
	os.WriteFile(files.journal, []byte("garbage\n"+lines[1]), 0o600)
	if _, err := p.Restore(context.Background(), cfg, nil); err == nil || !strings.Contains(err.Error(), filepath.Base(files.base)) {
		t.Errorf("Restore with a damaged journal: %v", err)
	}
}

type failingTransport struct {
	fail *atomic.Bool
}

func (f failingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if f.fail.Load() {
		return nil, errors.New("connection refused")
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestWindowProbeUnreachable: a server that cannot be reached gives the
// default for now, and is asked again later.
func TestWindowProbeUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"data":[{"id":"fake-model","max_model_len":3000}]}`)
	}))
	defer srv.Close()
	var fail atomic.Bool
	fail.Store(true)
	p := New(Options{BaseURL: srv.URL + "/v1", HTTPClient: &http.Client{Transport: failingTransport{&fail}}})
	if got := p.window(context.Background(), "fake-model", 0); got != DefaultContextWindow {
		t.Errorf("unreachable: window %d", got)
	}
	fail.Store(false)
	if got := p.window(context.Background(), "fake-model", 0); got != 3000 {
		t.Errorf("reachable again: window %d", got)
	}
}

// TestSummaryFails: when the summary request fails, the older turns are
// dropped, and the summary says so; the turns go on.
func TestSummaryFails(t *testing.T) {
	f := newWindowFake(t, 3000)
	f.failSummaries = true
	p := windowProvider(f, t.TempDir())
	p.opts.ContextWindows = map[string]int{"fake-model": 3000}
	cfg := config(t)
	s, err := p.Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	var all []provider.Compaction
	for i := 1; i <= 30; i++ {
		res, err := s.Send(context.Background(), provider.Turn{Prompt: prompt(i)})
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		all = append(all, res.Compactions...)
	}
	if len(all) < 2 {
		t.Fatalf("%d compactions", len(all))
	}
	c := all[1]
	if c.Dropped != c.LastTurn-c.FirstTurn+1 || !strings.Contains(c.Summary, fmt.Sprintf("Turns %d-%d were dropped without a summary: the summary request failed", c.FirstTurn, c.LastTurn)) ||
		!strings.Contains(c.Summary, fmt.Sprintf("Turns 1-%d were dropped", all[0].LastTurn)) {
		t.Errorf("second compaction %+v", c)
	}
	b, err := p.stateFiles(cfg).load()
	if err != nil {
		t.Fatal(err)
	}
	checkHistory(t, b, 30)
}

// TestHugePrompt: a prompt alone over the window is cut to fit, saying
// so, and the turn answers.
func TestHugePrompt(t *testing.T) {
	f := newWindowFake(t, 3000)
	p := windowProvider(f, t.TempDir())
	p.opts.ContextWindows = map[string]int{"fake-model": 3000}
	s := create(t, p)
	for i := 1; i <= 3; i++ {
		if _, err := s.Send(context.Background(), provider.Turn{Prompt: prompt(i)}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.Send(context.Background(), provider.Turn{Prompt: "turn 4: " + strings.Repeat("h", 40000)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Compactions) != 1 || !strings.Contains(res.Compactions[0].Replaced, "turns 1-3; 1 long messages of the turn under way cut") {
		t.Errorf("compactions %+v", res.Compactions)
	}
	last := f.last.Messages[len(f.last.Messages)-1]
	if !strings.Contains(*last.Content, "bytes cut here: the message did not fit in the model's context window]") {
		t.Errorf("the prompt sent: %.100q...", *last.Content)
	}
	if _, err := s.Send(context.Background(), provider.Turn{Prompt: prompt(5)}); err != nil {
		t.Fatal(err)
	}
}
