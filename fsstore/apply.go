package fsstore

import (
	"fmt"
	"maps"
	"slices"
	"time"
	"unicode/utf8"
)

// Event types. The ones that change session.json are applied by Apply on
// replay; the others are history for people and tools to read.
const (
	EvCreated   = "created"           // data: the Session as created
	EvState     = "state"             // data: StateChange
	EvProvider  = "provider"          // data: ProviderChange
	EvTurn      = "turn"              // data: TurnRecord, its Counters added to the totals
	EvMetadata  = "metadata"          // data: MetadataChange
	EvEdited    = "edited"            // data: Edit, a hand edit adopted
	EvSent      = "message_sent"      // data: MessageRef (history only)
	EvDelivered = "message_delivered" // data: Delivered (history only)
	EvSpawned   = "spawned"           // data: Spawned (history only)

	EvPool         = "pool"          // data: PoolChange
	EvBudget       = "budget"        // data: Budget (zero: no budget)
	EvGate         = "gate"          // data: GateChange
	EvWaiting      = "waiting"       // data: Waiting, the whole list
	EvReminderSet  = "reminder_set"  // data: Reminder
	EvReminderDone = "reminder_done" // data: ReminderDone (fired or cancelled)
	EvSubscribed   = "subscribed"    // data: Subscription
	EvUnsubscribed = "unsubscribed"  // data: Unsubscribed
	EvTurnFailed   = "turn_failed"   // data: TurnFailed (history only)
	EvEditRefused  = "edit_refused"  // data: EditRefused (history only)
	EvPermissions  = "permissions"   // data: Permissions, the whole setting
	EvWorkDir      = "work_dir"      // data: WorkDirChange
	EvToolDenied   = "tool_denied"   // data: ToolDenied (history only)
	EvWork         = "work"          // data: Work, a work tool's call and result (history only)
	EvLimits       = "limits"        // data: Limits, the whole setting
)

// WorkDirChange sets the agent's working directory (a migration of an
// agent created before it had one).
type WorkDirChange struct {
	WorkDir string `json:"work_dir"`
	Reason  string `json:"reason,omitempty"`
}

func (WorkDirChange) EventType() string { return EvWorkDir }

func (d WorkDirChange) applyTo(n *Session) error {
	n.WorkDir = d.WorkDir
	return nil
}

// ToolDenied records a tool call the provider's own permission rules
// refused; the turn went on.
type ToolDenied struct {
	Tool   string `json:"tool"`
	Reason string `json:"reason"`
}

func (ToolDenied) EventType() string { return EvToolDenied }

// Work records one call of a work tool (shell, read_file, write_file,
// edit_file) run by the daemon, and its result, cut to a few KiB.
type Work struct {
	Tool    string `json:"tool"`
	Args    string `json:"args"`
	Result  string `json:"result"`
	IsError bool   `json:"is_error,omitempty"`
}

func (Work) EventType() string { return EvWork }

// EditRefused records a hand edit of session.json that was not adopted.
type EditRefused struct {
	Reason string `json:"reason"`
}

func (EditRefused) EventType() string { return EvEditRefused }

// PoolChange moves the session to another slot pool.
type PoolChange struct {
	Pool string `json:"pool"`
}

func (PoolChange) EventType() string { return EvPool }

func (d PoolChange) applyTo(n *Session) error {
	n.Pool = d.Pool
	return nil
}

// GateChange sets the gate and adds to the permits.
type GateChange struct {
	Gated      *bool  `json:"gated,omitempty"`
	AddPermits int    `json:"add_permits,omitempty"` // negative to use one
	Reason     string `json:"reason,omitempty"`
}

func (GateChange) EventType() string { return EvGate }

func (d GateChange) applyTo(n *Session) error {
	if d.Gated != nil {
		n.Gated = *d.Gated
	}
	n.Permits += d.AddPermits
	if !n.Gated {
		n.Permits = 0
	}
	if d.Reason != "" {
		n.StateReason = d.Reason
	}
	return nil
}

// Waiting is the list of requests the agent awaits replies to.
type Waiting struct {
	IDs []string `json:"ids"`
}

func (Waiting) EventType() string { return EvWaiting }

func (d Waiting) applyTo(n *Session) error {
	n.WaitingFor = d.IDs
	return nil
}

// ReminderDone ends a reminder, or moves a repeating one to its next due
// time.
type ReminderDone struct {
	ID      string     `json:"id"`
	NextDue *time.Time `json:"next_due,omitempty"`
	Reason  string     `json:"reason,omitempty"` // "fired" or "cancelled"
}

func (ReminderDone) EventType() string { return EvReminderDone }

func (d ReminderDone) applyTo(n *Session) error {
	if d.NextDue == nil {
		n.Reminders = slices.DeleteFunc(n.Reminders, func(r Reminder) bool { return r.ID == d.ID })
		return nil
	}
	for i := range n.Reminders {
		if n.Reminders[i].ID == d.ID {
			n.Reminders[i].Due = *d.NextDue
		}
	}
	return nil
}

// Unsubscribed ends a subscription.
type Unsubscribed struct {
	ID string `json:"id"`
}

func (Unsubscribed) EventType() string { return EvUnsubscribed }

func (d Unsubscribed) applyTo(n *Session) error {
	n.Subscriptions = slices.DeleteFunc(n.Subscriptions, func(x Subscription) bool { return x.ID == d.ID })
	return nil
}

// TurnFailed records why a turn did not finish.
type TurnFailed struct {
	Error    string `json:"error"`
	Messages int    `json:"messages,omitempty"`
}

