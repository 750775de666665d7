// Package native is the script provider run in-process (see package
// provider/script): its sessions, its state blob and its native mode,
// which reads the prompt and calls tools, with nothing run. Model mode, a
// program of the user's own run for each turn, comes through a Model
// hook: package script gives it; without one (the simulation's) a
// session with a model fails to start.
package native

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/substrat/substrat/provider"
	promptpkg "github.com/substrat/substrat/provider/prompt"
)

// Name is the name the provider is registered under.
const Name = "script"

const stateVersion = 1

// Model runs one turn of a session in model mode (see package script).
type Model func(ctx context.Context, t ModelTurn) (provider.TurnResult, error)

// ModelTurn is one turn of a session in model mode.
type ModelTurn struct {
	// Path is the model program, an absolute path.
	Path      string
	Config    provider.Config
	SessionID string
	Turn      provider.Turn
	// N is the turn's number, from 1.
	N int
}

// New returns the script provider, with model mode run by model (nil:
// none).
func New(model Model) provider.Provider { return scriptProvider{model: model} }

type scriptProvider struct {
	model Model
}

func (scriptProvider) Name() string { return Name }

// Create starts a session and reports its id through cfg.SessionID.
func (p scriptProvider) Create(ctx context.Context, cfg provider.Config) (provider.Session, error) {
	s, err := p.newSession(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.SessionID != nil {
		if err := cfg.SessionID(s.id); err != nil {
			return nil, fmt.Errorf("script: agent %s: saving session id %s: %w", cfg.AgentID, s.id, err)
		}
	}
	return s, nil
}

// state is the Suspend blob.
type state struct {
	Version   int    `json:"version"`
	SessionID string `json:"session_id"`
	Turns     int    `json:"turns"`
}

// Restore resumes a session from a Suspend blob, or afresh from nil.
func (p scriptProvider) Restore(ctx context.Context, cfg provider.Config, blob []byte) (provider.Session, error) {
	s, err := p.newSession(cfg)
	if err != nil {
		return nil, err
	}
	if len(blob) == 0 {
		return s, nil
	}
	var st state
	if err := json.Unmarshal(blob, &st); err != nil {
		return nil, fmt.Errorf("script: agent %s: %w: %v (blob starts %s)", cfg.AgentID, provider.ErrBadState, err, quote(blob, 64))
	}
	switch {
	case st.Version != stateVersion:
		return nil, fmt.Errorf("script: agent %s: %w: version %d, want %d", cfg.AgentID, provider.ErrBadState, st.Version, stateVersion)
	case st.SessionID != s.id:
		return nil, fmt.Errorf("script: agent %s: %w: session_id %q, want %q", cfg.AgentID, provider.ErrBadState, st.SessionID, s.id)
	case st.Turns < 0:
		return nil, fmt.Errorf("script: agent %s: %w: turns %d is negative", cfg.AgentID, provider.ErrBadState, st.Turns)
	}
	s.turns = st.Turns
	return s, nil
}

func (p scriptProvider) newSession(cfg provider.Config) (*session, error) {
	if cfg.AgentID == "" {
		return nil, errors.New("script: config has no agent id")
	}
	s := &session{cfg: cfg, id: "script-" + cfg.AgentID, run: p.model}
	if cfg.Model != "" {
		if p.model == nil {
			return nil, fmt.Errorf("script: agent %s: model mode runs no program here (model %s)", cfg.AgentID, cfg.Model)
		}
		path, err := checkModel(cfg.Model)
		if err != nil {
			return nil, fmt.Errorf("script: agent %s: %w", cfg.AgentID, err)
		}
		s.model = path
	}
	return s, nil
}

// checkModel returns the absolute path of the model program, or why it
// cannot be run.
func checkModel(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("model %q: %w", path, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("model: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("model %s: not an executable file (mode %v)", abs, fi.Mode())
	}
	return abs, nil
}

// session is one script session, native or model mode.
type session struct {
	cfg   provider.Config
	id    string
	model string // absolute path of the model program; "" in native mode
	run   Model  // runs a turn of model mode

	mu      sync.Mutex // guards the fields below
	turns   int        // successful turns
	busy    bool
	stopped bool
	cancel  context.CancelFunc // cancels the running turn, if busy
}

// Send runs one turn. Errors: ErrStopped, ErrBusy, ErrProtocol (model mode),
// an error wrapping ctx.Err(), or the model's own error.
func (s *session) Send(ctx context.Context, turn provider.Turn) (provider.TurnResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	s.mu.Lock()
	switch {
	case s.stopped:
		s.mu.Unlock()
		return provider.TurnResult{}, fmt.Errorf("script: session %s: %w", s.id, provider.ErrStopped)
	case s.busy:
		s.mu.Unlock()
		return provider.TurnResult{}, fmt.Errorf("script: session %s: %w", s.id, provider.ErrBusy)
	}
	s.busy, s.cancel = true, cancel
	n := s.turns + 1
	s.mu.Unlock()

	var res provider.TurnResult
	err := ctx.Err()
	if err == nil {
		if s.model == "" {
			res, err = s.sendNative(ctx, turn)
		} else {
			res, err = s.run(ctx, ModelTurn{Path: s.model, Config: s.cfg, SessionID: s.id, Turn: turn, N: n})
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy, s.cancel = false, nil
	if err != nil {
		if s.stopped {
			return provider.TurnResult{}, fmt.Errorf("script: session %s: %w during the turn (%v)", s.id, provider.ErrStopped, err)
		}
		return provider.TurnResult{}, err
	}
	s.turns++
	return res, nil
}

// Suspend returns the state blob and ends the session. Errors: ErrStopped,
// ErrBusy.
func (s *session) Suspend(ctx context.Context) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopped:
		return nil, fmt.Errorf("script: session %s: %w", s.id, provider.ErrStopped)
	case s.busy:
		return nil, fmt.Errorf("script: session %s: %w", s.id, provider.ErrBusy)
	}
	s.stopped = true
	return json.Marshal(state{Version: stateVersion, SessionID: s.id, Turns: s.turns})
}

// Stop ends the session, cancelling a running turn (which then fails with
// ErrStopped). It is idempotent.
func (s *session) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	if s.cancel != nil {
		s.cancel()
	}
	return nil
}

// ToolUseID is the deterministic tool-use id of the index'th (0-based)
// command line of message messageID in a prompt to agent agentID.
func ToolUseID(agentID, messageID string, index int) string {
	sum := sha256.Sum256([]byte(agentID + "\x00" + messageID + "\x00" + strconv.Itoa(index)))
	return "toolu_script_" + hex.EncodeToString(sum[:])[:24]
}

// PromptKey stands in for the message id of a prompt without headers.
func PromptKey(prompt string) string {
	sum := sha256.Sum256([]byte(prompt))
	return hex.EncodeToString(sum[:])
}

type lineKind int

const (
	lineText    lineKind = iota // echoed
	lineCall                    // a command line with good args
	lineBadCall                 // a command line whose args are not a JSON object
	lineSleep                   // "!sleep DURATION": think time, no tool call
)

// maxSleep bounds one "!sleep" line.
const maxSleep = time.Minute

// line is one meaningful line of a native prompt.
type line struct {
	kind      lineKind
	text      string          // lineText: the line as written
	name      string          // command lines: the tool name
	args      json.RawMessage // lineCall
	argsError string          // lineBadCall: what is wrong with the args
	messageID string          // command lines: the message the line is in
	index     int             // command lines: position among the message's command lines
	delay     time.Duration   // lineSleep
}

var headerRE = regexp.MustCompile(`^\[message (\S+) from (.+)\]$`)

// parsePrompt splits a native-mode prompt into echoed and command lines.
func parsePrompt(prompt string) []line {
	var (
		lines     []line
		messageID = PromptKey(prompt)
		index     = 0
	)
	texts := strings.Split(prompt, "\n")
	tag := promptpkg.PreambleTag(texts[0])
	if tag != "" {
		texts = texts[1:]
	}
	for _, text := range texts {
		text = strings.TrimSuffix(text, "\r")
		trimmed := strings.TrimSpace(text)
		if trimmed == "" {
			continue
		}
		if tag != "" {
			// A framed prompt (the daemon's): only lines with its tag
			// are framing, and bodies are escaped.
			if m, ok := promptpkg.Header(trimmed, tag); ok {
				messageID, index = m.ID, 0
				continue
			}
			if _, ok := promptpkg.End(trimmed, tag); ok {
				continue
			}
			text = promptpkg.Unescape(text)
			trimmed = strings.TrimSpace(text)
		} else if m := headerRE.FindStringSubmatch(trimmed); m != nil {
			messageID, index = m[1], 0
			continue
		}
		if rest, ok := strings.CutPrefix(trimmed, "!sleep "); ok {
			if d, err := time.ParseDuration(strings.TrimSpace(rest)); err == nil && d >= 0 {
				lines = append(lines, line{kind: lineSleep, delay: min(d, maxSleep)})
				continue
			}
		}
		name, rawArgs, ok := parseCommand(trimmed)
		if !ok {
			lines = append(lines, line{kind: lineText, text: text})
			continue
		}
		l := line{kind: lineCall, name: name, messageID: messageID, index: index}
		index++
		args, err := parseArgs(rawArgs)
		if err != nil {
			l.kind, l.argsError = lineBadCall, err.Error()
		}
		l.args = args
		lines = append(lines, l)
	}
	return lines
}

// parseCommand splits "!name args" (already trimmed). ok is false if s is
// not a command line.
func parseCommand(s string) (name, args string, ok bool) {
	rest, found := strings.CutPrefix(s, "!")
	if !found {
		return "", "", false
	}
	n := 0
	for n < len(rest) && isNameByte(rest[n], n == 0) {
		n++
	}
	if n == 0 {
		return "", "", false
	}
	if n < len(rest) && !strings.ContainsRune(" \t{", rune(rest[n])) {
		return "", "", false
	}
	return rest[:n], strings.TrimSpace(rest[n:]), true
}

func isNameByte(c byte, first bool) bool {
	switch {
	case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		return true
	case first:
		return false
	default:
		return c == '-' || c == '.' || '0' <= c && c <= '9'
	}
}

// parseArgs checks that s is one JSON object; "" means {}.
func parseArgs(s string) (json.RawMessage, error) {
	if s == "" {
		return json.RawMessage("{}"), nil
	}
	if s[0] != '{' {
		return nil, fmt.Errorf("args must be a JSON object, got %s", quote([]byte(s), 80))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("args are not a JSON object: %v", err)
	}
	return json.RawMessage(s), nil
}

func (s *session) sendNative(ctx context.Context, turn provider.Turn) (provider.TurnResult, error) {
	var echoed, results []string
	for _, l := range parsePrompt(turn.Prompt) {
		switch l.kind {
		case lineText:
			echoed = append(echoed, l.text)
			Emit(turn, "text", l.text)
		case lineSleep:
			t := time.NewTimer(l.delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return provider.TurnResult{}, fmt.Errorf("script: session %s: %w", s.id, ctx.Err())
			}
		case lineBadCall:
			r := ResultLine(l.name, provider.ToolResult{Text: l.argsError, IsError: true})
			results = append(results, r)
			Emit(turn, "tool_result", r)
		case lineCall:
			call := provider.ToolCall{ID: ToolUseID(s.cfg.AgentID, l.messageID, l.index), Name: l.name, Args: l.args}
			Emit(turn, "tool_call", l.name+" "+string(l.args))
			r := ResultLine(l.name, CallTool(ctx, turn.Tools, call))
			if err := ctx.Err(); err != nil {
				return provider.TurnResult{}, fmt.Errorf("script: session %s: %w", s.id, err)
			}
			results = append(results, r)
			Emit(turn, "tool_result", r)
		}
	}
	text := strings.Join(append(echoed, results...), "\n")
	return provider.TurnResult{Text: text, Usage: Estimate(turn.Prompt, text)}, nil
}

// Emit streams a chunk of kind with text, if the turn takes them.
func Emit(turn provider.Turn, kind, text string) {
	if turn.Output != nil {
		turn.Output(provider.Chunk{Kind: kind, Text: text})
	}
}

// CallTool calls an agent tool of the turn, or says there are none.
func CallTool(ctx context.Context, tools provider.ToolHandler, call provider.ToolCall) provider.ToolResult {
	if tools == nil {
		return provider.ToolResult{Text: "no agent tools in this turn", IsError: true}
	}
	return tools.CallTool(ctx, call)
}

// ResultLine is the line a tool result adds to the turn text.
func ResultLine(name string, r provider.ToolResult) string {
	if r.IsError {
		return name + " -> error: " + r.Text
	}
	return name + " -> " + r.Text
}

// Estimate is the usage of a turn that does not report its own.
func Estimate(prompt, text string) provider.Usage {
	return provider.Usage{
		InputTokens:  int64(len(prompt)+3) / 4,
		OutputTokens: int64(len(text)+3) / 4,
	}
}

// quote quotes b for a message, cut to n bytes.
func quote(b []byte, n int) string {
	if len(b) > n {
		return fmt.Sprintf("%q...", b[:n])
	}
	return fmt.Sprintf("%q", b)
}
