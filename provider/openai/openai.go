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
// # The context window
//
// The provider keeps the conversation within the model's context window
// (window.go says how the window is learned: the server's error, then
// Options.ContextWindows, $OPENAI_CONTEXT_WINDOW, what the server reports,
// else DefaultContextWindow). Before a request would pass Options.CompactAt
// of it (else $OPENAI_COMPACT_AT, else 0.8), and when the server answers
// that a request is over it (then the request is retried once, and the
// turn does not fail for it), the older turns are replaced by a summary
// that the model writes (compact.go). Each compaction is reported in the
// turn's result (provider.TurnResult.Compactions), with the context use
// after the turn (ContextTokens of ContextWindow). Usage counts the
// summary requests.
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
// {"version":1,"session_id":…,"messages":[…]} (with the summary and the
// turn counts, when there are); Restore accepts that. The daemon saves the
// blob only at suspend, so the provider also keeps the conversation in
// <home>/providers/openai/sessions/ (see Options.StateDir): a base,
// <agent-id>.json, written at a session's first turn and at each
// compaction, and a journal, <agent-id>.journal, one line appended per
// turn (state.go describes them). What it writes per turn is the turn,
// never the whole conversation, and the files stay within a few times the
// window's size. Restore(nil), as after a crash, resumes from them; with
// no base it starts a fresh conversation. Create removes them.
//
// Tool calls the model makes without an id (some local servers) get
// "call_" + a hash of the session id, the request's position in the session
// and the call's index. Arguments that are not a JSON object reach the
// model back as an error result, without running the tool.
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

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
	errBodyRead      = 8 << 10  // bytes of an error body read
	badQuote         = 200      // bytes of a bad event quoted
	defaultCompactAt = 0.8      // share of the window that triggers a compaction
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
	// holds each agent's conversation, saved with every turn, so that
	// Restore(nil) resumes it after a crash. When neither can be had, the
	// conversation lives only in the state blob.
	Home     string
	StateDir string
	// ContextWindows are models' context windows in tokens, by model
	// name, over what the server reports (see window.go). A model not
	// named here has $OPENAI_CONTEXT_WINDOW if set, else what the
	// server reports, else DefaultContextWindow.
	ContextWindows map[string]int
	// CompactAt is the share of the window a request may fill before the
	// conversation is compacted; default $OPENAI_COMPACT_AT, else 0.8.
	CompactAt float64
}

// Provider is the openai provider.
type Provider struct {
	opts Options

	mu      sync.Mutex     // guards the fields below
	windows map[string]int // model -> window learned from the server
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
	if opts.CompactAt <= 0 || opts.CompactAt > 1 {
		opts.CompactAt, _ = strconv.ParseFloat(os.Getenv("OPENAI_COMPACT_AT"), 64)
	}
	if opts.CompactAt < 0.2 || opts.CompactAt > 1 {
		opts.CompactAt = defaultCompactAt
	}
	return &Provider{opts: opts, windows: map[string]int{}}
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
	if f := p.stateFiles(cfg); f.base != "" {
		if err := f.remove(); err != nil {
			return nil, fmt.Errorf("openai: removing the old conversation: %w", err)
		}
	}
	return p.start(cfg, &blob{Version: 1, SessionID: "openai-" + uuid.NewString()}, true, false)
}

// stateFile is where cfg's conversation's base is saved, or "" if
// nowhere; its journal is beside it (see state.go).
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
		f := p.stateFiles(cfg)
		if f.base == "" {
			return p.start(cfg, &blob{Version: 1, SessionID: "openai-" + uuid.NewString()}, true, false)
		}
		b, err := f.load()
		if errors.Is(err, os.ErrNotExist) {
			return p.start(cfg, &blob{Version: 1, SessionID: "openai-" + uuid.NewString()}, true, false)
		}
		if err != nil {
			return nil, fmt.Errorf("openai: %w (in %s; delete it and %s to start the conversation afresh)", err, f.base, filepath.Base(f.journal))
		}
		return p.start(cfg, b, false, true)
	}
	b, err := decodeBlob(state)
	if err != nil {
		return nil, err
	}
	return p.start(cfg, b, false, false)
}

// decodeBlob reads a state blob (or a base file). Errors:
// provider.ErrBadState.
func decodeBlob(data []byte) (*blob, error) {
	var b blob
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&b); err != nil {
		return nil, fmt.Errorf("%w: openai: %v", provider.ErrBadState, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: openai: data after the blob", provider.ErrBadState)
	}
	if b.Version != 1 || b.SessionID == "" {
		return nil, fmt.Errorf("%w: openai: want version 1 and a session id, got version %d, id %q", provider.ErrBadState, b.Version, b.SessionID)
	}
	if err := checkMessages(b.Messages); err != nil {
		return nil, err
	}
	return &b, nil
}

func checkMessages(msgs []message) error {
	for i, m := range msgs {
		if m.Role == "" {
			return fmt.Errorf("%w: openai: message %d has no role", provider.ErrBadState, i)
		}
	}
	return nil
}

// start makes the session of b; saved says b is what the state files
// hold (Restore(nil)), so that the next turn only appends to them.
func (p *Provider) start(cfg provider.Config, b *blob, report, saved bool) (provider.Session, error) {
	m, err := model(cfg)
	if err != nil {
		return nil, err
	}
	// The agent's instructions are the system prompt, first, with the
	// summary of what was compacted after them.
	msgs := withSystem(b.Messages, cfg.Instructions, b.Summary, b.Summarized)
	c := conv{msgs: msgs, requests: b.Requests, gen: b.Gen, turns: b.Turns, summarized: b.Summarized, summary: b.Summary, saved: saved}
	if _, turns := splitTurns(msgs); c.turns < c.summarized+len(turns) {
		c.turns = c.summarized + len(turns) // saved before turns were counted
	}
	s := &session{p: p, cfg: cfg, model: m, id: b.SessionID, c: c, ratio: 1}
	if report && cfg.SessionID != nil {
		if err := cfg.SessionID(s.id); err != nil {
			return nil, fmt.Errorf("openai: saving session id %s: %w", s.id, err)
		}
	}
	return s, nil
}

// withSystem returns msgs with the system message first: instructions,
// then the summary of the first summarized turns (none if both are
// empty).
func withSystem(msgs []message, instructions, summary string, summarized int) []message {
	if len(msgs) > 0 && msgs[0].Role == "system" {
		msgs = msgs[1:]
	}
	sys := instructions
	if summary != "" {
		if sys != "" {
			sys += "\n\n"
		}
		sys += summaryBlock(summary, summarized)
	}
	if sys == "" {
		return msgs
	}
	return append([]message{{Role: "system", Content: strPtr(sys)}}, msgs...)
}

// blob is the state blob, and the base file.
type blob struct {
	Version   int    `json:"version"`
	SessionID string `json:"session_id"`
	Requests  int    `json:"requests,omitempty"` // requests made, for call ids
	// Gen counts the base files written; journal lines carry it.
	Gen int64 `json:"gen,omitempty"`
	// Turns is how many turns the conversation has had, Summarized how
	// many of the first of them Summary replaced (Messages hold the
	// rest).
	Turns      int       `json:"turns,omitempty"`
	Summarized int       `json:"summarized,omitempty"`
	Summary    string    `json:"summary,omitempty"`
	Messages   []message `json:"messages"`
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
	MaxTokens     int            `json:"max_tokens,omitempty"`
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
