package api

// Method names on daemon.sock (a tool socket serves only tool.list and
// tool.call). Each takes the params and gives the result its type's
// comment names.
const (
	MethodAgentArchive      = "agent.archive"
	MethodAgentAttach       = "agent.attach"
	MethodAgentBudget       = "agent.budget"
	MethodAgentCreate       = "agent.create"
	MethodAgentEvents       = "agent.events"
	MethodAgentGate         = "agent.gate"
	MethodAgentInspect      = "agent.inspect"
	MethodAgentList         = "agent.list"  // ListParams -> []AgentInfo, every match
	MethodAgentQuery        = "agent.query" // ListParams -> ListPage, paged
	MethodAgentPermissions  = "agent.permissions"
	MethodAgentLimits       = "agent.limits"
	MethodAgentRestore      = "agent.restore"
	MethodAgentInstructions = "agent.instructions"
	MethodAgentWake         = "agent.wake"
	MethodAgentSend         = "agent.send"
	MethodAgentTerminate    = "agent.terminate"
	MethodApprovalAnswer    = "approval.answer"
	MethodApprovalList      = "approval.list"
	MethodApprovalShow      = "approval.show" // ShowApprovalParams -> ApprovalDetail
	MethodDaemonRecovery    = "daemon.recovery"
	MethodDaemonStatus      = "daemon.status"
	MethodDaemonStop        = "daemon.stop"
	MethodDaemonWatch       = "daemon.watch"
	MethodConfigShow        = "config.show"
	MethodInboxList         = "inbox.list"   // InboxListParams -> []InboxMessage; marks nothing read
	MethodInboxRead         = "inbox.read"   // InboxReadParams -> InboxReadResult
	MethodInboxFollow       = "inbox.follow" // FollowParams -> a stream of Notification
	MethodSessionDelete     = "session.delete"
	MethodSessionList       = "session.list"
	MethodSessionResume     = "session.resume"
	MethodSessionSuspend    = "session.suspend"
	MethodWorkspaceCreate   = "workspace.create"
	MethodWorkspaceDelete   = "workspace.delete"
	MethodWorkspaceInspect  = "workspace.inspect"
	MethodWorkspaceLink     = "workspace.link"
	MethodWorkspaceList     = "workspace.list"
	MethodWorkspaceUnlink   = "workspace.unlink"
	MethodWorkspaceView     = "workspace.view"
	MethodWorkspaceDiff     = "workspace.diff"
	MethodWorkspacePublish  = "workspace.publish"
	MethodWorkspaceReattach = "workspace.reattach"
	MethodToolList          = "tool.list"
	MethodToolCall          = "tool.call"
)

// Methods lists every method name.
var Methods = []string{
	MethodAgentArchive,
	MethodAgentRestore,
	MethodAgentAttach,
	MethodAgentBudget,
	MethodAgentCreate,
	MethodAgentEvents,
	MethodAgentGate,
	MethodAgentInspect,
	MethodAgentList,
	MethodAgentQuery,
	MethodAgentPermissions,
	MethodAgentLimits,
	MethodAgentInstructions,
	MethodAgentWake,
	MethodAgentSend,
	MethodAgentTerminate,
	MethodApprovalAnswer,
	MethodApprovalList,
	MethodApprovalShow,
	MethodDaemonRecovery,
	MethodDaemonDoctor,
	MethodDaemonStatus,
	MethodDaemonStop,
	MethodDaemonWatch,
	MethodConfigShow,
	MethodInboxList,
	MethodInboxRead,
	MethodInboxFollow,
	MethodSessionDelete,
	MethodSessionList,
	MethodSessionResume,
	MethodSessionSuspend,
	MethodWorkspaceCreate,
	MethodWorkspaceDelete,
	MethodWorkspaceInspect,
	MethodWorkspaceLink,
	MethodWorkspaceList,
	MethodWorkspaceUnlink,
	MethodWorkspaceView,
	MethodWorkspaceDiff,
	MethodWorkspacePublish,
	MethodWorkspaceReattach,
	MethodToolList,
	MethodToolCall,
	MethodAgentShell,
	MethodAgentShellEnd,
}
