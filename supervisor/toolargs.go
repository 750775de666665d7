package supervisor

import "encoding/json"

// The arguments of the agent tools: each tool's input schema is generated
// from its type (see newTool).

// spawnAgentArgs are the arguments of spawn_agent.
type spawnAgentArgs struct {
	Name         string            `json:"name"`
	Instructions string            `json:"instructions"`
	Workspace    string            `json:"workspace,omitempty"`
	Metadata     map[string]string `json:"metadata,omitempty"`
	Worktree     bool              `json:"worktree,omitempty" jsonschema:"give the child a git workspace of its own (a clone of your repository), branched from your HEAD (you must be in a git workspace); its branch is published to the repository when its turns end: git fetch origin, then git merge origin/<branch>"`
	Branch       string            `json:"branch,omitempty" jsonschema:"the child's new branch, under substrat/ (default substrat/<name>)"`
}

// sendMessageArgs are the arguments of send_message.
type sendMessageArgs struct {
	Recipient string `json:"recipient"`
	Text      string `json:"text"`
}

// checkInboxArgs are the arguments of check_inbox.
type checkInboxArgs struct {
	Sender string `json:"sender,omitempty"`
	Kind   string `json:"kind,omitempty"`
}

// completeArgs are the arguments of complete.
type completeArgs struct {
	Result string `json:"result"`
}

// inspectAgentArgs are the arguments of inspect_agent.
type inspectAgentArgs struct {
	Name string `json:"name"`
}

// broadcastArgs are the arguments of broadcast.
type broadcastArgs struct {
	Text string `json:"text"`
}

// pokeArgs are the arguments of poke.
type pokeArgs struct {
	AgentName string `json:"agent_name"`
}

// remindMeArgs are the arguments of remind_me.
type remindMeArgs struct {
	Reason  string `json:"reason"`
	Timeout delay  `json:"timeout"`
	Every   delay  `json:"every,omitempty"`
}

// delay is a duration as a model writes it: "90s", "5m", or a number of
// seconds (parseDelay reads it).
type delay json.RawMessage

// UnmarshalJSON keeps the raw value.
func (d *delay) UnmarshalJSON(b []byte) error {
	*d = append((*d)[:0], b...)
	return nil
}

// cancelReminderArgs are the arguments of cancel_reminder.
type cancelReminderArgs struct {
	ID string `json:"id"`
}

// setMetadataArgs are the arguments of set_agent_metadata.
type setMetadataArgs struct {
	AgentName string  `json:"agent_name"`
	Key       string  `json:"key"`
	Value     *string `json:"value,omitempty"`
}

// subscribeArgs are the arguments of subscribe.
type subscribeArgs struct {
	AgentName  string `json:"agent_name"`
	Transition string `json:"transition"`
	Once       bool   `json:"once,omitempty"`
}

// unsubscribeArgs are the arguments of unsubscribe.
type unsubscribeArgs struct {
	ID string `json:"id"`
}
