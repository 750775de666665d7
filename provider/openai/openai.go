// Package openai is the provider for OpenAI-compatible chat-completions
// endpoints (OpenAI, Ollama, vLLM, the llama.cpp server...), registered as
// "openai".
//
// Substrat keeps the conversation itself: the messages array is the
// session's state blob, and the agent tools run in the daemon through the
// turn's ToolHandler. A turn posts the conversation with the tools as
// functions, streams the answer (server-sent events, with
// stream_options.include_usage so that the last event carries the token
// counts), runs each tool call the model asks for, appends the results,
// and posts again until the model answers without calling a tool. A server
// that answers with a plain JSON completion instead of a stream is
// understood too.
//
// # Configuration
//
// The endpoint is Options.BaseURL, else $OPENAI_BASE_URL, else
// https://api.openai.com/v1; the key is Options.APIKey, else
// $OPENAI_API_KEY (sent as a bearer token when not empty). The model is
// Config.Model, else $OPENAI_MODEL. The system prompt is
// Config.Instructions, or the turn's (provider.Turn.Instructions); it is
// kept first in the conversation and replaced when the agent's
// instructions change.
//
// # Failures
//
// HTTP 408, 409, 425, 429 and 5xx, an error event that says "overloaded"
// or "rate limit", a connection reset and a stream cut short are retried
// as retry.Policy says (Options.Retry; by default 3 tries, 2 s base,
// honouring Retry-After). A final failure wraps provider.ErrRetryable.
// A stream that ends before [DONE] (and before a finish reason) counts as a
// connection reset. Other HTTP errors fail the turn with the status and
// the API's message. Unreadable output (a line that is no SSE field, an
// event that is not JSON, a tool call without a name, an event over 4 MiB)
// wraps provider.ErrProtocol and is not retried. A failed turn leaves the
// conversation as it was before it.
//
// # Sessions
//
// The session id is "openai-" followed by a random UUID, reported through
// Config.SessionID in Create. Suspend returns
// {"version":1,"session_id":…,"messages":[…]}; Restore accepts that. The
// daemon saves the blob only at suspend, so the provider also saves the
// same blob after every successful turn, atomically, in
// <home>/providers/openai/sessions/<agent-id>.json (see Options.StateDir),
// and Restore(nil), as after a crash, resumes from it; with no such file it
// starts a fresh conversation. Create removes it.
//
// Tool calls the model makes without an id (some local servers) get
// "call_" + a hash of the session id, the request's position in the session
// and the call's index. Arguments that are not a JSON object reach the
// model back as an error result, without running the tool.
package openai

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/renameio/v2"
	"github.com/google/uuid"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/internal/cli"
	"github.com/substrat/substrat/provider/internal/retry"
)

// DefaultBaseURL is used when neither Options.BaseURL nor $OPENAI_BASE_URL
// is set.
const DefaultBaseURL = "https://api.openai.com/v1"

// Limits.
const (
	defaultMaxRounds = 50       // requests in one turn
	maxEventSize     = 4 << 20  // bytes of one SSE data payload
	maxTurnText      = 16 << 20 // bytes of text in one turn
	errBodyQuote     = 500      // bytes of an error body quoted
	badQuote         = 200      // bytes of a bad event quoted
)

// Tool is an agent tool the model may call.
type Tool struct {
	Name        string
	Description string
	// Parameters is a JSON Schema of the arguments (an object schema).
	Parameters json.RawMessage
}

// Options configure the provider. The zero value works against OpenAI with
// the environment's key and advertises no tools.
type Options struct {
	// Name is the provider's registry name; default "openai".
	Name string
	// Tools returns the tools to advertise, called for each request,
	// when the turn does not list them (provider.Turn.ToolList).
	Tools func() []Tool
	// HTTPClient makes the requests; default a client without a timeout
	// (each turn's context bounds it).
	HTTPClient *http.Client
	// Retry is the retry policy; the zero value is retry.Default.
	Retry retry.Policy
	// BaseURL and APIKey override $OPENAI_BASE_URL and $OPENAI_API_KEY.
	BaseURL string
	APIKey  string
	// MaxRounds bounds the requests of one turn (a model that keeps
	// calling tools); default 50.
	MaxRounds int
	// Home is the Substrat home; default derived from Config.WorkDir
	// (<home>/agents/<agent-id>). StateDir, default <Home>/providers/<Name>,
	// holds each agent's conversation, saved after every turn, so that
	// Restore(nil) resumes it after a crash. When neither can be had, the
	// conversation lives only in the state blob.
	Home     string
	StateDir string
}

