package openai

// # Context windows
//
// A model's context window, in tokens, is the first of:
//
//  1. what the server said in an error over the window ("maximum context
//     length is N tokens" of OpenAI and vLLM, llama.cpp's n_ctx) or, when
//     it named none, nine tenths of the estimate of the request it refused;
//  2. the turn's (provider.Turn.ContextWindow: the daemon's config.json,
//     context_windows), else Options.ContextWindows[model];
//  3. $OPENAI_CONTEXT_WINDOW;
//  4. what the server reports, asked once per model and provider: the
//     model's entry in GET /v1/models (vLLM's max_model_len, or a
//     context_length or context_window field, as OpenRouter and others
//     report), then llama.cpp's GET /props (n_ctx, the context each slot
//     has), then Ollama's POST /api/show (num_ctx among the model's
//     parameters; without it, Ollama's default of 4096 tokens, or less if
//     the model's context_length is less);
//  5. DefaultContextWindow, 8192 tokens.
//
// Tokens are estimated from bytes: a quarter of the bytes of each message
// and of the tool definitions, plus a few per message, times the ratio
// of the tokens the server reported for the last request to the estimate
// of that request (at least 1, at most 4).

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// DefaultContextWindow is the window of a model whose window is not
// configured and that the server does not report.
const DefaultContextWindow = 8192

// ollamaDefaultWindow is the context Ollama gives a model whose
// parameters do not set num_ctx.
const ollamaDefaultWindow = 4096

// probeTimeout bounds the questions to the server about a window.
const probeTimeout = 5 * time.Second

// window returns model's context window (see the list above);
// configured, if not 0, is the turn's (provider.Turn.ContextWindow).
func (p *Provider) window(ctx context.Context, model string, configured int) int {
	p.mu.Lock()
	n, learned := p.windows[model]
	p.mu.Unlock()
	if learned && n < 0 { // from an error message
		return -n
	}
	if configured > 0 {
		return configured
	}
	if n := p.opts.ContextWindows[model]; n > 0 {
		return n
	}
	if n, err := strconv.Atoi(os.Getenv("OPENAI_CONTEXT_WINDOW")); err == nil && n > 0 {
		return n
	}
	if learned {
		return n
	}
	n, answered := p.probeWindow(ctx, model)
	if n <= 0 {
		n = DefaultContextWindow
	}
	if answered { // else asked again at the next turn
		p.mu.Lock()
		if _, ok := p.windows[model]; !ok {
			p.windows[model] = n
		}
		p.mu.Unlock()
	}
	return n
}

// learnWindow records the window a server's error reported (stored
// negative: over everything else).
func (p *Provider) learnWindow(model string, n int) {
	if n <= 0 {
		return
	}
	p.mu.Lock()
	p.windows[model] = -n
	p.mu.Unlock()
}

