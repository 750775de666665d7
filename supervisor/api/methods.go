package api

import (
	"github.com/substrat/substrat/fsstore"
)

// Method describes a method of daemon.sock that takes params P and
// answers with one result R. rpc.Call and rpc.Handle take a Method, so a
// caller or a handler that pairs a method with the wrong types does not
// compile.
type Method[P, R any] struct{ Name string }

// StreamMethod describes a method that takes params P, sends any number
// of frames F, then one final result R (struct{} for a stream that only
// ends with an error: the client went away, or the daemon stopped).
type StreamMethod[P, F, R any] struct{ Name string }

// Methods lists every method name, in the order of the declarations
// below; each descriptor adds its name when it is made.
var Methods []string

func method[P, R any](name string) Method[P, R] {
	Methods = append(Methods, name)
	return Method[P, R]{Name: name}
}

func stream[P, F, R any](name string) StreamMethod[P, F, R] {
	Methods = append(Methods, name)
	return StreamMethod[P, F, R]{Name: name}
}

// The daemon itself.
var (
	// DaemonStatus says how the daemon runs: its agents, pools, limits.
	DaemonStatus = method[struct{}, StatusResult]("daemon.status")
	// DaemonDoctor runs `substrat doctor`'s checks in the daemon's own
	// process, with its PATH and environment.
	DaemonDoctor = method[struct{}, DoctorReport]("daemon.doctor")
	// DaemonStop asks the daemon to stop; it answers before it goes.
	DaemonStop = method[struct{}, StopResult]("daemon.stop")
	// DaemonRecovery is the report of the last start-up recovery (nil
	// before it ran).
	DaemonRecovery = method[struct{}, *Report]("daemon.recovery")
	// DaemonWatch streams the events of one agent (Ref) or of all
	// (empty Ref) until the client goes away.
	DaemonWatch = stream[RefParams, WatchFrame, struct{}]("daemon.watch")
	// ConfigShow gives the settings the daemon runs with.
	ConfigShow = method[struct{}, ConfigReport]("config.show")
)

// The agents.
var (
	// AgentCreate makes an agent.
	AgentCreate = method[CreateParams, AgentInfo]("agent.create")
	// AgentList gives every agent that matches (agent.query pages).
	AgentList = method[ListParams, []AgentInfo]("agent.list")
	// AgentQuery gives a page of the agents that match.
	AgentQuery = method[ListParams, ListPage]("agent.query")
	// AgentInspect gives an agent, its session and the limits in force.
	AgentInspect = method[RefParams, InspectResult]("agent.inspect")
	// AgentSend sends USER's message to an agent. With Wait it streams
	// a WatchSent frame, then the agent's events while the turn that
	// takes the message runs, and gives its outcome.
	AgentSend = stream[SendMessageParams, WatchFrame, SendResult]("agent.send")
	// AgentAttach streams an agent's events until the client goes away.
	AgentAttach = stream[RefParams, WatchFrame, struct{}]("agent.attach")
	// AgentEvents streams the events of an agent's log that match, then
	// (with Follow) each one as it is committed.
	AgentEvents = stream[EventsParams, fsstore.Event, EventsResult]("agent.events")
	// AgentTerminate ends an agent (or its subtree) and gives those
	// ended.
	AgentTerminate = method[TerminateParams, []AgentInfo]("agent.terminate")
	// AgentArchive moves a terminated agent (and its subtree) out of the
	// live tree, and gives those moved.
	AgentArchive = method[RefParams, []AgentInfo]("agent.archive")
	// AgentRestore brings an archived agent (and its subtree) back.
	AgentRestore = method[RefParams, []AgentInfo]("agent.restore")
	// AgentWake tries a parked agent now.
	AgentWake = method[RefParams, AgentInfo]("agent.wake")
	// AgentInstructions sets an agent's instructions.
	AgentInstructions = method[InstructionsParams, AgentInfo]("agent.instructions")
	// AgentLimits sets an agent's resource limits.
	AgentLimits = method[LimitsParams, AgentInfo]("agent.limits")
	// AgentPermissions sets an agent's permission setting.
	AgentPermissions = method[PermissionsParams, AgentInfo]("agent.permissions")
	// AgentBudget sets an agent's budget.
	AgentBudget = method[BudgetParams, AgentInfo]("agent.budget")
	// AgentGate gates, ungates or permits an agent (or its subtree).
	AgentGate = method[GateParams, []AgentInfo]("agent.gate")
	// AgentShell streams one ShellCommand, the provider's own session
	// for a person to take over, and holds the agent until the client
	// goes away.
	AgentShell = stream[ShellParams, ShellCommand, struct{}]("agent.shell")
	// AgentShellEnd lets an agent taken over run again.
	AgentShellEnd = method[ShellEndParams, ShellEndResult]("agent.shell_end")
)

