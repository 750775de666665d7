// Package provider defines how Substrat talks to the thing behind an agent:
// a model CLI, an HTTP API, or the built-in script. The daemon owns the
// agent tools; a provider session asks for them through a ToolHandler.
//
// Sub-packages hold the adapters (script, and later claude, cursor-agent,
// openai); providertest is the conformance suite every adapter passes. A
// Registry maps the names agents are created with to providers.
package provider

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"

	"github.com/substrat/substrat/fsstore"
)

// Errors returned by providers and sessions. Adapters wrap them with detail.
var (
	// ErrUnknownProvider: no provider is registered under the name.
	ErrUnknownProvider = errors.New("provider: unknown provider")
	// ErrBadState: Restore was given a state blob it cannot read.
	ErrBadState = errors.New("provider: bad state blob")
	// ErrStopped: the session was stopped or suspended; use Restore.
	ErrStopped = errors.New("provider: session stopped")
	// ErrBusy: a turn is already running on the session.
	ErrBusy = errors.New("provider: turn already running")
	// ErrProtocol: the model or its process said something unreadable.
	ErrProtocol = errors.New("provider: protocol error")
	// ErrRetryable marks a failure worth retrying (429, 5xx, overloaded,
	// connection reset).
	ErrRetryable = errors.New("provider: retryable failure")
	// ErrNotBack: a process started through Config.Start ended, and what
	// it wrote where it ran did not come back (Running.Wait returns it).
	// The turn fails, even after a final answer.
	ErrNotBack = errors.New("provider: the agent's files did not come back from where it ran")
)