// Provider is the openai provider.
type Provider struct {
	opts Options
}

// New returns the provider.
func New(opts Options) *Provider {
	if opts.Name == "" {
		opts.Name = "openai"
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{}
	}
	if opts.MaxRounds <= 0 {
		opts.MaxRounds = defaultMaxRounds
	}
	return &Provider{opts: opts}
}

// Name returns the registry name.
func (p *Provider) Name() string { return p.opts.Name }

func (p *Provider) baseURL() string {
	u := p.opts.BaseURL
	if u == "" {
		u = os.Getenv("OPENAI_BASE_URL")
	}
	if u == "" {
		u = DefaultBaseURL
	}
	return strings.TrimRight(u, "/")
}

func (p *Provider) apiKey() string {
	if p.opts.APIKey != "" {
		return p.opts.APIKey
	}
	return os.Getenv("OPENAI_API_KEY")
}

func model(cfg provider.Config) (string, error) {
	m := cfg.Model
	if m == "" {
		m = os.Getenv("OPENAI_MODEL")
	}
	if m == "" {
		return "", errors.New("openai: no model: create the agent with --model NAME (or set OPENAI_MODEL)")
	}
	return m, nil
}

// Create starts a fresh conversation.
func (p *Provider) Create(ctx context.Context, cfg provider.Config) (provider.Session, error) {
	if f := p.stateFile(cfg); f != "" {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("openai: removing the old conversation: %w", err)
		}
	}
	return p.start(cfg, &blob{Version: 1, SessionID: "openai-" + uuid.NewString()}, true)
}

// stateFile is where cfg's conversation is saved after each turn, or ""
// if nowhere.
func (p *Provider) stateFile(cfg provider.Config) string {
	dir := p.opts.StateDir
	if dir == "" {
		home, err := cli.Home(p.opts.Name, p.opts.Home, cfg)
		if err != nil {
			return ""
		}
		dir = fsstore.Layout{Home: home}.ProviderDir(p.opts.Name)
	}
	if id := cfg.AgentID; id == "" || filepath.Base(id) != id || id == "." || id == ".." {
		return ""
	}
	return filepath.Join(dir, "sessions", cfg.AgentID+".json")
}

