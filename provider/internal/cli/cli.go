// Package cli is the engine of the providers that drive a model CLI in
// print mode (claude, cursor-agent): one process per turn, whose output is
// JSON lines; the CLI keeps the conversation, and Substrat keeps its
// session id.
//
// An adapter gives an Adapter (adapter.go): its flags, its config format
// and its parser; the engine does the rest of a turn's command (the CLI
// found in PATH, a HOME of its own, the environment, the sandbox's
// needs) and writes the config files. Underneath, a Spec says how to
// build a turn's command and how to read one output line. The engine runs the process (see package proc), streams
// chunks, persists the CLI's session id the moment it is known (through
// Config.SessionID, and in a small file of its own so that Restore(nil)
// can resume after a crash), retries transient failures, and turns
// anything unreadable into provider.ErrProtocol.
//
// # Session id file
//
// The daemon saves the state blob only when a session is suspended, and
// Config does not carry the provider session id it saved, so after a crash
// Restore gets nil (or the blob of an older suspend). The engine therefore
// writes <StateDir>/sessions/<agent-id>.json,
// {"version":1,"session_id":"…","totals":{…}}, atomically (fsynced,
// renamed, directory fsynced) each time the id is learned or changes and
// after each turn whose CLI reports running totals; Restore(nil) resumes
// from it, and Restore(blob) prefers its totals when it names the same
// session (it is never older than the blob).
//
// # Usage
//
// Some CLIs report usage as the session's running total rather than the
// turn's (Codex: the tokens of turn.completed; Claude Code: the cost in
// total_cost_usd, and the tokens per model), and keep counting after a
// resume and after a kill -9. An adapter says so with
// Final.CumulativeTokens and Final.CumulativeCost. The engine keeps the
// last totals it saw for the session in the session id file ("totals":
// input_tokens, output_tokens, cost_usd) and reports the difference as the
// turn's usage, so that the sum of a session's turns is what the CLI says
// the session cost, across resume and a kill -9 of the daemon. The totals
// start from zero with a new session id, and with a command that starts
// the CLI's session afresh (Command.Fresh); a total lower than the last
// one means the CLI's own count started over, and is taken whole. A
// session whose file or blob has no totals (written before Substrat kept
// them) reports its next turn's running parts as unknown, rather than the
// whole session's usage again, and counts from there. What a
// CLI spent on a turn it did not finish (killed, or failed) is counted in
// the next turn that finishes, when the CLI kept count of it. If the
// daemon dies between a turn's end and its recording, that turn's usage
// is not counted: the totals were saved already.
//
// The process of a turn runs in its own process group, killed if the
// daemon dies (Pdeathsig), and is reported to Config.Track; inside
// Config.Sandbox, if set, with only the environment a CLI needs.
//
// A turn ends with its final line: the process then exits on its own in
// the background (a CLI takes a while to stop its MCP servers and close
// its files: about 100 ms for Claude Code), killed with its group after
// Spec.ExitGrace. The next turn of the session, and Suspend and Stop,
// wait for that exit first, so that a resumed CLI always finds its
// session files complete and nothing of a stopped session runs.
//
// # State blob
//
// Suspend returns {"version":1,"session_id":"…"} (the id may be empty for a
// CLI that picks its own id and has not run a turn yet), with "totals"
// when the CLI reports running totals. Restore accepts that, or nil.
package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/renameio/v2"

	"github.com/substrat/substrat/fsstore"
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
	// Fresh says the command starts the CLI's session anew (no resume):
	// its running totals start from zero.
	Fresh bool
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
	Text string
	// Usage is the usage the CLI reports. With CumulativeTokens or
	// CumulativeCost set, the tokens or the cost are the session's running
	// totals, which the engine turns into the turn's own (see Usage in the
	// package doc).
	Usage            provider.Usage
	CumulativeTokens bool
	CumulativeCost   bool
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
	// Interactive, if set, returns the command that opens session id for
	// a person at a terminal (provider.Interactive).
	Interactive func(cfg provider.Config, id string) (Command, error)
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
	// Totals are the CLI's running totals for the session, as last seen.
	Totals *Totals `json:"totals,omitempty"`
}

// Totals are a session's running totals of usage as a CLI reports them.
type Totals struct {
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
}