// probeWindow asks the server for model's window: 0 if it does not say;
// answered is false if the server could not be reached.
func (p *Provider) probeWindow(ctx context.Context, model string) (n int, answered bool) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	base := p.baseURL()
	root := strings.TrimSuffix(base, "/v1")
	var list struct {
		Data []map[string]any `json:"data"`
	}
	ok, reached := p.getJSON(ctx, http.MethodGet, base+"/models", nil, &list)
	if ok {
		for _, m := range list.Data {
			if m["id"] != model {
				continue
			}
			for _, k := range []string{"max_model_len", "context_length", "context_window", "max_context_length"} {
				if n := intOf(m[k]); n > 0 {
					return n, true
				}
			}
		}
	}
	var props struct {
		NCtx     any `json:"n_ctx"`
		Defaults struct {
			NCtx any `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	if ok, r := p.getJSON(ctx, http.MethodGet, root+"/props", nil, &props); ok {
		if n := intOf(props.Defaults.NCtx); n > 0 {
			return n, true
		}
		if n := intOf(props.NCtx); n > 0 {
			return n, true
		}
	} else {
		reached = reached || r
	}
	var show struct {
		Parameters string         `json:"parameters"`
		ModelInfo  map[string]any `json:"model_info"`
	}
	body, _ := json.Marshal(map[string]string{"model": model})
	ok, r := p.getJSON(ctx, http.MethodPost, root+"/api/show", body, &show)
	if ok {
		for _, line := range strings.Split(show.Parameters, "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "num_ctx" {
				if n, err := strconv.Atoi(f[1]); err == nil && n > 0 {
					return n, true
				}
			}
		}
		n := ollamaDefaultWindow
		for k, v := range show.ModelInfo {
			if m := intOf(v); strings.HasSuffix(k, ".context_length") && m > 0 && m < n {
				n = m
			}
		}
		return n, true
	}
	return 0, reached || r
}

// getJSON makes a request and decodes a 200 answer's JSON into v; ok
// says it did, reached that the server answered at all.
func (p *Provider) getJSON(ctx context.Context, method, url string, body []byte, v any) (ok, reached bool) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return false, false
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key := p.apiKey(); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := p.opts.HTTPClient.Do(req)
	if err != nil {
		return false, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, true
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(v) == nil, true
}

func intOf(v any) int {
	switch x := v.(type) {
	case float64:
		return int(x)
	case string:
		n, _ := strconv.Atoi(x)
		return n
	}
	return 0
}

// contextError is a server's answer that the request is over the model's
// context window.
type contextError struct {
	msg    string
	window int // the window the server named, or 0
}

func (e *contextError) Error() string {
	return "the conversation is over the model's context window: " + e.msg
}

// Phrases of the servers' errors over the window: OpenAI's code (and
// message), vLLM's, llama.cpp's, Ollama's and LM Studio's messages.
var contextPhrases = []string{
	"context_length_exceeded",
	"maximum context length",
	"exceed_context_size",
	"exceeds the available context",
	"context size",
	"context window",
	"context length",
	"prompt is too long",
	"too many tokens",
	"reduce the length of the messages",
}

var (
	maxContextRE = regexp.MustCompile(`(?i)maximum context length is (\d+)`)
	nCtxRE       = regexp.MustCompile(`"n_ctx"\s*:\s*(\d+)`)
)

// asContextError returns the error over the window that an error answer
// (its status, body and message) is, or nil if it is another.
func asContextError(status int, body []byte, msg string) *contextError {
	if status != http.StatusBadRequest && status != http.StatusRequestEntityTooLarge && status != http.StatusUnprocessableEntity {
		return nil
	}
	all := strings.ToLower(msg + " " + string(body))
	for _, ph := range contextPhrases {
		if strings.Contains(all, ph) {
			ce := &contextError{msg: msg}
			if m := maxContextRE.FindStringSubmatch(all); m != nil {
				ce.window, _ = strconv.Atoi(m[1])
			} else if m := nCtxRE.FindSubmatch(body); m != nil {
				ce.window, _ = strconv.Atoi(string(m[1]))
			}
			return ce
		}
	}
	return nil
}

// overflowed learns from an error over the window: the window the server
// named; or, if it named none and the request was estimated within the
// window, that the window is smaller than thought: at most nine tenths of
// the estimate (the estimate is scaled to the server's counts, so the
// request had at least about that many tokens).
func (t *turnRun) overflowed(ce *contextError) {
	n := ce.window
	if est := t.estimate(); n <= 0 && est > 0 && est <= t.window {
		n = est * 9 / 10
	}
	if n > 0 && n != t.window {
		t.s.p.learnWindow(t.s.model, n)
		t.window = n
	}
}

const maxRatio = 4

// calibrate sets the ratio from a request estimated at est tokens that
// the server counted as prompt tokens.
func (t *turnRun) calibrate(est int, prompt int64) {
	if prompt <= 0 || est <= 0 {
		return
	}
	raw := float64(est) / t.ratio
	t.ratio = min(maxRatio, max(1, float64(prompt)/raw))
}

// threshold is how many tokens a request may have before a compaction:
// the turn's share of the window (provider.Turn.CompactAt), else
// Options.CompactAt.
func (t *turnRun) threshold() int {
	share := t.s.p.opts.CompactAt
	if c := t.turn.CompactAt; c >= 0.2 && c <= 1 {
		share = c
	}
	return int(share * float64(t.window))
}

// estimate returns the tokens of the next request, estimated.
func (t *turnRun) estimate() int {
	return t.scale(t.toolTokens + msgsTokens(t.c.msgs) + msgsTokens(t.cur))
}

// scale applies the ratio to a raw estimate.
func (t *turnRun) scale(raw int) int {
	r := t.ratio
	if r < 1 {
		r = 1
	}
	return int(float64(raw) * r)
}

func msgsTokens(msgs []message) int {
	n := 0
	for _, m := range msgs {
		n += msgTokens(m)
	}
	return n
}

// msgTokens estimates a message's tokens, without the ratio.
func msgTokens(m message) int {
	b := len(m.Role) + len(m.ToolCallID)
	if m.Content != nil {
		b += len(*m.Content)
	}
	for _, c := range m.ToolCalls {
		b += len(c.ID) + len(c.Function.Name) + len(c.Function.Arguments) + 16
	}
	return (b+3)/4 + 4
}

func toolTokens(defs []toolDef) int {
	if len(defs) == 0 {
		return 0
	}
	b, err := json.Marshal(defs)
	if err != nil {
		return 0
	}
	return (len(b) + 3) / 4
}
