package supervisor

import (
	"context"
	"time"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/workspace"
)

// Host is what the core asks of the operating system around it: running
// provider processes in sandboxes, keeping track of them, and the agents'
// tool sockets. The daemon's host (package supervisor/daemon) does it for
// real; NopHost, the default, does nothing, for the simulation and the
// core's own tests.
type Host interface {
	// Track returns the hook that records agent's provider processes (as
	// provider.Config.Track), so that a later start can reap them.
	Track(agent string) func(pid int) (done func())
	// Sandbox returns the hook that wraps agent sess's provider processes
	// in its sandbox (as provider.Config.Sandbox), or nil for an agent
	// without a workspace.
	Sandbox(sess *fsstore.Session) provider.SandboxFunc
	// Start returns the hook that starts agent sess's provider processes
	// where it runs (as provider.Config.Start): on its executor's host,
	// with its place copied there before and back after, under limits l
	// as that host can apply them. Nil: on this machine, as the provider
	// does by itself (under Limit).
	Start(sess *fsstore.Session, l fsstore.Limits) provider.StartFunc
	// ToolSocket returns the path at which the processes of agent sess
	// reach its own tool socket, listening, or "" where there are none
	// (NopHost): the socket's own path, or, where they run elsewhere
	// (a pod), the path there that a relay ties to it. An agent's MCP
	// server reaches its tools there: its processes run in a PID
	// namespace of their own, sandboxed or not, and the daemon's socket
	// refuses such peers.
	ToolSocket(sess *fsstore.Session) (string, error)
	// CloseToolSocket closes agent id's tool socket, if it has one, and
	// removes its resource-limit group (killing what is left in it): the
	// agent runs nothing more. With id "", every one, and no new one
	// opens.
	CloseToolSocket(id string)
	// Limit returns the hook that puts agent's provider processes and
	// tool commands under limits l (as provider.Config.Limit), or nil
	// when l limits nothing.
	Limit(agent string, l fsstore.Limits) provider.LimitFunc
	// LimitReached says which of agent's limits its processes reached
	// since the last call ("memory limit 512M reached"), or "" if none
	// (or the host cannot tell).
	LimitReached(agent string) string
	// Reap kills the provider processes a daemon that died left running,
	// and says which.
	Reap() []string
	// Notify runs argv (Settings.Notify; none: nothing runs) for
	// notification n, without waiting for it.
	Notify(argv []string, n api.Notification)
	// Git runs git for git workspaces (hardened on the host, sandboxed
	// where it reads what an agent wrote), or is nil: then git workspaces
	// cannot be made.
	Git() workspace.GitRunner
	// Work runs the work tools (shell, read_file, write_file, edit_file),
	// or is nil: then they fail.
	Work() WorkTools
}

// Workplace is where an agent's work tools run: its sandbox, or a
// directory on the host (the fields of package worktools' Place).
type Workplace struct {
	// Sandbox, if set, is the agent's sandbox: shell commands run in it,
	// and paths are as the agent sees them inside.
	Sandbox *bwrap.Spec
	// Dir is the agent's working directory on the host when it has no
	// sandbox (absolute): a relative path is relative to it, and no path
	// may leave it.
	Dir string
	// ShellState is the directory where the shell's working directory and
	// exported variables persist between calls.
	ShellState bwrap.Source
	// Env is the environment of shell commands outside a sandbox.
	Env []string
	// Limit, if set, puts shell commands under the agent's resource
	// limits (Host.Limit).
	Limit provider.LimitFunc
	// RemoteSandbox and RemoteStart, if set, run shell commands where the
	// agent's processes run (its executor's host), as its provider's
	// processes run there (Host.Sandbox, Host.Start): its place copied
	// there before, and back after. The file tools still run here, on
	// the sandbox's root.
	RemoteSandbox provider.SandboxFunc
	RemoteStart   provider.StartFunc
}

// WorkTools run the work tools in a Workplace; the daemon's are package
// worktools.
type WorkTools interface {
	Shell(ctx context.Context, pl Workplace, command string, timeout time.Duration) (string, error)
	ReadFile(pl Workplace, path string, from, to int) (string, error)
	WriteFile(pl Workplace, path, content string) (string, error)
	EditFile(pl Workplace, path, old, new string) (string, error)
}

// NopHost is a Host that runs nothing: no sandbox, no tracking, no
// sockets.
type NopHost struct{}

// Track implements Host.
func (NopHost) Track(string) func(int) func() { return nil }

// Sandbox implements Host.
func (NopHost) Sandbox(*fsstore.Session) provider.SandboxFunc { return nil }

// Start implements Host: processes run on this machine.
func (NopHost) Start(*fsstore.Session, fsstore.Limits) provider.StartFunc { return nil }

// ToolSocket implements Host: none.
func (NopHost) ToolSocket(*fsstore.Session) (string, error) { return "", nil }

// CloseToolSocket implements Host.
func (NopHost) CloseToolSocket(string) {}

// Reap implements Host.
func (NopHost) Reap() []string { return nil }

// Limit implements Host: none.
func (NopHost) Limit(string, fsstore.Limits) provider.LimitFunc { return nil }

// LimitReached implements Host.
func (NopHost) LimitReached(string) string { return "" }

// Notify implements Host.
func (NopHost) Notify([]string, api.Notification) {}

// Work implements Host: none.
func (NopHost) Work() WorkTools { return nil }

// Git implements Host: none.
func (NopHost) Git() workspace.GitRunner { return nil }