// blobOf is the blob of session id with totals t (nil: not known).
func blobOf(id string, t *Totals) blob {
	b := blob{Version: 1, SessionID: id}
	if t != nil {
		c := *t
		b.Totals = &c
	}
	return b
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
		s.id, s.totals = b.SessionID, b.Totals
		// The session id file is written after every turn, the blob only
		// at a suspend: for the same session, the file is never older.
		if data, err := os.ReadFile(s.idFile()); err == nil {
			if f, err := decodeBlob(data); err == nil && f.SessionID == b.SessionID && f.Totals != nil {
				s.totals = f.Totals
			}
		}
		if err := s.saveID(); err != nil {
			return nil, err
		}
		return s, nil
	}
	data, err := fsstore.ReadRegular(s.idFile(), fsstore.MaxJSONSize)
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
	s.id, s.totals = b.SessionID, b.Totals
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
	if t := b.Totals; t != nil && (t.InputTokens < 0 || t.OutputTokens < 0 || t.CostUSD < 0) {
		return b, fmt.Errorf("negative totals %+v", *t)
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
	totals  *Totals // the CLI's running totals for id as last seen; nil: not known
	busy    bool
	stopped bool
	exiting chan struct{} // closed once the last turn's process exited; nil: none
}

// finishLater lets pr exit on its own in the background, within grace,
// then calls after.
func (s *session) finishLater(pr *proc.Proc, grace time.Duration, after func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.exiting = ch
	s.mu.Unlock()
	go func() {
		defer close(ch)
		pr.Finish(grace)
		after()
	}()
}

// waitExited waits until the process of the last turn has exited, if it
// was still exiting; or until ctx ends.
func (s *session) waitExited(ctx context.Context) error {
	s.mu.Lock()
	ch := s.exiting
	s.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
	if id != s.id {
		s.totals = &Totals{} // a new session counts from zero
	}
	s.id = id
	s.mu.Unlock()
	return s.saveID()
}

func (s *session) saveID() error {
	s.mu.Lock()
	id, totals := s.id, s.totals
	s.mu.Unlock()
	return s.save(id, totals)
}

// save writes the session id file.
func (s *session) save(id string, totals *Totals) error {
	dir := filepath.Dir(s.idFile())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("%s: saving session id: %w", s.p.spec.Name, err)
	}
	data, _ := json.Marshal(blobOf(id, totals))
	if err := renameio.WriteFile(s.idFile(), append(data, '\n'), 0o600, renameio.WithTempDir(dir)); err != nil {
		return fmt.Errorf("%s: saving session id: %w", s.p.spec.Name, err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY, 0) // never blocks on a FIFO
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
	if err := s.waitExited(ctx); err != nil {
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
		c.Wrap = func(ctx context.Context, p provider.Process) (provider.Process, error) { return sandbox(ctx, p, needs) }
	}
	c.Limit = s.cfg.Limit
	c.Start = s.cfg.Start
	if c.Fresh {
		s.mu.Lock()
		s.totals = &Totals{}
		s.mu.Unlock()
	}
	// The process is killed when the turn's context ends, until its
	// final line is in; then it exits on its own (finishLater).
	procCtx, procCancel := context.WithCancel(context.WithoutCancel(ctx))
	unlink := context.AfterFunc(ctx, procCancel)
	pr, err := proc.Start(procCtx, c.Command, s.p.spec.MaxLine)
	if err != nil {
		unlink()
		procCancel()
		if ctx.Err() != nil {
			return provider.TurnResult{}, ctx.Err()
		}
		return provider.TurnResult{}, fmt.Errorf("starting %s: %w", c.Path, err)
	}
	untrack := func() {}
	if s.cfg.Track != nil {
		// Called once the process is waited for.
		untrack = s.cfg.Track(pr.Pid())
	}
	finished := func() {
		procCancel()
		untrack()
	}
	r := s.read(ctx, pr, turn)
	var waitErr error
	if ok := r.err == nil && r.final != nil && r.final.Err == nil; ok && unlink() {
		if s.cfg.Start == nil {
			s.finishLater(pr, s.p.spec.ExitGrace, finished)
		} else {
			// Where the agent runs elsewhere, what it wrote comes back
			// as its process ends: the turn waits for that.
			waitErr = pr.Finish(s.p.spec.ExitGrace)
			finished()
			if errors.Is(waitErr, provider.ErrNotBack) {
				r.err = waitErr
			}
		}
	} else {
		unlink()
		waitErr = pr.Finish(0)
		finished()
	}
	return s.outcome(ctx, c.Path, pr, r, waitErr)
}

// Suspend returns the session's blob once the last turn's process has
// exited. Errors: provider.ErrStopped, provider.ErrBusy.
func (s *session) Suspend(ctx context.Context) ([]byte, error) {
	s.mu.Lock()
	switch {
	case s.stopped:
		s.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", s.p.spec.Name, provider.ErrStopped)
	case s.busy:
		s.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", s.p.spec.Name, provider.ErrBusy)
	}
	s.stopped = true
	blob, err := json.Marshal(blobOf(s.id, s.totals))
	s.mu.Unlock()
	s.waitExited(context.WithoutCancel(ctx)) // within the exit grace
	return blob, err
}

// Stop ends the session once the last turn's process has exited (within
// the exit grace).
func (s *session) Stop() error {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.waitExited(context.Background())
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
