// Package api is the wire contract of the Substrat daemon: the params and
// results of its methods on daemon.sock, the watch stream's events, the
// recovery report and the agent tools' specs. The core (package
// supervisor) speaks these types; cmd, the daemon and the providers' tests
// import this package, not the daemon.
//
// Each method is described once, in methods.go, by a typed descriptor
// (Method[P, R], or StreamMethod[P, F, R] for one that sends frames):
// package rpc's Call, Stream and Handle take a descriptor, so a caller or
// a handler with the wrong params, frames or result does not compile. The
// package is data only: it links no code that runs processes
// (scripts/check-deps.sh).
package api

import (
	"encoding/json"
	"time"

	"github.com/substrat/substrat/fsstore"
)

// StatusResult is daemon.status.
type StatusResult struct {
	Pid          int       `json:"pid"`
	Home         string    `json:"home"`
	Version      string    `json:"version"`
	StartedAt    time.Time `json:"started_at"`
	Agents       int       `json:"agents"`
	LiveSessions int       `json:"live_sessions"`
	Busy         int       `json:"busy"`
	MaxSlots     int       `json:"max_slots"`
	Watchers     int       `json:"watchers"`
	// Pools gives each pool's live sessions, busy agents and size.
	Pools []PoolStatus `json:"pools"`
	// Notify counts the notify_command runs since the daemon started.
	Notify *NotifyStatus `json:"notify,omitempty"`
	// Parked maps each provider whose usage or rate limit parks its
	// agents to when it resets.
	Parked map[string]time.Time `json:"parked,omitempty"`
	// Limits says how agents' resource limits are enforced.
	Limits *LimitsStatus `json:"limits,omitempty"`
	// KeptOut are the agent directories the start-up recovery kept out of
	// the live tree (recovery.json, 'substrat recover') and that are still
	// out.
	KeptOut []fsstore.Finding `json:"kept_out"`
}

// NotifyStatus is what notify_command did since the daemon started. Each
// message to USER gets a run of its own or is coalesced into the run of
// a newer one: once nothing runs or waits, Messages = Runs + Coalesced.
type NotifyStatus struct {
	Limit     int `json:"limit"`     // commands at once (notify_concurrency)
	Messages  int `json:"messages"`  // messages to USER handed to the notifier
	Runs      int `json:"runs"`      // commands that finished
	Coalesced int `json:"coalesced"` // messages folded into a finished run
	Failures  int `json:"failures"`  // runs that failed (exit status, timeout, no such program)
	Running   int `json:"running"`   // commands running now
	Waiting   int `json:"waiting"`   // messages waiting for a slot, to run as one
	// LastError is why the last failed run failed, and when.
	LastError     string    `json:"last_error,omitempty"`
	LastFailureAt time.Time `json:"last_failure_at,omitzero"`
}

// PoolStatus is one pool of daemon.status.
type PoolStatus struct {
	Name string `json:"name"`
	Live int    `json:"live"`
	Busy int    `json:"busy"`
	Size int    `json:"size"`
}

// InspectResult is agent.inspect.
type InspectResult struct {
	Agent   AgentInfo        `json:"agent"`
	Session *fsstore.Session `json:"session"`
	Pending int              `json:"pending_messages"`
	// LimitsInForce are the resource limits its processes get: its own,
	// else its pool's, else the daemon's defaults, field by field; zero
	// is no limit.
	LimitsInForce fsstore.Limits `json:"limits_in_force"`
}

// SendResult is the final result of agent.send.
type SendResult struct {
	MessageID string `json:"message_id"`
	Text      string `json:"text,omitempty"`
	Failed    string `json:"failed,omitempty"`
	// Dropped counts the frames of the turn a slow reader missed.
	Dropped int `json:"dropped,omitempty"`
	// Held, when set, says why no turn takes the message now (gated,
	// parked, terminated): the message is stored, and the call does not
	// wait for a turn that would not come.
	Held string `json:"held,omitempty"`
}

// SessionInfo is one row of session.list.
type SessionInfo struct {
	ID                string               `json:"id"`
	Path              string               `json:"path"`
	Provider          string               `json:"provider"`
	SessionState      fsstore.SessionState `json:"session_state"`
	ProviderSessionID string               `json:"provider_session_id,omitempty"`
	HasStateBlob      bool                 `json:"has_state_blob"`
	Live              bool                 `json:"live"`
}

