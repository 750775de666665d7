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

// ToolDenied records a tool call the provider's own permission rules
// refused; the turn went on.
type ToolDenied struct {
	Tool   string `json:"tool"`
	Reason string `json:"reason"`
}

// Work records one call of a work tool (shell, read_file, write_file,
// edit_file) run by the daemon, and its result, cut to a few KiB.
type Work struct {
	Tool    string `json:"tool"`
	Args    string `json:"args"`
	Result  string `json:"result"`
	IsError bool   `json:"is_error,omitempty"`
}

// EditRefused records a hand edit of session.json that was not adopted.
type EditRefused struct {
	Reason string `json:"reason"`
}

// PoolChange moves the session to another slot pool.
type PoolChange struct {
	Pool string `json:"pool"`
}

// GateChange sets the gate and adds to the permits.
type GateChange struct {
	Gated      *bool  `json:"gated,omitempty"`
	AddPermits int    `json:"add_permits,omitempty"` // negative to use one
	Reason     string `json:"reason,omitempty"`
}

// Waiting is the list of requests the agent awaits replies to.
type Waiting struct {
	IDs []string `json:"ids"`
}

// ReminderDone ends a reminder, or moves a repeating one to its next due
// time.
type ReminderDone struct {
	ID      string     `json:"id"`
	NextDue *time.Time `json:"next_due,omitempty"`
	Reason  string     `json:"reason,omitempty"` // "fired" or "cancelled"
}

// Unsubscribed ends a subscription.
type Unsubscribed struct {
	ID string `json:"id"`
}

// TurnFailed records why a turn did not finish.
type TurnFailed struct {
	Error    string `json:"error"`
	Messages int    `json:"messages,omitempty"`
}

// StateChange moves the agent and/or its session to a new state.
type StateChange struct {
	AgentState   AgentState   `json:"agent_state,omitempty"`
	SessionState SessionState `json:"session_state,omitempty"`
	Reason       string       `json:"reason,omitempty"`
}