func (TurnFailed) EventType() string { return EvTurnFailed }

// StateChange moves the agent and/or its session to a new state.
type StateChange struct {
	AgentState   AgentState   `json:"agent_state,omitempty"`
	SessionState SessionState `json:"session_state,omitempty"`
	Reason       string       `json:"reason,omitempty"`
}

func (StateChange) EventType() string { return EvState }

func (d StateChange) applyTo(n *Session) error {
	if d.AgentState != "" {
		n.AgentState = d.AgentState
	}
	if d.SessionState != "" {
		n.SessionState = d.SessionState
	}
	n.StateReason = d.Reason
	return nil
}

// roundTrips reports whether d comes back unchanged from JSON: its strings
// are valid UTF-8 (JSON replaces invalid bytes).
func (d StateChange) roundTrips() bool {
	return utf8.ValidString(string(d.AgentState)) && utf8.ValidString(string(d.SessionState)) && utf8.ValidString(d.Reason)
}

// ProviderChange records what the provider said about its session.
type ProviderChange struct {
	ProviderSessionID string `json:"provider_session_id,omitempty"`
	StateBlob         []byte `json:"state_blob,omitempty"`
	// Reset forgets the provider session id and state blob (session
	// delete), before the fields above are applied.
	Reset bool `json:"reset,omitempty"`
}

func (ProviderChange) EventType() string { return EvProvider }

func (d ProviderChange) applyTo(n *Session) error {
	if d.Reset {
		n.ProviderSessionID, n.StateBlob = "", nil
	}
	if d.ProviderSessionID != "" {
		n.ProviderSessionID = d.ProviderSessionID
	}
	if d.StateBlob != nil {
		n.StateBlob = d.StateBlob
	}
	return nil
}

// MetadataChange sets Key to *Value, or deletes it when Value is nil.
type MetadataChange struct {
	Key   string  `json:"key"`
	Value *string `json:"value"`
}

func (MetadataChange) EventType() string { return EvMetadata }

func (d MetadataChange) applyTo(n *Session) error {
	switch {
	case d.Key == "":
		return fmt.Errorf("empty key")
	case d.Value == nil:
		delete(n.Metadata, d.Key)
	default:
		if n.Metadata == nil {
			n.Metadata = map[string]string{}
		}
		n.Metadata[d.Key] = *d.Value
	}
	return nil
}

// Edit holds the fields of a hand edit of session.json that were adopted.
// Nil fields were not changed.
type Edit struct {
	Name         *string            `json:"name,omitempty"`
	Instructions *string            `json:"instructions,omitempty"`
	Model        *string            `json:"model,omitempty"`
	Metadata     *map[string]string `json:"metadata,omitempty"`
	Permissions  *Permissions       `json:"permissions,omitempty"`
}

func (Edit) EventType() string { return EvEdited }

func (d Edit) applyTo(n *Session) error {
	if d.Name != nil {
		n.Name = *d.Name
	}
	if d.Instructions != nil {
		n.Instructions = *d.Instructions
	}
	if d.Model != nil {
		n.Model = *d.Model
	}
	if d.Metadata != nil {
		n.Metadata = maps.Clone(*d.Metadata)
	}
	if d.Permissions != nil {
		n.Permissions = d.Permissions.Clone()
	}
	return nil
}

// MessageRef names a message sent by this agent.
type MessageRef struct {
	ID string `json:"id"`
	To string `json:"to"`
}

func (MessageRef) EventType() string { return EvSent }

// Delivered lists messages moved from inbox/new to inbox/cur into a turn.
type Delivered struct {
	IDs []string `json:"ids"`
}

func (Delivered) EventType() string { return EvDelivered }

// Spawned records a child created by this agent.
type Spawned struct {
	ChildID  string `json:"child_id"`
	Name     string `json:"name"`
	SpawnKey string `json:"spawn_key,omitempty"`
}

func (Spawned) EventType() string { return EvSpawned }

// Apply returns the session that results from applying e to s. s is not
// modified. Event types that do not change the snapshot are accepted as
// they are. Apply does not check transitions; that is the daemon's job.
func Apply(s *Session, e Event) (*Session, error) { return apply(s, e, nil) }

// apply is Apply. p, if not nil, is the payload e was made from: a Change
// whose JSON gives it back unchanged (the state and turn events of every
// turn) is applied as it is instead of decoding e.Data again.
func apply(s *Session, e Event, p Payload) (*Session, error) {
	if e.Type == EvCreated {
		return applyCreated(e)
	}
	if s == nil {
		return nil, invalidf("%s event before created", e.Type)
	}
	n := s.Clone()
	c, err := changeOf(e, p)
	if err == nil && c != nil {
		err = c.applyTo(n)
	}
	if err != nil {
		return nil, invalidf("%s event %d: %v", e.Type, e.Seq, err)
	}
	n.LastSeq, n.UpdatedAt = e.Seq, e.Time
	if err := n.Validate(); err != nil {
		return nil, fmt.Errorf("%s event %d: %w", e.Type, e.Seq, err)
	}
	return n, nil
}

// applyCreated returns the session a created event holds.
func applyCreated(e Event) (*Session, error) {
	if e.Seq != 1 {
		return nil, invalidf("created event at seq %d", e.Seq)
	}
	var n Session
	if err := e.Decode(&n); err != nil {
		return nil, invalidf("created event: %v", err)
	}
	n.LastSeq, n.UpdatedAt = e.Seq, e.Time
	if err := n.Validate(); err != nil {
		return nil, err
	}
	return &n, nil
}
