package fsstore

import "time"

// EvParked parks an agent until a time, or (with a zero Until) unparks
// it: its provider reported a usage or rate limit. A parked agent starts
// no turn until then; its messages wait in its inbox. Data: Parked.
const EvParked = "parked"

// Parked is the data of a parked event.
type Parked struct {
	// Until is when the limit resets; zero: the agent is no longer parked.
	Until time.Time `json:"until,omitempty"`
	// Reason is what the provider said.
	Reason string `json:"reason,omitempty"`
	// Key names the provider and credentials the limit applies to:
	// every agent on them waits for the same reset.
	Key string `json:"key,omitempty"`
}

// Park is an agent's parking, in the session.
type Park struct {
	Until  time.Time `json:"until"`
	Reason string    `json:"reason,omitempty"`
	Key    string    `json:"key,omitempty"`
}

func (Parked) EventType() string { return EvParked }

// applyTo parks the agent, or with a zero Until unparks it.
func (d Parked) applyTo(n *Session) error {
	if d.Until.IsZero() {
		n.Parked = nil
		return nil
	}
	if d.Key == "" {
		return invalidf("parked event without a key")
	}
	n.Parked = &Park{Until: d.Until, Reason: d.Reason, Key: d.Key}
	return nil
}
