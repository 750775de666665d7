package fsstore

import (
	"fmt"
	"maps"
)

// Event types. The ones that change session.json are applied by Apply on
// replay; the others are history for people and tools to read.
const (
	EvCreated   = "created"           // data: the Session as created
	EvState     = "state"             // data: StateChange
	EvProvider  = "provider"          // data: ProviderChange
	EvTurn      = "turn"              // data: Counters, added to the totals
	EvMetadata  = "metadata"          // data: MetadataChange
	EvEdited    = "edited"            // data: Edit, a hand edit adopted
	EvSent      = "message_sent"      // data: MessageRef (history only)
	EvDelivered = "message_delivered" // data: Delivered (history only)
	EvSpawned   = "spawned"           // data: Spawned (history only)
)

// StateChange moves the agent and/or its session to a new state.
type StateChange struct {
	AgentState   AgentState   `json:"agent_state,omitempty"`
	SessionState SessionState `json:"session_state,omitempty"`
	Reason       string       `json:"reason,omitempty"`
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

// Apply returns the session that results from applying e to s. s is not
// modified. Event types that do not change the snapshot are accepted as
// they are. Apply does not check transitions; that is the daemon's job.
func Apply(s *Session, e Event) (*Session, error) {
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
		var d StateChange
		if err = e.Decode(&d); err == nil {
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
		var d Counters
		if err = e.Decode(&d); err == nil {
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
		}
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