// Restore resumes a conversation from a Suspend blob; for nil, from the
// conversation saved after the last turn, or a fresh one if there is none.
// Errors: provider.ErrBadState.
func (p *Provider) Restore(ctx context.Context, cfg provider.Config, state []byte) (provider.Session, error) {
	if state == nil {
		f := p.stateFile(cfg)
		if f == "" {
			return p.start(cfg, &blob{Version: 1, SessionID: "openai-" + uuid.NewString()}, true)
		}
		data, err := fsstore.ReadRegular(f, fsstore.MaxFileSize)
		if errors.Is(err, os.ErrNotExist) {
			return p.start(cfg, &blob{Version: 1, SessionID: "openai-" + uuid.NewString()}, true)
		}
		if err != nil {
			return nil, fmt.Errorf("openai: reading the saved conversation: %w", err)
		}
		s, err := p.Restore(ctx, cfg, data)
		if err != nil {
			return nil, fmt.Errorf("%w (in %s; delete it to start the conversation afresh)", err, f)
		}
		return s, nil
	}
	var b blob
	dec := json.NewDecoder(bytes.NewReader(state))
	if err := dec.Decode(&b); err != nil {
		return nil, fmt.Errorf("%w: openai: %v", provider.ErrBadState, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: openai: data after the blob", provider.ErrBadState)
	}
	if b.Version != 1 || b.SessionID == "" {
		return nil, fmt.Errorf("%w: openai: want version 1 and a session id, got version %d, id %q", provider.ErrBadState, b.Version, b.SessionID)
	}
	for i, m := range b.Messages {
		if m.Role == "" {
			return nil, fmt.Errorf("%w: openai: message %d has no role", provider.ErrBadState, i)
		}
	}
	return p.start(cfg, &b, false)
}

func (p *Provider) start(cfg provider.Config, b *blob, report bool) (provider.Session, error) {
	m, err := model(cfg)
	if err != nil {
		return nil, err
	}
	// The agent's instructions are the system prompt, first.
	msgs := withSystem(b.Messages, cfg.Instructions)
	s := &session{p: p, cfg: cfg, model: m, id: b.SessionID, msgs: msgs, requests: b.Requests}
	if report && cfg.SessionID != nil {
		if err := cfg.SessionID(s.id); err != nil {
			return nil, fmt.Errorf("openai: saving session id %s: %w", s.id, err)
		}
	}
	return s, nil
}

// withSystem returns msgs with instructions as the system message, first
// (none if they are empty).
func withSystem(msgs []message, instructions string) []message {
	if len(msgs) > 0 && msgs[0].Role == "system" {
		msgs = msgs[1:]
	}
	if instructions == "" {
		return msgs
	}
	return append([]message{{Role: "system", Content: strPtr(instructions)}}, msgs...)
}

// blob is the state blob.
type blob struct {
	Version   int       `json:"version"`
	SessionID string    `json:"session_id"`
	Requests  int       `json:"requests,omitempty"` // requests made, for call ids
	Messages  []message `json:"messages"`
}

// Wire types.
type message struct {
	Role       string     `json:"role"`
	Content    *string    `json:"content"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type toolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function functionCall `json:"function"`
}

type functionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type toolDef struct {
	Type     string      `json:"type"`
	Function functionDef `json:"function"`
}

type functionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

type chatRequest struct {
	Model         string         `json:"model"`
	Messages      []message      `json:"messages"`
	Tools         []toolDef      `json:"tools,omitempty"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

type apiError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    any    `json:"code"`
}

func (e *apiError) String() string {
	s := e.Message
	if e.Type != "" {
		s = e.Type + ": " + s
	}
	return s
}

func strPtr(s string) *string { return &s }

// session is one conversation.
type session struct {
	p     *Provider
	cfg   provider.Config
	model string
	id    string

	mu       sync.Mutex // guards the fields below
	busy     bool
	stopped  bool
	msgs     []message
	requests int
}

func (s *session) Send(ctx context.Context, turn provider.Turn) (provider.TurnResult, error) {
	s.mu.Lock()
	switch {
	case s.stopped:
		s.mu.Unlock()
		return provider.TurnResult{}, fmt.Errorf("openai: session %s: %w", s.id, provider.ErrStopped)
	case s.busy:
		s.mu.Unlock()
		return provider.TurnResult{}, fmt.Errorf("openai: session %s: %w", s.id, provider.ErrBusy)
	}
	s.busy = true
	msgs := append([]message(nil), s.msgs...)
	requests := s.requests
	s.mu.Unlock()

	msgs = withSystem(msgs, provider.InstructionsOf(s.cfg, turn))
	t := &turnRun{s: s, turn: turn, msgs: msgs, requests: requests}
	res, err := t.run(ctx)

	if err == nil {
		err = s.save(t.msgs, t.requests)
	}
	s.mu.Lock()
	s.busy = false
	if err == nil && !s.stopped {
		s.msgs, s.requests = t.msgs, t.requests
	}
	s.mu.Unlock()
	if err != nil {
		return provider.TurnResult{}, fmt.Errorf("openai: model %s: %w", s.model, err)
	}
	return res, nil
}

// save writes the conversation to the state file, if there is one:
// atomically, fsynced, directory fsynced.
func (s *session) save(msgs []message, requests int) error {
	f := s.p.stateFile(s.cfg)
	if f == "" {
		return nil
	}
	data, err := json.Marshal(blob{Version: 1, SessionID: s.id, Requests: requests, Messages: msgs})
	if err != nil {
		return err
	}
	dir := filepath.Dir(f)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("saving the conversation: %w", err)
	}
	if err := renameio.WriteFile(f, data, 0o600, renameio.WithTempDir(dir)); err != nil {
		return fmt.Errorf("saving the conversation: %w", err)
	}
	d, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY, 0) // never blocks on a FIFO
	if err != nil {
		return fmt.Errorf("saving the conversation: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("saving the conversation: %w", err)
	}
	return nil
}

