// Package cli is the engine of the providers that drive a model CLI in
// print mode (claude, cursor-agent): one process per turn, whose output is
// JSON lines; the CLI keeps the conversation, and Substrat keeps its
// session id.
//
// An adapter gives a Spec: how to build a turn's command and how to read
// one output line. The engine runs the process (see package proc), streams
// chunks, persists the CLI's session id the moment it is known (through
// Config.SessionID, and in a small file of its own so that Restore(nil)
// can resume after a crash), retries transient failures, and turns
// anything unreadable into provider.ErrProtocol.
//
// # Session id file
//
// The daemon saves the state blob only when a session is suspended, and
// Config does not carry the provider session id it saved, so after a crash
// Restore gets nil. The engine therefore writes
// <StateDir>/sessions/<agent-id>.json, {"version":1,"session_id":"…"},
// atomically (fsynced, renamed, directory fsynced) each time the id is
// learned or changes; Restore(nil) resumes from it.
//
// The process of a turn runs in its own process group, killed if the
// daemon dies (Pdeathsig), and is reported to Config.Track; inside
// Config.Sandbox, if set, with only the environment a CLI needs.
//
// # State blob
//
// Suspend returns {"version":1,"session_id":"…"} (the id may be empty for a
// CLI that picks its own id and has not run a turn yet). Restore accepts
// that, or nil.
package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/renameio/v2"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/internal/proc"
	"github.com/substrat/substrat/provider/internal/retry"
)

// Limits.
const (
	DefaultMaxLine   = 4 << 20  // bytes of one output line
	maxTurnText      = 16 << 20 // bytes of streamed text in one turn
	DefaultExitGrace = 5 * time.Second
	stderrQuote      = 2 << 10
	lineQuote        = 200
)

// Command is the command of one turn, and what it needs to see inside the
// agent's sandbox when Config.Sandbox is set.
type Command struct {
	proc.Command
	Needs provider.SandboxNeeds
	// KeepEnv are the variables (NAME=) and prefixes that the sandbox
	// lets in besides the common ones (see Minimal): the CLI's own.
	KeepEnv []string
}

// Line is what an adapter read in one output line.
type Line struct {
	// SessionID is the CLI's session id, if the line tells it.
	SessionID string
	// Chunks are streamed output.
	Chunks []provider.Chunk
	// Compactions are the CLI's compactions of its context the line
	// tells of (claude's compact_boundary), reported in the turn's result.
	Compactions []provider.Compaction
	// Final, if set, ends the turn.
	Final *Final
}

// Final is the end of a turn.
type Final struct {
	Text  string
	Usage provider.Usage
	// Err, if set, fails the turn; wrap a *retry.Transient in it to have
	// the turn retried.
	Err error
}

// Spec describes a CLI provider.
type Spec struct {
	// Name is the provider's name, used in errors and file names.
	Name string
	// StateDir returns the directory of the provider's own files for an
	// agent's sessions.
	StateDir func(cfg provider.Config) (string, error)
	// NewID returns the id of a new session, or "" when the CLI picks it
	// (it is then learned from the first turn's output).
	NewID func() string
	// Prepare, if set, is called when a session starts (Create, Restore):
	// for example to write the MCP config.
	Prepare func(cfg provider.Config) error
	// Command returns the command of one turn of session id ("" if none
	// yet).
	Command func(cfg provider.Config, id, prompt string) (Command, error)
	// Parse reads one non-blank output line. An error means the line is
	// unreadable; the engine wraps it with provider.ErrProtocol.
	Parse func(line []byte) (Line, error)
	// Retry is the retry policy of whole turns.
	Retry retry.Policy
	// ExitGrace is how long the process may take to exit after its final
	// line; default 5 s.
	ExitGrace time.Duration
	// MaxLine bounds an output line; default 4 MiB.
	MaxLine int
	// TextSeparator joins the streamed text chunks into the turn's text
	// when the final line carries none: "\n" for whole messages, "" for
	// deltas.
	TextSeparator string
}

