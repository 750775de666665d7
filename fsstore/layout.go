package fsstore

import (
	"path/filepath"
	"strconv"
	"strings"
)

// File and directory names inside a home. Layout is the only code that joins
// them into paths.
const (
	AgentsDirName     = "agents"
	ArchiveDirName    = "archive"
	WorkspacesDirName = "workspaces"
	SocketName        = "daemon.sock"
	LockName          = "daemon.lock"
	PidName           = "daemon.pid"
	LogName           = "daemon.log"
	RecoveryName      = "recovery.json"
	ProcsName         = "providers.json"
	ConfigName        = "config.json" // the user's settings (supervisor/config)
	ProvidersDirName  = "providers"
	RunDirName        = "run"
	ScratchDirName    = "scratch"
	ShellDirName      = "shell"

	SessionName    = "session.json"
	EventsName     = "events.jsonl"
	TranscriptName = "transcript.txt"
	MCPConfigName  = "mcp.json"
	InboxDirName   = "inbox"

	// InboxTmp, InboxNew and InboxCur are the Maildir sub-directories.
	InboxTmp = "tmp"
	InboxNew = "new"
	InboxCur = "cur"

	// TempPrefix starts the name of an agent directory under construction
	// in agents/. Anything in agents/ with this prefix is a leftover of a
	// creation that never committed and is removed on open.
	TempPrefix = ".tmp-"

	// BrokenSuffix ends the name of a copy of a torn tail cut off a log.
	BrokenSuffix = ".broken"

	// MessageExt ends the file name of a message in an inbox.
	MessageExt = ".json"
)

// Permissions of what the store creates.
const (
	dirPerm  = 0o700
	filePerm = 0o600
)

// Layout names every path in a home directory.
type Layout struct {
	Home string
}

func (l Layout) AgentsDir() string     { return filepath.Join(l.Home, AgentsDirName) }
func (l Layout) ArchiveDir() string    { return filepath.Join(l.Home, ArchiveDirName) }
func (l Layout) WorkspacesDir() string { return filepath.Join(l.Home, WorkspacesDirName) }
func (l Layout) Socket() string        { return filepath.Join(l.Home, SocketName) }
func (l Layout) Lock() string          { return filepath.Join(l.Home, LockName) }
func (l Layout) Pid() string           { return filepath.Join(l.Home, PidName) }
func (l Layout) Log() string           { return filepath.Join(l.Home, LogName) }
func (l Layout) Recovery() string      { return filepath.Join(l.Home, RecoveryName) }

// HomeFile is home.json, the home's identity; BackupFile is backup.json,
// the mark of a copy (home.go).
func (l Layout) HomeFile() string   { return filepath.Join(l.Home, HomeName) }
func (l Layout) BackupFile() string { return filepath.Join(l.Home, BackupName) }

// CopyLock is copy.lock, held (shared) by copies of the home in progress.
func (l Layout) CopyLock() string { return filepath.Join(l.Home, CopyLockName) }

// ProviderDir is providers/<name>: state a provider keeps for itself
// (a CLI's private HOME, saved conversations, session ids).
func (l Layout) ProviderDir(name string) string {
	return filepath.Join(l.Home, ProvidersDirName, name)
}

// ToolSocket is run/<id>.sock: the socket that serves one sandboxed
// agent's tools, and nothing else of the daemon, to the MCP server inside
// its sandbox.
func (l Layout) ToolSocket(id string) string {
	return filepath.Join(l.Home, RunDirName, id+".sock")
}

// KubeSynced is run/k8s/<id>.synced: the daemon's record that agent
// id's workspace volume on a Kubernetes executor came back in full after
// its last turn (supervisor/daemon, kube_synced.go). It is under run/,
// which a backup leaves out.
func (l Layout) KubeSynced(id string) string {
	return filepath.Join(l.Home, RunDirName, "k8s", id+".synced")
}

// ScratchDir is scratch/<id>: the working directory of an agent that has
// neither a workspace nor a directory of the user's (one created before
// agents had working directories, or through an API that named none).
func (l Layout) ScratchDir(id string) string { return filepath.Join(l.Home, ScratchDirName, id) }

// ShellState is shell/<id>: where the shell work tool keeps an agent's
// working directory and exported variables between calls.
func (l Layout) ShellState(id string) string { return filepath.Join(l.Home, ShellDirName, id) }

// Config is config.json: the user's settings of the daemon, read at start
// and adopted live when edited.
func (l Layout) Config() string { return filepath.Join(l.Home, ConfigName) }

// Procs is providers.json: the provider processes the daemon runs, so that
// a daemon started after a kill -9 can reap them.
func (l Layout) Procs() string { return filepath.Join(l.Home, ProcsName) }

// AgentDir is agents/<id>.
func (l Layout) AgentDir(id string) string { return filepath.Join(l.AgentsDir(), id) }

// TempAgentDir is the name an agent directory has while it is built.
func (l Layout) TempAgentDir(id string) string {
	return filepath.Join(l.AgentsDir(), TempPrefix+id)
}

