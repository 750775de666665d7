package fsstore

// EvEffect records an agent tool call whose effect reaches beyond its
// turn (a message sent, a child spawned, a reminder set...): once before
// the effect, with Done false and the id its own ids derive from, and
// once after it, with Done and the result the model was given. A turn
// cut short and run again finds them, so that the same call in it acts
// once (history only: it changes no snapshot).
const EvEffect = "effect" // data: Effect

// Effect is the data of an effect event.
type Effect struct {
	// Turn is the id of the first message of the turn's prompt: a turn run
	// again after a crash or a failure starts with the same message.
	Turn string `json:"turn"`
	// Key names the call within the turn: its tool, a hash of its
	// arguments, and which repeat of the same call it is.
	Key  string `json:"key"`
	Tool string `json:"tool"`
	// Args are the call's arguments, cut to a few hundred bytes (for the
	// note a turn run again is given).
	Args string `json:"args,omitempty"`
	// Base is the id the ids the call makes (its messages' ids, a
	// reminder's) derive from, so that the call run again makes the same.
	Base    string `json:"base"`
	Done    bool   `json:"done,omitempty"`
	Result  string `json:"result,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
}

func (Effect) EventType() string { return EvEffect }