func (s *session) Suspend(ctx context.Context) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopped:
		return nil, fmt.Errorf("openai: session %s: %w", s.id, provider.ErrStopped)
	case s.busy:
		return nil, fmt.Errorf("openai: session %s: %w", s.id, provider.ErrBusy)
	}
	s.stopped = true
	return json.Marshal(blob{Version: 1, SessionID: s.id, Requests: s.requests, Messages: s.msgs})
}

func (s *session) Stop() error {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	return nil
}

// turnRun is one turn: requests until a final answer.
type turnRun struct {
	s        *session
	turn     provider.Turn
	msgs     []message
	requests int
	usage    provider.Usage
	size     int
}

func (t *turnRun) emit(kind, text string) {
	if t.turn.Output != nil && text != "" {
		t.turn.Output(provider.Chunk{Kind: kind, Text: text})
	}
}

func (t *turnRun) run(ctx context.Context) (provider.TurnResult, error) {
	if err := ctx.Err(); err != nil {
		return provider.TurnResult{}, err
	}
	t.msgs = append(t.msgs, message{Role: "user", Content: strPtr(t.turn.Prompt)})
	var texts []string
	for round := 0; round < t.s.p.opts.MaxRounds; round++ {
		reply, err := t.complete(ctx)
		if err != nil {
			return provider.TurnResult{}, err
		}
		t.requests++
		if reply.text != "" {
			texts = append(texts, reply.text)
		}
		am := message{Role: "assistant", Content: strPtr(reply.text), ToolCalls: reply.calls}
		t.msgs = append(t.msgs, am)
		if len(reply.calls) == 0 {
			return provider.TurnResult{Text: strings.Join(texts, "\n"), Usage: t.usage}, nil
		}
		for i := range reply.calls {
			c := &reply.calls[i]
			if c.ID == "" {
				c.ID = t.callID(i)
			}
			res := t.callTool(ctx, c)
			if err := ctx.Err(); err != nil {
				return provider.TurnResult{}, err
			}
			t.msgs = append(t.msgs, message{Role: "tool", ToolCallID: c.ID, Content: strPtr(toolText(res))})
		}
	}
	return provider.TurnResult{}, fmt.Errorf("the model was still calling tools after %d requests in one turn", t.s.p.opts.MaxRounds)
}

// toolText is what the model reads of a tool result.
func toolText(res provider.ToolResult) string {
	if res.IsError {
		return "error: " + res.Text
	}
	return res.Text
}

func (t *turnRun) callID(i int) string {
	sum := sha256.Sum256([]byte(t.s.id + "\x00" + strconv.Itoa(t.requests) + "\x00" + strconv.Itoa(i)))
	return "call_" + hex.EncodeToString(sum[:])[:24]
}

func (t *turnRun) callTool(ctx context.Context, c *toolCall) provider.ToolResult {
	args := json.RawMessage(strings.TrimSpace(c.Function.Arguments))
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	var res provider.ToolResult
	switch {
	case json.Unmarshal(args, &obj) != nil || obj == nil:
		res = provider.ToolResult{IsError: true, Text: fmt.Sprintf("the arguments of %s are not a JSON object: %.200s", c.Function.Name, args)}
	case t.turn.Tools == nil:
		res = provider.ToolResult{IsError: true, Text: "no agent tools in this turn"}
	default:
		t.emit("tool_call", c.Function.Name+" "+string(args))
		res = t.turn.Tools.CallTool(ctx, provider.ToolCall{ID: c.ID, Name: c.Function.Name, Args: args})
	}
	line := c.Function.Name + " -> " + res.Text
	if res.IsError {
		line = c.Function.Name + " -> error: " + res.Text
	}
	t.emit("tool_result", line)
	return res
}

// reply is one assistant message.
type reply struct {
	text  string
	calls []toolCall
}

