package fsstore

// EvCompaction records that a provider compacted its model's context: the
// older part of the conversation, which no longer fitted in the model's
// context window, was replaced by a summary the model wrote (history
// only: it changes no snapshot). The agent's transcript.txt still holds
// the whole conversation.
const EvCompaction = "compaction" // data: Compaction

// Compaction is the data of a compaction event.
type Compaction struct {
	// Provider is the agent's provider.
	Provider string `json:"provider"`
	// Reason: "threshold" (the conversation was about to pass the share
	// of the window that triggers a compaction) or
	// "context_length_exceeded" (the server refused a request as over the
	// window, and it was retried after the compaction).
	Reason string `json:"reason,omitempty"`
	// Replaced says what the summary replaced ("turns 1-12"), in the
	// provider's count of its session's turns (FirstTurn, LastTurn);
	// Dropped of them, the oldest, were dropped without a summary.
	Replaced  string `json:"replaced"`
	FirstTurn int    `json:"first_turn,omitempty"`
	LastTurn  int    `json:"last_turn,omitempty"`
	Dropped   int    `json:"dropped,omitempty"`
	Summary   string `json:"summary,omitempty"`
	// TokensBefore and TokensAfter are the context's tokens, as the
	// provider estimated them, and Window the model's context window.
	TokensBefore int `json:"tokens_before"`
	TokensAfter  int `json:"tokens_after"`
	Window       int `json:"window,omitempty"`
}

func (Compaction) EventType() string { return EvCompaction }