// OwnTools reports that a CLI's model has tools of its own.
func (p *Provider) OwnTools() bool { return true }

// Provider is a provider.Provider built from a Spec.
type Provider struct {
	spec Spec
}

// New returns the provider of spec.
func New(spec Spec) *Provider {
	if spec.ExitGrace <= 0 {
		spec.ExitGrace = DefaultExitGrace
	}
	if spec.MaxLine <= 0 {
		spec.MaxLine = DefaultMaxLine
	}
	return &Provider{spec: spec}
}

// Name returns the provider's name.
func (p *Provider) Name() string { return p.spec.Name }

// blob is the state blob, and the session id file.
type blob struct {
	Version   int    `json:"version"`
	SessionID string `json:"session_id"`
}

// Create starts a new session. Errors: those of the SessionID callback, of
// the session id file, and of Spec.Prepare.
func (p *Provider) Create(ctx context.Context, cfg provider.Config) (provider.Session, error) {
	s, err := p.session(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.start(p.spec.NewID()); err != nil {
		return nil, err
	}
	return s, nil
}

// Restore resumes a session from its blob, or for nil from the session id
// file (a fresh session if there is none). Errors: provider.ErrBadState,
// and those of Create.
func (p *Provider) Restore(ctx context.Context, cfg provider.Config, state []byte) (provider.Session, error) {
	s, err := p.session(cfg)
	if err != nil {
		return nil, err
	}
	if state != nil {
		b, err := decodeBlob(state)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", provider.ErrBadState, p.spec.Name, err)
		}
		if b.SessionID == "" {
			return s.started(p.spec.NewID())
		}
		s.id = b.SessionID
		if err := s.saveID(); err != nil {
			return nil, err
		}
		return s, nil
	}
	data, err := os.ReadFile(s.idFile())
	switch {
	case errors.Is(err, os.ErrNotExist):
		return s.started(p.spec.NewID())
	case err != nil:
		return nil, fmt.Errorf("%s: reading the session id: %w", p.spec.Name, err)
	}
	b, err := decodeBlob(data)
	if err != nil {
		return nil, fmt.Errorf("%s: the session id file %s is unreadable: %v", p.spec.Name, s.idFile(), err)
	}
	if b.SessionID == "" {
		return s.started(p.spec.NewID())
	}
	s.id = b.SessionID
	return s, nil
}

// started starts s with id and returns it.
func (s *session) started(id string) (provider.Session, error) {
	if err := s.start(id); err != nil {
		return nil, err
	}
	return s, nil
}

func decodeBlob(data []byte) (blob, error) {
	var b blob
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return b, err
	}
	if dec.More() {
		return b, errors.New("data after the JSON object")
	}
	if b.Version != 1 {
		return b, fmt.Errorf("version %d, want 1", b.Version)
	}
	return b, nil
}

func (p *Provider) session(cfg provider.Config) (*session, error) {
	if id := cfg.AgentID; id == "" || filepath.Base(id) != id || id == "." || id == ".." {
		return nil, fmt.Errorf("%s: agent id %q cannot name a file", p.spec.Name, id)
	}
	dir, err := p.spec.StateDir(cfg)
	if err != nil {
		return nil, err
	}
	if p.spec.Prepare != nil {
		if err := p.spec.Prepare(cfg); err != nil {
			return nil, err
		}
	}
	return &session{p: p, cfg: cfg, dir: dir}, nil
}

// session is one CLI session.
type session struct {
	p   *Provider
	cfg provider.Config
	dir string

	mu      sync.Mutex // guards the fields below
	id      string
	busy    bool
	stopped bool
}

func (s *session) idFile() string {
	return filepath.Join(s.dir, "sessions", s.cfg.AgentID+".json")
}

// start begins a new session with id ("" if the CLI picks it).
func (s *session) start(id string) error {
	if id == "" {
		if err := os.Remove(s.idFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: removing the old session id: %w", s.p.spec.Name, err)
		}
		return nil
	}
	return s.learn(id)
}