func (t *turnRun) request() chatRequest {
	req := chatRequest{Model: t.s.model, Messages: t.msgs, Stream: true, StreamOptions: &streamOptions{IncludeUsage: true}}
	var list []Tool
	switch {
	case t.turn.ToolList != nil:
		for _, tl := range t.turn.ToolList {
			list = append(list, Tool{Name: tl.Name, Description: tl.Description, Parameters: tl.Parameters})
		}
	case t.s.p.opts.Tools != nil:
		list = t.s.p.opts.Tools()
	}
	{
		for _, tl := range list {
			params := tl.Parameters
			if len(bytes.TrimSpace(params)) == 0 {
				params = json.RawMessage(`{"type":"object","properties":{}}`)
			}
			req.Tools = append(req.Tools, toolDef{Type: "function", Function: functionDef{Name: tl.Name, Description: tl.Description, Parameters: params}})
		}
	}
	return req
}

// complete makes one request, with retries.
func (t *turnRun) complete(ctx context.Context) (reply, error) {
	body, err := json.Marshal(t.request())
	if err != nil {
		return reply{}, err
	}
	url := t.s.p.baseURL() + "/chat/completions"
	var out reply
	err = t.s.p.opts.Retry.Do(ctx, "POST "+url, func(ctx context.Context) error {
		r, u, err := t.attempt(ctx, url, body)
		if err == nil {
			out = r
			t.usage.InputTokens += u.PromptTokens
			t.usage.OutputTokens += u.CompletionTokens
		}
		return err
	})
	return out, err
}

// attempt posts once and reads the whole answer.
func (t *turnRun) attempt(ctx context.Context, url string, body []byte) (reply, usage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return reply{}, usage{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if key := t.s.p.apiKey(); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := t.s.p.opts.HTTPClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return reply{}, usage{}, ctx.Err()
		}
		if retry.NetworkTransient(err) {
			return reply{}, usage{}, &retry.Transient{Err: err}
		}
		return reply{}, usage{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		snippet := readSnippet(resp)
		err := fmt.Errorf("%s: %s", resp.Status, snippet)
		if retry.RetryableStatus(resp.StatusCode) || retry.IsOverloaded(snippet) && resp.StatusCode >= 400 && resp.StatusCode != 401 && resp.StatusCode != 403 {
			return reply{}, usage{}, &retry.Transient{Status: resp.StatusCode, RetryAfter: retry.ParseRetryAfter(resp.Header, time.Now()), Err: errors.New(snippet)}
		}
		return reply{}, usage{}, err
	}
	var r reply
	var u usage
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/json") {
		r, u, err = t.readJSON(resp)
	} else {
		r, u, err = t.readStream(ctx, resp)
	}
	if err != nil && ctx.Err() != nil {
		return reply{}, usage{}, ctx.Err()
	}
	return r, u, err
}

func readSnippet(resp *http.Response) string {
	buf := make([]byte, errBodyQuote)
	n, _ := fullRead(resp.Body, buf)
	s := strings.TrimSpace(string(buf[:n]))
	// Prefer the API's own message.
	var e struct {
		Error *apiError `json:"error"`
	}
	if json.Unmarshal(buf[:n], &e) == nil && e.Error != nil && e.Error.Message != "" {
		return e.Error.String()
	}
	if s == "" {
		s = "(empty body)"
	}
	return s
}