// Report is recovery.json: what the last start-up recovery found and did.
type Report struct {
	Version    int       `json:"version"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	DurationMS int64     `json:"duration_ms"`
	// Unclean is true when the previous daemon did not stop cleanly.
	Unclean     bool              `json:"unclean"`
	Agents      int               `json:"agents"`
	Findings    []fsstore.Finding `json:"findings"`
	KeptOut     []fsstore.Finding `json:"kept_out"`
	Suspended   []RecoveredAgent  `json:"suspended"`
	Redelivered []RecoveredAgent  `json:"redelivered"`
	Resumed     []RecoveredAgent  `json:"resumed"`
	// Reaped lists provider processes a killed daemon left running.
	Reaped []string `json:"reaped"`
	// Parked lists the agents found parked (Detail: until when, why):
	// they resume at their reset, not now.
	Parked []RecoveredAgent `json:"parked"`
	// Limited lists the agents whose processes run under resource
	// limits (Detail: the limits in force: their own, their pool's or
	// the default).
	Limited []RecoveredAgent `json:"limited"`
}

// RecoveredAgent names an agent the recovery acted on.
type RecoveredAgent struct {
	ID       string `json:"id"`
	Path     string `json:"path"`
	Messages int    `json:"messages,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// AnswerParams answer an approval request.
type AnswerParams struct {
	ID       string `json:"id"`
	Allow    bool   `json:"allow"`
	Reason   string `json:"reason,omitempty"`
	Remember string `json:"remember,omitempty"`
	// By is who answers: an agent id, or USER (the CLI).
	By string `json:"by"`
}

// PendingApproval is a request waiting for its answer, as listed.
type PendingApproval struct {
	fsstore.Approval
	Agent string `json:"agent"` // the requesting agent's path
}

// AgentInfo is an agent as the CLI and the tools show it.
type AgentInfo struct {
	ID           string               `json:"id"`
	Name         string               `json:"name"`
	Path         string               `json:"path"`
	ParentID     string               `json:"parent_id,omitempty"`
	Provider     string               `json:"provider"`
	Model        string               `json:"model,omitempty"`
	AgentState   fsstore.AgentState   `json:"agent_state"`
	SessionState fsstore.SessionState `json:"session_state"`
	StateReason  string               `json:"state_reason,omitempty"`
	Children     []string             `json:"children,omitempty"`
	Counters     fsstore.Counters     `json:"counters"`
	Subtree      fsstore.Counters     `json:"subtree_counters"`
	Live         bool                 `json:"live"`
	Dir          string               `json:"dir"`
	// DiskInvalid, when set, says why the session.json on disk was
	// refused; the daemon keeps the last good state meanwhile.
	DiskInvalid string `json:"disk_invalid,omitempty"`
	Gated       bool   `json:"gated,omitempty"`
	// Pending counts the undelivered messages (as the daemon last saw
	// inbox/new).
	Pending   int             `json:"pending"`
	Budget    *fsstore.Budget `json:"budget,omitempty"`
	Pool      string          `json:"pool,omitempty"`
	Workspace string          `json:"workspace,omitempty"`
	// Executor is where the agent's processes run: "" this machine, or
	// ssh://HOST.
	Executor string `json:"executor,omitempty"`
	// Failing counts the agent's failed turns in a row (within the restart
	// window); zero once a turn succeeds.
	Failing int `json:"failing,omitempty"`
	// Parked, when set, says until when the agent waits for its
	// provider's usage or rate limit to reset (its own park, or its
	// provider's while it has messages waiting).
	Parked *fsstore.Park `json:"parked,omitempty"`
	// State is the state in one word (StateOf), as agent list shows it.
	State string `json:"state,omitempty"`
	// OverBudget, when set, is the agent whose budget this one's
	// spending is over: itself or its closest ancestor.
	OverBudget *OverBudget `json:"over_budget,omitempty"`
}

// InstructionsParams are the inputs of agent.instructions (set): the
// agent and its new instructions, whole.
type InstructionsParams struct {
	Ref          string `json:"ref"`
	Instructions string `json:"instructions"`
}

// PermissionsParams are the inputs of SetPermissions: the new setting (a
// nil list leaves that list as it is; an empty one clears it).
type PermissionsParams struct {
	Ref             string   `json:"ref"`
	Mode            string   `json:"mode,omitempty"`
	AllowedTools    []string `json:"allowed_tools"`
	DisallowedTools []string `json:"disallowed_tools"`
	// Approver and ApprovalTimeout change when not empty.
	Approver        string `json:"approver,omitempty"`
	ApprovalTimeout string `json:"approval_timeout,omitempty"`
}

// LimitsParams are the inputs of agent.limits: the fields to change (nil:
// as it is; 0: the daemon's default; fsstore.NoLimit: none).
type LimitsParams struct {
	Ref         string `json:"ref"`
	MemoryBytes *int64 `json:"memory_bytes,omitempty"`
	Pids        *int64 `json:"pids,omitempty"`
	CPUWeight   *int64 `json:"cpu_weight,omitempty"`
}

// LimitsStatus is how the daemon enforces agents' resource limits
// (daemon.status).
type LimitsStatus struct {
	// Mechanism is "cgroup2", "cgroup1" or "rlimit".
	Mechanism string `json:"mechanism"`
	// Detail says where (the cgroup directories) or what it lacks.
	Detail string `json:"detail"`
	// Defaults are config.json's limits, for agents that set none.
	Defaults fsstore.Limits `json:"defaults"`
	// Groups counts the agents' cgroups that exist now.
	Groups int `json:"groups"`
}

// GateParams are the inputs of Gate.
type GateParams struct {
	Ref       string `json:"ref"`
	Op        string `json:"op"` // "gate", "ungate" or "permit"
	Recursive bool   `json:"recursive,omitempty"`
}

// CreateParams are the inputs of CreateAgent.
type CreateParams struct {
	Name         string `json:"name"`
	Provider     string `json:"provider,omitempty"`
	Model        string `json:"model,omitempty"`
	Instructions string `json:"instructions,omitempty"`
	Workspace    string `json:"workspace,omitempty"`
	// WorkDir is the host directory an agent without a workspace works
	// in (absolute; not inside the home). Empty: its parent's, else a
	// scratch directory of its own.
	WorkDir string `json:"work_dir,omitempty"`
	// Permissions is the agent's permission setting. Nil: its parent's,
	// else the default for where it runs (see work.go).
	Permissions *fsstore.Permissions `json:"permissions,omitempty"`
	// Limits are the agent's resource limits. Nil: its parent's, else
	// the daemon's defaults.
	Limits *fsstore.Limits `json:"limits,omitempty"`
	// Executor is where the agent's processes run: "" its parent's (this
	// machine for a root), or ssh://HOST.
	Executor string            `json:"executor,omitempty"`
	Parent   string            `json:"parent,omitempty"` // a ref; empty for a root
	Metadata map[string]string `json:"metadata,omitempty"`
	Pool     string            `json:"pool,omitempty"`
	Budget   *fsstore.Budget   `json:"budget,omitempty"`
	SpawnKey string            `json:"-"`
}

// TerminateParams are the inputs of Terminate.
type TerminateParams struct {
	Ref       string `json:"ref"`
	Recursive bool   `json:"recursive,omitempty"`
}

// SendParams are the inputs of the core's Send (agent.send takes
// SendMessageParams).
type SendParams struct {
	To   string `json:"to"` // an agent ref
	Text string `json:"text"`
}

// InboxMessage is a message to USER as `substrat inbox` shows it.
type InboxMessage struct {
	*fsstore.Message
	Unread bool `json:"unread"`
}

// InboxListParams are inbox.list's: the unread messages to USER, and with
// All the read ones too. Listing marks nothing read.
type InboxListParams struct {
	All bool `json:"all"`
}

// InboxReadParams are inbox.read's: the messages to USER to mark read,
// by id (those a reader has shown; a message that came since stays
// unread).
type InboxReadParams struct {
	IDs []string `json:"ids"`
}

// InboxReadResult is inbox.read's: how many of the messages were unread
// and are read now.
type InboxReadResult struct {
	Read int `json:"read"`
}

// WatchEvent is what subscribers see: a committed event, a message, or a
// piece of turn output. Clients read it as a WatchFrame.
type WatchEvent struct {
	Agent string    `json:"agent"`
	Name  string    `json:"name"`
	Type  WatchType `json:"type"`
	Seq   uint64    `json:"seq,omitempty"`
	Time  time.Time `json:"ts"`
	Data  any       `json:"data,omitempty"`
}

// WorkspaceParams are the inputs of CreateWorkspace.
type WorkspaceParams struct {
	Name    string `json:"name"`
	Scope   string `json:"scope,omitempty"` // USER (default) or an agent ref
	Network bool   `json:"network,omitempty"`
	// Git, if set, makes the root a git clone of the repository
	// there, on Branch (default substrat/<name>) from Base (default HEAD).
	Git    string `json:"git,omitempty"`
	Branch string `json:"branch,omitempty"`
	Base   string `json:"base,omitempty"`
}

// WorkspaceDeleteParams are the inputs of workspace.delete.
type WorkspaceDeleteParams struct {
	Ref string `json:"ref"`
	// Force deletes a git workspace with uncommitted or unmerged work;
	// DeleteBranch deletes its branch too.
	Force        bool `json:"force,omitempty"`
	DeleteBranch bool `json:"delete_branch,omitempty"`
}

// WorkspaceDiffParams are the inputs of workspace.diff.
type WorkspaceDiffParams struct {
	Ref  string `json:"ref"`
	Stat bool   `json:"stat,omitempty"`
}

// WorkspaceInfo is a workspace and the agents that use it.
type WorkspaceInfo struct {
	*Workspace
	Ref   string   `json:"ref"`
	Root  string   `json:"root"`
	Users []string `json:"users"`
	// Note says what a user may not expect of a workspace just made.
	Note string `json:"note,omitempty"`
}

// LinkParams are the inputs of LinkWorkspace.
type LinkParams struct {
	Workspace string `json:"workspace"`
	Source    string `json:"source"` // a host path
	Target    string `json:"target"` // the mount path inside the sandbox
	Mode      string `json:"mode,omitempty"`
}

// ViewParams are the inputs of ViewWorkspace.
type ViewParams struct {
	Source string `json:"source"`
	Name   string `json:"name"`
	Scope  string `json:"scope,omitempty"`
	Subdir string `json:"subdir,omitempty"`
	Mode   string `json:"mode,omitempty"`
}

// ToolSpec describes an agent tool: its name, what it does, and a JSON
// Schema of its arguments. Providers that speak MCP expose these.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}