// ArchivedAgentDir is archive/<id>.
func (l Layout) ArchivedAgentDir(id string) string { return filepath.Join(l.ArchiveDir(), id) }

// AgentFiles names the files of one agent directory, wherever it lives.
type AgentFiles struct {
	Dir string
}

// Agent returns the files of the live agent id.
func (l Layout) Agent(id string) AgentFiles { return AgentFiles{Dir: l.AgentDir(id)} }

func (a AgentFiles) Session() string    { return filepath.Join(a.Dir, SessionName) }
func (a AgentFiles) Events() string     { return filepath.Join(a.Dir, EventsName) }
func (a AgentFiles) Transcript() string { return filepath.Join(a.Dir, TranscriptName) }
func (a AgentFiles) MCPConfig() string  { return filepath.Join(a.Dir, MCPConfigName) }

// Broken names the n-th copy of a torn tail cut off events.jsonl at offset.
func (a AgentFiles) Broken(offset int64, n int) string {
	name := EventsName + "." + strconv.FormatInt(offset, 10)
	if n > 0 {
		name += "-" + strconv.Itoa(n)
	}
	return filepath.Join(a.Dir, name+BrokenSuffix)
}

// BrokenSession names the n-th copy of an unreadable session.json kept by
// a rebuild.
func (a AgentFiles) BrokenSession(n int) string {
	return filepath.Join(a.Dir, SessionName+"."+strconv.Itoa(n)+BrokenSuffix)
}

// isAtomicTemp reports whether name is a temporary file left in an agent
// directory by an interrupted atomic replace. renameio names them
// "." + base + random digits.
func isAtomicTemp(name string) bool {
	trimmed := strings.TrimRight(name, "0123456789")
	if trimmed == name || !strings.HasPrefix(trimmed, ".") {
		return false
	}
	switch base := trimmed[1:]; {
	case base == SessionName, base == TranscriptName, base == MCPConfigName:
		return true
	default:
		return strings.HasPrefix(base, EventsName+".") && strings.HasSuffix(base, BrokenSuffix)
	}
}

// Inbox is a Maildir: tmp/ for messages being written, new/ for published
// undelivered ones, cur/ for delivered ones.
type Inbox struct {
	Dir string
}

// Sub returns the path of tmp/, new/ or cur/.
func (b Inbox) Sub(sub string) string { return filepath.Join(b.Dir, sub) }

// Path returns the path of message id in sub.
func (b Inbox) Path(sub, id string) string { return filepath.Join(b.Dir, sub, id+MessageExt) }

// Inbox returns the agent's inbox.
func (a AgentFiles) Inbox() Inbox { return Inbox{Dir: filepath.Join(a.Dir, InboxDirName)} }

// UserInbox is the inbox of messages to USER, HOME/inbox.
func (l Layout) UserInbox() Inbox { return Inbox{Dir: filepath.Join(l.Home, InboxDirName)} }

// Workspace file names.
const (
	WorkspaceFileName = "workspace.json"
	WorkspaceRootName = "root"
	// WorkspaceStateName holds the persisted shell state (cwd, exported
	// environment) of a workspace; it lives beside root/, so that it works
	// for read-only views too.
	WorkspaceStateName = "shell-state"
	// WorkspaceGitName is the git directory of a git workspace's clone,
	// beside root/ and never inside it; the sandbox binds it at
	// /workspace/.git.
	WorkspaceGitName = "git"
)

// WorkspaceScopeDir is workspaces/<scope>; scope is "USER" or an agent id.
func (l Layout) WorkspaceScopeDir(scope string) string {
	return filepath.Join(l.WorkspacesDir(), scope)
}

// TempWorkspaceDir is the name a workspace directory has while it is built.
func (l Layout) TempWorkspaceDir(scope, name string) string {
	return filepath.Join(l.WorkspacesDir(), scope, TempPrefix+name)
}

// WorkspaceDir is workspaces/<scope>/<name>; scope is "USER" or an agent id.
func (l Layout) WorkspaceDir(scope, name string) string {
	return filepath.Join(l.WorkspacesDir(), scope, name)
}

// WorkspaceFile is workspaces/<scope>/<name>/workspace.json.
func (l Layout) WorkspaceFile(scope, name string) string {
	return filepath.Join(l.WorkspaceDir(scope, name), WorkspaceFileName)
}

// WorkspaceRoot is workspaces/<scope>/<name>/root, the workspace's files.
func (l Layout) WorkspaceRoot(scope, name string) string {
	return filepath.Join(l.WorkspaceDir(scope, name), WorkspaceRootName)
}

// WorkspaceGitDir is workspaces/<scope>/<name>/git, a git workspace's
// git directory.
func (l Layout) WorkspaceGitDir(scope, name string) string {
	return filepath.Join(l.WorkspaceDir(scope, name), WorkspaceGitName)
}

// WorkspaceState is workspaces/<scope>/<name>/shell-state.
func (l Layout) WorkspaceState(scope, name string) string {
	return filepath.Join(l.WorkspaceDir(scope, name), WorkspaceStateName)
}