func fullRead(r interface{ Read([]byte) (int, error) }, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// chunk is one streamed event, or a whole JSON completion.
type chunk struct {
	Choices []struct {
		Delta   *delta `json:"delta"`
		Message *delta `json:"message"`
		Finish  string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage    `json:"usage"`
	Error *apiError `json:"error"`
}

type delta struct {
	Content   *string `json:"content"`
	ToolCalls []struct {
		Index    *int   `json:"index"`
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// assembler builds a reply from deltas.
type assembler struct {
	t     *turnRun
	text  strings.Builder
	calls []toolCall
	done  bool // a finish reason was seen
}

func (a *assembler) add(d *delta, stream bool) error {
	if d == nil {
		return nil
	}
	if d.Content != nil && *d.Content != "" {
		if a.t.size += len(*d.Content); a.t.size > maxTurnText {
			return fmt.Errorf("%w: more than %d bytes of text in one turn", provider.ErrProtocol, maxTurnText)
		}
		a.text.WriteString(*d.Content)
		if stream {
			a.t.emit("text", *d.Content)
		}
	}
	for _, tc := range d.ToolCalls {
		i := len(a.calls)
		if tc.Index != nil {
			i = *tc.Index
		} else if tc.ID == "" && i > 0 {
			i-- // a continuation without an index
		}
		if i < 0 || i > len(a.calls) || i > 128 {
			return fmt.Errorf("%w: tool call index %d out of order", provider.ErrProtocol, i)
		}
		if i == len(a.calls) {
			a.calls = append(a.calls, toolCall{Type: "function"})
		}
		c := &a.calls[i]
		if tc.ID != "" {
			c.ID = tc.ID
		}
		c.Function.Name += tc.Function.Name
		c.Function.Arguments += tc.Function.Arguments
		if len(c.Function.Arguments) > maxEventSize {
			return fmt.Errorf("%w: tool call arguments over %d bytes", provider.ErrProtocol, maxEventSize)
		}
	}
	return nil
}

func (a *assembler) reply() (reply, error) {
	for i, c := range a.calls {
		if c.Function.Name == "" {
			return reply{}, fmt.Errorf("%w: tool call %d has no name", provider.ErrProtocol, i)
		}
	}
	return reply{text: a.text.String(), calls: a.calls}, nil
}

func (t *turnRun) readJSON(resp *http.Response) (reply, usage, error) {
	var c chunk
	dec := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, maxTurnText))
	if err := dec.Decode(&c); err != nil {
		return reply{}, usage{}, fmt.Errorf("%w: the completion is not JSON: %v", provider.ErrProtocol, err)
	}
	if c.Error != nil {
		return reply{}, usage{}, apiErr(c.Error)
	}
	if len(c.Choices) == 0 || c.Choices[0].Message == nil {
		return reply{}, usage{}, fmt.Errorf("%w: the completion has no message", provider.ErrProtocol)
	}
	a := &assembler{t: t}
	if err := a.add(c.Choices[0].Message, false); err != nil {
		return reply{}, usage{}, err
	}
	r, err := a.reply()
	if err == nil {
		if r.text != "" {
			t.emit("text", r.text)
		}
	}
	var u usage
	if c.Usage != nil {
		u = *c.Usage
	}
	return r, u, err
}

func apiErr(e *apiError) error {
	if retry.IsOverloaded(e.Type + " " + e.Message + " " + fmt.Sprint(e.Code)) {
		return &retry.Transient{Err: errors.New(e.String())}
	}
	return fmt.Errorf("the API reported an error: %s", e.String())
}

// readStream reads server-sent events until [DONE].
func (t *turnRun) readStream(ctx context.Context, resp *http.Response) (reply, usage, error) {
	sc := newEventScanner(resp.Body, maxEventSize)
	a := &assembler{t: t}
	var u usage
	events := 0
	for {
		data, err := sc.next()
		if err != nil {
			if ctx.Err() != nil {
				return reply{}, usage{}, ctx.Err()
			}
			if errors.Is(err, errEventTooLong) {
				return reply{}, usage{}, fmt.Errorf("%w: %v", provider.ErrProtocol, err)
			}
			if errors.Is(err, provider.ErrProtocol) {
				return reply{}, usage{}, err
			}
			if errors.Is(err, errEOF) {
				if a.done {
					break // some servers end without [DONE]
				}
				return reply{}, usage{}, &retry.Transient{Err: fmt.Errorf("the stream ended after %d events without [DONE]", events)}
			}
			if retry.NetworkTransient(err) {
				return reply{}, usage{}, &retry.Transient{Err: fmt.Errorf("reading the stream after %d events: %w", events, err)}
			}
			return reply{}, usage{}, fmt.Errorf("reading the stream: %w", err)
		}
		if string(data) == "[DONE]" {
			break
		}
		events++
		var c chunk
		if err := json.Unmarshal(data, &c); err != nil {
			return reply{}, usage{}, fmt.Errorf("%w: event %d is not JSON (%v): %q", provider.ErrProtocol, events, err, quote(data))
		}
		if c.Error != nil {
			return reply{}, usage{}, apiErr(c.Error)
		}
		if c.Usage != nil {
			u = *c.Usage
		}
		for _, ch := range c.Choices {
			if err := a.add(ch.Delta, true); err != nil {
				return reply{}, usage{}, err
			}
			if ch.Finish != "" {
				a.done = true
			}
		}
	}
	r, err := a.reply()
	return r, u, err
}

func quote(b []byte) string {
	if len(b) > badQuote {
		return string(b[:badQuote]) + "..."
	}
	return string(b)
}