// ToolCall is one call of an agent tool requested by the model.
type ToolCall struct {
	// ID is the provider's tool-use id. The daemon uses it as the
	// idempotency key of calls that create things (spawn_agent).
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// ToolResult is what an agent tool call returned. Failures are results
// with IsError set, never Go errors: the agent sees them and carries on.
type ToolResult struct {
	Text    string `json:"text"`
	IsError bool   `json:"is_error,omitempty"`
}

// ToolHandler runs agent tools on the daemon's side. It is safe for
// concurrent use and valid for the duration of one turn.
type ToolHandler interface {
	CallTool(ctx context.Context, call ToolCall) ToolResult
}

// ToolHandlerFunc adapts a function to ToolHandler.
type ToolHandlerFunc func(ctx context.Context, call ToolCall) ToolResult

// CallTool calls f.
func (f ToolHandlerFunc) CallTool(ctx context.Context, call ToolCall) ToolResult { return f(ctx, call) }

// Usage is what one turn cost.
type Usage struct {
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
	// TokensUnknown and CostUnknown say the provider did not report the
	// turn's tokens or its cost: the zero above then means unknown, and
	// the daemon shows it as unknown, never as zero.
	TokensUnknown bool `json:"tokens_unknown,omitempty"`
	CostUnknown   bool `json:"cost_unknown,omitempty"`
}

// Chunk is a piece of streamed turn output: Kind "text" (assistant text),
// "tool_call" (a readable form of a call, before it runs) or "tool_result"
// (a readable form of its result). Chunks are for watching a turn; the
// turn's outcome is its TurnResult.
type Chunk struct {
	Kind string `json:"kind"` // one of the Chunk kinds below
	// Tool names the tool of a ChunkDenied.
	Tool string `json:"tool,omitempty"`
	Text string `json:"text"`
}

// Chunk kinds.
const (
	ChunkText       = "text"        // assistant text
	ChunkToolCall   = "tool_call"   // "name {json args}"
	ChunkToolResult = "tool_result" // the result text; "error: ..." for a failure
	// ChunkDenied is a tool call the provider's own permission rules
	// refused; Text says why. The turn goes on (the model sees the
	// refusal as the tool's result), and the daemon records it.
	ChunkDenied = "denied"
)

// ToolInfo describes a tool the daemon offers: its name, what it does, and
// a JSON Schema of its arguments (an object schema).
type ToolInfo struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"input_schema"`
}

// Turn is one prompt sent to a session.
type Turn struct {
	Prompt string
	Tools  ToolHandler
	// ToolList, if not nil, is what this agent may call this turn
	// (through Tools). A provider that lists tools to its model itself
	// (openai) offers exactly these; one whose model reaches the daemon's
	// tools over MCP has its list from there.
	ToolList []ToolInfo
	// Output, if set, receives streamed output as it is produced. It must
	// not block for long.
	Output func(Chunk)
	// Instructions, if not nil, are the agent's instructions now, which
	// may have changed since the session started: every provider's next
	// request carries these (a CLI's system prompt or instructions block,
	// openai's system message). Nil: those of Config.
	Instructions *string
	// ContextWindow, if not 0, is the model's context window in tokens as
	// configured (config.json's context_windows), and CompactAt, if not
	// 0, the share of it that triggers a compaction: for a provider that
	// manages its model's context (openai).
	ContextWindow int
	CompactAt     float64
}

// InstructionsOf returns the instructions a turn runs with: the turn's,
// or else the session's.
func InstructionsOf(cfg Config, turn Turn) string {
	if turn.Instructions != nil {
		return *turn.Instructions
	}
	return cfg.Instructions
}

// TurnResult is the outcome of a successful turn.
type TurnResult struct {
	Text  string `json:"text"` // the final assistant text
	Usage Usage  `json:"usage"`
	// Compactions are the compactions of the model's context the turn
	// made (a provider that manages the context itself), in order.
	Compactions []Compaction `json:"compactions,omitempty"`
	// ContextTokens is how many tokens of its context window
	// (ContextWindow) the model's conversation takes after the turn; 0
	// when the provider does not know.
	ContextTokens int `json:"context_tokens,omitempty"`
	ContextWindow int `json:"context_window,omitempty"`
}

// Compaction is one compaction of a model's context: the older part of
// its conversation replaced by a summary.
type Compaction struct {
	// Reason is CompactThreshold or CompactOverflow, or a CLI's own word
	// for what made it compact ("manual": claude's /compact).
	Reason string `json:"reason"`
	// Replaced says what was replaced, for people ("turns 1-12").
	Replaced string `json:"replaced"`
	// FirstTurn and LastTurn are the provider's numbers of the turns the
	// summary replaced (its own count of the session's turns, from 1);
	// Dropped of them, the oldest, were dropped without a summary.
	FirstTurn int    `json:"first_turn,omitempty"`
	LastTurn  int    `json:"last_turn,omitempty"`
	Dropped   int    `json:"dropped,omitempty"`
	Summary   string `json:"summary,omitempty"`
	// TokensBefore and TokensAfter are the context's tokens, estimated;
	// TokensAfter is 0 where the provider does not know it (a CLI).
	TokensBefore int `json:"tokens_before"`
	TokensAfter  int `json:"tokens_after"`
}

// Compaction reasons.
const (
	// CompactThreshold: a request would have passed the share of the
	// window that triggers a compaction.
	CompactThreshold = "threshold"
	// CompactOverflow: the server answered that the request was over the
	// context window; the request was retried after the compaction.
	CompactOverflow = "context_length_exceeded"
)

// Config describes the agent a session is for.
type Config struct {
	AgentID      string
	Name         string
	Model        string
	Instructions string
	// WorkDir is the agent's working directory on the host, where its
	// provider processes run when Sandbox is not set: a directory the
	// user chose, never the store. With Sandbox set, processes run in the
	// sandbox's working directory (the workspace root, /workspace) and
	// WorkDir is only where bwrap itself starts.
	WorkDir string
	// Permissions say what the provider's own tools may do; the agent
	// tools are always allowed. An adapter maps Mode onto its CLI's own
	// settings; full tool permission (ModeFull) is what an agent in a
	// sandbox gets by default, and outside one only when the user asked
	// for it. The zero value means the safe default mode.
	Permissions Permissions
	// Home is the Substrat home (for `substrat mcp --home` and for
	// fsstore.Layout.ProviderDir, where a provider keeps its own state).
	Home string
	// SessionID, if set, is called as soon as the provider knows its own
	// session or chat id, before the turn that revealed it returns. The
	// daemon persists it. An error from it fails the turn.
	SessionID func(id string) error
	// Sandbox, if set, wraps a process the session is about to start in
	// the agent's sandbox (bwrap) and returns the process to start
	// instead. Adapters that run processes must call it on every process,
	// with its Env holding only what the process needs (the sandbox passes
	// nothing else in), and with needs naming what else of the host the
	// process must see. It fails if the sandbox cannot be had: bwrap is
	// not installed, the workspace does not allow what needs asks for
	// (the network), or a bind source has changed under it (a symlink
	// where none may be). The process it returns may carry Files,
	// descriptors of what the sandbox binds: the caller closes them once
	// the process has started, or failed to.
	Sandbox SandboxFunc
	// ToolSocket, if set, is a Unix socket that serves this agent's
	// tool.list and tool.call and nothing else. The daemon sets it for
	// every agent, and the Sandbox hook binds it at the same path; the
	// MCP server a CLI starts must use it (`substrat mcp --socket`): the
	// daemon's own socket is not visible in a sandbox, and refuses a
	// client in another PID namespace, where the daemon contains every
	// provider process. Without it (no daemon), the MCP server reaches
	// the daemon of Config.Home.
	ToolSocket string
	// Track, if set, is told the pid of every process the session starts
	// (after Start; the process leads its own process group), and the
	// returned func when it has been waited for. The daemon records them
	// so that after a kill -9 of the daemon the next start reaps them.
	Track func(pid int) (done func())
	// Limit, if set, puts a process the session is about to start under
	// the agent's resource limits (memory, processes: its cgroup, or
	// rlimits). Adapters that run processes call it on every process
	// last, after Sandbox (or the containment of an unsandboxed one) and
	// before they start it; it rewrites the process in place (its Path
	// and Args), so that it is under the limits before it runs anything,
	// and fails if they cannot be had.
	Limit LimitFunc
	// Start, if set, starts every process of the session in place of
	// an exec.Cmd on this machine: it runs the process where the agent
	// runs (its executor: another host over ssh), under the limits
	// that host can apply (the daemon then sets no Limit). Adapters
	// that run processes call it last, with the process sandboxed (and
	// limited, if Limit is set) and the process's streams. Cancelling
	// ctx kills the process. Its Wait returns the error that cut the
	// process off when the connection was lost: the adapter treats it
	// as a process that died, and the turn fails and is retried as any
	// turn cut short. A turn waits for such a process to end, even
	// after its final answer: what it wrote comes back as it ends (Wait
	// fails with ErrNotBack if it does not). Track is told the pid of
	// the process that stands for it here (the ssh client). Without
	// Start, the adapter starts the process itself, in a process group
	// of its own that dies with the daemon.
	Start StartFunc
}

// StartFunc starts process p, already sandboxed and limited, with the
// streams of stdio (see Config.Start). p.Files, if any, stay the
// caller's to close.
type StartFunc func(ctx context.Context, p Process, stdio Stdio) (Running, error)

// Stdio are the standard streams of a process a StartFunc starts; nil
// is /dev/null.
type Stdio struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Running is a process a StartFunc started: data in, a handle out, so
// that the contract runs nothing itself (executor.Process has this
// shape).
type Running interface {
	// Wait waits for the process to end: nil for status 0, else an
	// error (an exit status, or what cut it off). Called exactly once.
	Wait() error
	// Kill kills the process and all it started; Wait still must be
	// called. Killing an ended process is not an error.
	Kill() error
	// Pid is the local process that stands for it.
	Pid() int
}

// Process is a process about to start, as the Sandbox and Limit hooks
// see and rewrite it: data, so that the contract between the daemon and
// its providers runs nothing itself. An adapter turns it into an
// exec.Cmd to start it.
type Process struct {
	// Path is the program; Args its argument list, its name first (as
	// an exec.Cmd's).
	Path string
	Args []string
	// Env is the whole environment.
	Env []string
	// Dir is the working directory.
	Dir string
	// Files are descriptors the process inherits as 3, 4, ... (an
	// exec.Cmd's ExtraFiles): those a sandbox binds. Whoever starts the
	// process closes them once it has started, or will not be.
	Files []*os.File
}

// LimitFunc puts a process about to start under an agent's resource
// limits (see Config.Limit): it rewrites p's Path and Args.
type LimitFunc func(p *Process) error

// SandboxFunc returns a process about to start wrapped in an agent's
// sandbox (see Config.Sandbox).
type SandboxFunc func(ctx context.Context, p Process, needs SandboxNeeds) (Process, error)

// ApprovalTool is the agent tool a CLI calls when its permission mode
// would prompt a person (Claude Code: --permission-prompt-tool
// mcp__substrat__request_approval). It answers the CLI's JSON, allow or
// deny, once the agent's approver has.
const ApprovalTool = "request_approval"

// AsksApproval reports whether an agent with these permissions sends what
// its mode would prompt for to its approver: not with full permission
// (nothing prompts) or dontAsk (the CLI denies without asking), and not
// when its approver is "deny".
func AsksApproval(p Permissions) bool {
	return p.Mode != ModeFull && p.Mode != ModeDontAsk && p.Approver != fsstore.ApproverDeny
}

// Permissions is an agent's permission setting, as session.json keeps it
// (mode, allowed_tools, disallowed_tools).
type Permissions = fsstore.Permissions

// Permission modes, as the Claude Code CLI names them.
const (
	ModeDefault     = fsstore.ModeDefault
	ModeAcceptEdits = fsstore.ModeAcceptEdits
	ModePlan        = fsstore.ModePlan
	ModeDontAsk     = fsstore.ModeDontAsk
	ModeFull        = fsstore.ModeFull
)

// SandboxNeeds is what a provider process needs to see inside the agent's
// sandbox besides the workspace. Paths are host paths, bound at the same
// path inside; paths under the system directories, which the sandbox
// shows read-only anyway, are skipped.
type SandboxNeeds struct {
	// ReadOnly are bound read-only: the program and its package, the
	// substrat binary, config files.
	ReadOnly []string
	// ReadWrite are bound read-write: the process's private state.
	ReadWrite []string
	// Network says the process must reach the network (a hosted model
	// API). In a workspace without network access the sandbox refuses it
	// rather than grant the network behind the user's back.
	Network bool
	// ToolSocket says the process (its MCP server) must reach
	// Config.ToolSocket, which the sandbox then binds.
	ToolSocket bool
}

// OwnTools is implemented by providers whose model has tools of its own to
// read, write and run things: the agent CLIs (Claude Code's Write, Edit and
// Bash...). The daemon offers its work tools (shell, read_file,
// write_file, edit_file) only to agents whose provider has none.
type OwnTools interface {
	OwnTools() bool
}

// HasOwnTools reports whether p's model brings its own work tools.
func HasOwnTools(p Provider) bool {
	o, ok := p.(OwnTools)
	return ok && o.OwnTools()
}

// Provider creates and restores sessions.
type Provider interface {
	// Name is the name agents are created with ("script", "claude"...).
	Name() string
	// Create starts a new session. Errors: ErrRetryable, or any error
	// describing why the backend could not be reached.
	Create(ctx context.Context, cfg Config) (Session, error)
	// Restore resumes a session from a blob returned by Session.Suspend
	// (nil if the session never suspended cleanly, as after a crash; the
	// provider then resumes from its own session id if it has one).
	// Errors: ErrBadState if the blob cannot be read.
	Restore(ctx context.Context, cfg Config, state []byte) (Session, error)
}

// Session is one live provider session. Send is never called concurrently
// with itself, Suspend or Stop.
type Session interface {
	// Send runs one turn. Errors: ErrStopped after Suspend or Stop,
	// ErrProtocol for unreadable output, ErrRetryable for transient
	// failures, ctx.Err() (possibly wrapped) on cancellation or timeout,
	// returned promptly. A failed turn leaves the session usable for the
	// next Send.
	Send(ctx context.Context, turn Turn) (TurnResult, error)
	// Suspend saves the session's state to an opaque blob and releases its
	// resources. The session cannot be used afterwards.
	Suspend(ctx context.Context) ([]byte, error)
	// Stop releases the session's resources without saving. It is safe to
	// call more than once and after Suspend.
	Stop() error
}