// decodeData decodes e's data as a T.
func decodeData[T any](e Event) (T, error) {
	var d T
	err := e.Decode(&d)
	return d, err
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

// MetadataChange sets Key to *Value, or deletes it when Value is nil.
type MetadataChange struct {
	Key   string  `json:"key"`
	Value *string `json:"value"`
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

// MessageRef names a message sent by this agent.
type MessageRef struct {
	ID string `json:"id"`
	To string `json:"to"`
}

// Delivered lists messages moved from inbox/new to inbox/cur into a turn.
type Delivered struct {
	IDs []string `json:"ids"`
}

// Spawned records a child created by this agent.
type Spawned struct {
	ChildID  string `json:"child_id"`
	Name     string `json:"name"`
	SpawnKey string `json:"spawn_key,omitempty"`
}

// changesSession reports whether events of type typ change the snapshot
// beyond last_seq and updated_at, that is whether Apply does anything with
// their data. The others ("message_sent", "spawned", any type the daemon
// adds) are history only.
func changesSession(typ string) bool {
	switch typ {
	case EvCreated, EvState, EvProvider, EvTurn, EvMetadata, EvPool, EvBudget, EvGate, EvWaiting,
		EvReminderSet, EvReminderDone, EvSubscribed, EvUnsubscribed, EvEdited, EvPermissions, EvWorkDir,
		EvLimits, EvApprovalRequested, EvApprovalAnswered, EvParked:
		return true
	}
	return false
}

// Apply returns the session that results from applying e to s. s is not
// modified. Event types that do not change the snapshot are accepted as
// they are. Apply does not check transitions; that is the daemon's job.
func Apply(s *Session, e Event) (*Session, error) { return apply(s, e, nil) }

// apply is Apply. v, if not nil, is e's data before it was marshalled: for
// the types whose JSON round trip gives them back unchanged (the state and
// turn events of every turn) it is used as it is instead of decoding e.Data
// again.
func apply(s *Session, e Event, v any) (*Session, error) {
	if e.Type == EvCreated {
		if e.Seq != 1 {
			return nil, fmt.Errorf("%w: created event at seq %d", ErrInvalid, e.Seq)
		}
		var n Session
		if err := e.Decode(&n); err != nil {
			return nil, fmt.Errorf("%w: created event: %v", ErrInvalid, err)
		}
		n.LastSeq, n.UpdatedAt = e.Seq, e.Time
		if err := n.Validate(); err != nil {
			return nil, err
		}
		return &n, nil
	}
	if s == nil {
		return nil, fmt.Errorf("%w: %s event before created", ErrInvalid, e.Type)
	}
	n := s.Clone()
	var err error
	switch e.Type {
	case EvState:
		d, ok := v.(StateChange)
		if !ok || !d.roundTrips() {
			d, err = decodeData[StateChange](e)
		}
		if err == nil {
			if d.AgentState != "" {
				n.AgentState = d.AgentState
			}
			if d.SessionState != "" {
				n.SessionState = d.SessionState
			}
			n.StateReason = d.Reason
		}
	case EvProvider:
		var d ProviderChange
		if err = e.Decode(&d); err == nil {
			if d.Reset {
				n.ProviderSessionID, n.StateBlob = "", nil
			}
			if d.ProviderSessionID != "" {
				n.ProviderSessionID = d.ProviderSessionID
			}
			if d.StateBlob != nil {
				n.StateBlob = d.StateBlob
			}
		}
	case EvTurn:
		d, ok := v.(Counters) // numbers round-trip exactly
		if r, isRecord := v.(TurnRecord); isRecord {
			d, ok = r.Counters, true
		}
		if !ok {
			d, err = decodeData[Counters](e)
		}
		if err == nil {
			n.Counters = n.Counters.Add(d)
		}
	case EvMetadata:
		var d MetadataChange
		if err = e.Decode(&d); err == nil {
			if d.Key == "" {
				err = fmt.Errorf("empty key")
			} else if d.Value == nil {
				delete(n.Metadata, d.Key)
			} else {
				if n.Metadata == nil {
					n.Metadata = map[string]string{}
				}
				n.Metadata[d.Key] = *d.Value
			}
		}
	case EvPool:
		var d PoolChange
		if err = e.Decode(&d); err == nil {
			n.Pool = d.Pool
		}
	case EvBudget:
		var d Budget
		if err = e.Decode(&d); err == nil {
			n.Budget = &d
			if d.Tokens == 0 && d.CostUSD == 0 {
				n.Budget = nil
			}
		}
	case EvGate:
		var d GateChange
		if err = e.Decode(&d); err == nil {
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
		}
	case EvWaiting:
		var d Waiting
		if err = e.Decode(&d); err == nil {
			n.WaitingFor = d.IDs
		}
	case EvReminderSet:
		var d Reminder
		if err = e.Decode(&d); err == nil {
			if d.ID == "" {
				err = fmt.Errorf("reminder without id")
			} else {
				n.Reminders = append(slices.DeleteFunc(n.Reminders, func(r Reminder) bool { return r.ID == d.ID }), d)
			}
		}
	case EvReminderDone:
		var d ReminderDone
		if err = e.Decode(&d); err == nil {
			for i := range n.Reminders {
				if n.Reminders[i].ID == d.ID && d.NextDue != nil {
					n.Reminders[i].Due = *d.NextDue
				}
			}
			if d.NextDue == nil {
				n.Reminders = slices.DeleteFunc(n.Reminders, func(r Reminder) bool { return r.ID == d.ID })
			}
		}
	case EvSubscribed:
		var d Subscription
		if err = e.Decode(&d); err == nil {
			if d.ID == "" {
				err = fmt.Errorf("subscription without id")
			} else {
				n.Subscriptions = append(slices.DeleteFunc(n.Subscriptions, func(x Subscription) bool { return x.ID == d.ID }), d)
			}
		}
	case EvUnsubscribed:
		var d Unsubscribed
		if err = e.Decode(&d); err == nil {
			n.Subscriptions = slices.DeleteFunc(n.Subscriptions, func(x Subscription) bool { return x.ID == d.ID })
		}
	case EvEdited:
		var d Edit
		if err = e.Decode(&d); err == nil {
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
		}
	case EvPermissions:
		var d Permissions
		if err = e.Decode(&d); err == nil {
			n.Permissions = &d
		}
	case EvLimits:
		var d Limits
		if err = e.Decode(&d); err == nil {
			n.Limits = &d
			if d.IsZero() {
				n.Limits = nil
			}
		}
	case EvWorkDir:
		var d WorkDirChange
		if err = e.Decode(&d); err == nil {
			n.WorkDir = d.WorkDir
		}
	case EvApprovalRequested, EvApprovalAnswered:
		err = applyApproval(n, e)
	case EvParked:
		err = applyPark(n, e)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s event %d: %v", ErrInvalid, e.Type, e.Seq, err)
	}
	n.LastSeq, n.UpdatedAt = e.Seq, e.Time
	if err := n.Validate(); err != nil {
		return nil, fmt.Errorf("%s event %d: %w", e.Type, e.Seq, err)
	}
	return n, nil
}
