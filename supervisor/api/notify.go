package api

import "time"

// Notifications: what notify_command reads on its stdin (one JSON object
// and a newline) and what `substrat inbox --follow --json` prints, one a
// line. Text an agent wrote travels in these fields only, never in a
// command line.
const (
	NotifyMessage   = "message"   // a message reached USER
	NotifyApproval  = "approval"  // an approval request waits for USER
	NotifyGated     = "gated"     // an agent was gated (budget, failures, by hand)
	NotifyParked    = "parked"    // an agent was parked until its provider's limit resets
	NotifyUnparked  = "unparked"  // a parked agent may run again
	NotifyCompleted = "completed" // a root agent completed, its result sent to USER
	// NotifyHello is the first frame of inbox.follow: Time is when the
	// daemon began to follow, the time to resume from.
	NotifyHello = "hello"
	// NotifyDropped is a frame of inbox.follow only: Count notifications
	// were dropped, this reader having fallen behind.
	NotifyDropped = "dropped"
)

// NotifyTopic is the Agent of the watch events that carry notifications:
// only a subscription to it sees them.
const NotifyTopic = "NOTIFY"

// MaxNotifyText bounds Notification.Text (the whole message is in USER's
// inbox).
const MaxNotifyText = 4096

// Notification describes one thing USER may want to know.
type Notification struct {
	Version int       `json:"version"`
	Kind    string    `json:"kind"`
	Time    time.Time `json:"time"`
	// The agent it is about (for a message, its sender; none for SYSTEM).
	AgentID   string `json:"agent_id,omitempty"`
	AgentName string `json:"agent_name,omitempty"`
	AgentPath string `json:"agent_path,omitempty"`
	// Text is a summary: the message's text (cut at MaxNotifyText), or
	// why the agent was gated or parked.
	Text string `json:"text"`
	// MessageID is the message to USER (message, approval, completed);
	// RequestID the approval request.
	MessageID   string `json:"message_id,omitempty"`
	MessageKind string `json:"message_kind,omitempty"`
	From        string `json:"from,omitempty"`
	RequestID   string `json:"request_id,omitempty"`
	// Until is when a park ends.
	Until *time.Time `json:"until,omitempty"`
	// Coalesced is how many more notifications this one stands for
	// (notify_command only: a burst that waited for a free slot).
	Coalesced int `json:"coalesced,omitempty"`
	// Count is how many notifications a NotifyDropped frame stands for.
	Count int `json:"count,omitempty"`
}

// FollowParams are inbox.follow's: the messages to USER sent at or after
// Since (the time of the last one the client saw, or of its hello) are
// sent first; the client drops those it has seen (by message id). Zero:
// only what happens from now.
type FollowParams struct {
	Since time.Time `json:"since,omitzero"`
}