// The approval requests.
var (
	// ApprovalAnswer answers an approval request, as USER.
	ApprovalAnswer = method[AnswerParams, fsstore.Approval]("approval.answer")
	// ApprovalList gives the pending requests.
	ApprovalList = method[struct{}, []PendingApproval]("approval.list")
	// ApprovalShow gives one request, pending or answered.
	ApprovalShow = method[ShowApprovalParams, ApprovalDetail]("approval.show")
)

// USER's inbox.
var (
	// InboxList gives USER's messages; it marks nothing read.
	InboxList = method[InboxListParams, []InboxMessage]("inbox.list")
	// InboxRead marks USER's messages read.
	InboxRead = method[InboxReadParams, InboxReadResult]("inbox.read")
	// InboxFollow streams the notifications: a NotifyHello, then each
	// as it happens.
	InboxFollow = stream[FollowParams, Notification, struct{}]("inbox.follow")
)

// The provider sessions.
var (
	// SessionList gives every agent's provider session.
	SessionList = method[struct{}, []SessionInfo]("session.list")
	// SessionSuspend ends an agent's provider process, keeping its
	// session.
	SessionSuspend = method[RefParams, AgentInfo]("session.suspend")
	// SessionResume starts it again.
	SessionResume = method[RefParams, AgentInfo]("session.resume")
	// SessionDelete forgets an agent's provider session: its next turn
	// starts a new one.
	SessionDelete = method[RefParams, AgentInfo]("session.delete")
)

// The workspaces.
var (
	// WorkspaceCreate makes a workspace.
	WorkspaceCreate = method[WorkspaceParams, WorkspaceInfo]("workspace.create")
	// WorkspaceDelete deletes one.
	WorkspaceDelete = method[WorkspaceDeleteParams, WorkspaceDeleteResult]("workspace.delete")
	// WorkspaceInspect gives one.
	WorkspaceInspect = method[RefParams, WorkspaceInfo]("workspace.inspect")
	// WorkspaceLink binds a host path into one.
	WorkspaceLink = method[LinkParams, WorkspaceInfo]("workspace.link")
	// WorkspaceList gives every workspace.
	WorkspaceList = method[struct{}, []WorkspaceInfo]("workspace.list")
	// WorkspaceUnlink removes a link.
	WorkspaceUnlink = method[UnlinkParams, WorkspaceInfo]("workspace.unlink")
	// WorkspaceView makes a view of a workspace.
	WorkspaceView = method[ViewParams, WorkspaceInfo]("workspace.view")
	// WorkspaceDiff gives a git workspace's diff against its base.
	WorkspaceDiff = method[WorkspaceDiffParams, WorkspaceDiffResult]("workspace.diff")
	// WorkspacePublish commits a git workspace's work to its branch.
	WorkspacePublish = method[RefParams, WorkspacePublishResult]("workspace.publish")
	// WorkspaceReattach makes a copied home's git workspace its own.
	WorkspaceReattach = method[RefParams, WorkspaceInfo]("workspace.reattach")
)

// The agent tools: the only methods a tool socket serves.
var (
	// ToolList gives the agent tools' specs.
	ToolList = method[struct{}, []ToolSpec]("tool.list")
	// ToolCall runs an agent tool for an agent.
	ToolCall = method[ToolCallParams, ToolResult]("tool.call")
)