// learn records a new session id: the daemon's callback first, then the
// session id file.
func (s *session) learn(id string) error {
	if s.cfg.SessionID != nil {
		if err := s.cfg.SessionID(id); err != nil {
			return fmt.Errorf("%s: saving session id %s: %w", s.p.spec.Name, id, err)
		}
	}
	s.mu.Lock()
	s.id = id
	s.mu.Unlock()
	return s.saveID()
}

func (s *session) saveID() error {
	s.mu.Lock()
	id := s.id
	s.mu.Unlock()
	dir := filepath.Dir(s.idFile())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("%s: saving session id: %w", s.p.spec.Name, err)
	}
	data, _ := json.Marshal(blob{Version: 1, SessionID: id})
	if err := renameio.WriteFile(s.idFile(), append(data, '\n'), 0o600, renameio.WithTempDir(dir)); err != nil {
		return fmt.Errorf("%s: saving session id: %w", s.p.spec.Name, err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// ID returns the current session id.
func (s *session) ID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

func (s *session) Send(ctx context.Context, turn provider.Turn) (provider.TurnResult, error) {
	name := s.p.spec.Name
	s.mu.Lock()
	switch {
	case s.stopped:
		s.mu.Unlock()
		return provider.TurnResult{}, fmt.Errorf("%s: %w", name, provider.ErrStopped)
	case s.busy:
		s.mu.Unlock()
		return provider.TurnResult{}, fmt.Errorf("%s: %w", name, provider.ErrBusy)
	}
	s.busy = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.busy = false
		s.mu.Unlock()
	}()
	var res provider.TurnResult
	err := s.p.spec.Retry.Do(ctx, name+" turn", func(ctx context.Context) error {
		var err error
		res, err = s.attempt(ctx, turn)
		return err
	})
	if err != nil {
		return provider.TurnResult{}, fmt.Errorf("%s: %w", name, err)
	}
	return res, nil
}

// attempt runs the CLI once.
func (s *session) attempt(ctx context.Context, turn provider.Turn) (provider.TurnResult, error) {
	if err := ctx.Err(); err != nil {
		return provider.TurnResult{}, err
	}
	cfg := s.cfg
	cfg.Instructions = provider.InstructionsOf(cfg, turn) // as they are now, not as they were at start
	c, err := s.p.spec.Command(cfg, s.ID(), turn.Prompt)
	if err != nil {
		return provider.TurnResult{}, err
	}
	if sandbox := s.cfg.Sandbox; sandbox != nil {
		c.Env = Minimal(c.Env, c.KeepEnv...)
		needs := c.Needs
		c.Wrap = func(ctx context.Context, cmd *exec.Cmd) (*exec.Cmd, error) { return sandbox(ctx, cmd, needs) }
	}
	pr, err := proc.Start(ctx, c.Command, s.p.spec.MaxLine)
	if err != nil {
		return provider.TurnResult{}, fmt.Errorf("starting %s: %w", c.Path, err)
	}
	if s.cfg.Track != nil {
		// Runs after pr.Finish below, once the process is waited for.
		defer s.cfg.Track(pr.Pid())()
	}
	var (
		final       *Final
		compactions []provider.Compaction
		texts       []string // the streamed text, for a final line without any
		readErr     error
		lines       int
		last        []byte
		size        int
	)
	for final == nil && readErr == nil {
		b, err := pr.Line()
		switch {
		case ctx.Err() != nil:
			readErr = ctx.Err()
			continue
		case errors.Is(err, io.EOF):
		case errors.Is(err, proc.ErrLineTooLong):
			readErr = fmt.Errorf("%w: line %d is longer than %d bytes (starts %s)", provider.ErrProtocol, lines+1, s.p.spec.MaxLine, proc.Quote(b, lineQuote))
			continue
		case err != nil:
			readErr = fmt.Errorf("reading the output: %w", err)
			continue
		}
		if err != nil {
			break // EOF
		}
		lines++
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		last = b
		l, err := s.p.spec.Parse(bytes.TrimSpace(b))
		if err != nil {
			readErr = fmt.Errorf("%w: line %d: %v: %s", provider.ErrProtocol, lines, err, proc.Quote(b, lineQuote))
			continue
		}
		if l.SessionID != "" && l.SessionID != s.ID() {
			if err := s.learn(l.SessionID); err != nil {
				readErr = err
				continue
			}
		}
		for _, ch := range l.Chunks {
			if ch.Text == "" {
				continue
			}
			if size += len(ch.Text); size > maxTurnText {
				readErr = fmt.Errorf("%w: more than %d bytes of output in one turn", provider.ErrProtocol, maxTurnText)
				break
			}
			if turn.Output != nil {
				turn.Output(ch)
			}
			if ch.Kind == provider.ChunkText {
				texts = append(texts, ch.Text)
			}
		}
		compactions = append(compactions, l.Compactions...)
		final = l.Final
	}
	grace := time.Duration(0)
	if readErr == nil && final != nil && final.Err == nil {
		grace = s.p.spec.ExitGrace
	}
	waitErr := pr.Finish(grace)
	stderr := ""
	if tail := pr.Stderr(stderrQuote); tail != "" {
		stderr = "; stderr: " + tail
	}
	switch {
	case ctx.Err() != nil:
		return provider.TurnResult{}, fmt.Errorf("%w%s", ctx.Err(), stderr)
	case readErr != nil:
		return provider.TurnResult{}, fmt.Errorf("%w%s", readErr, stderr)
	case final == nil:
		status := "exited"
		if waitErr != nil {
			status = waitErr.Error()
		}
		lastLine := "(none)"
		if last != nil {
			lastLine = proc.Quote(last, lineQuote)
		}
		err := fmt.Errorf("%s %s without a result (%d lines read, last %s)%s", filepath.Base(c.Path), status, lines, lastLine, stderr)
		if retry.IsOverloaded(stderr + lastLine) {
			return provider.TurnResult{}, &retry.Transient{Err: err}
		}
		return provider.TurnResult{}, err
	case final.Err != nil:
		return provider.TurnResult{}, final.Err
	}
	if final.Text == "" { // a CLI whose last line carries no text: what it said
		final.Text = strings.Join(texts, s.p.spec.TextSeparator)
	}
	return provider.TurnResult{Text: final.Text, Usage: final.Usage, Compactions: compactions}, nil
}

func (s *session) Suspend(ctx context.Context) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopped:
		return nil, fmt.Errorf("%s: %w", s.p.spec.Name, provider.ErrStopped)
	case s.busy:
		return nil, fmt.Errorf("%s: %w", s.p.spec.Name, provider.ErrBusy)
	}
	s.stopped = true
	return json.Marshal(blob{Version: 1, SessionID: s.id})
}

func (s *session) Stop() error {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	return nil
}

// FailureText says whether a failed result's text reads as a transient
// API failure, and wraps it accordingly.
func FailureText(what, text string) error {
	err := fmt.Errorf("%s: %s", what, strings.TrimSpace(text))
	if retry.IsOverloaded(text) || mentionsRetryableStatus(text) {
		return &retry.Transient{Err: err}
	}
	return err
}

// mentionsRetryableStatus reports whether text reads like "API Error: 529"
// or "status 503".
func mentionsRetryableStatus(text string) bool {
	t := strings.ToLower(text)
	for _, code := range []string{"429", "500", "502", "503", "504", "529"} {
		for _, prefix := range []string{"api error: ", "api error ", "status ", "status code ", "http "} {
			if strings.Contains(t, prefix+code) {
				return true
			}
		}
	}
	return strings.Contains(t, "econnreset") || strings.Contains(t, "connection reset") || strings.Contains(t, "socket hang up")
}
