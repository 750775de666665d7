package api

import (
	"slices"
	"time"

	"github.com/substrat/substrat/fsstore"
)

// EventsParams are the inputs of agent.events: which of an agent's
// events to send. Each event sent is a fsstore.Event; the result is
// EventsResult.
type EventsParams struct {
	Ref string `json:"ref"`
	// Tail > 0 sends only the last Tail events that match.
	Tail int `json:"tail,omitempty"`
	// After sends only events with a larger seq (a follower that
	// reconnects resumes after the last event it showed).
	After uint64 `json:"after,omitempty"`
	// Since sends only events at or after this time.
	Since time.Time `json:"since,omitzero"`
	// Types, if any, are the event types to send.
	Types []string `json:"types,omitempty"`
	// Follow keeps the stream open after the history and sends each
	// event as it is committed, in seq order, none twice.
	Follow bool `json:"follow,omitempty"`
}

// Match reports whether e is one of the events p asks for (Tail aside).
func (p EventsParams) Match(e fsstore.Event) bool {
	return e.Seq > p.After && !e.Time.Before(p.Since) && (len(p.Types) == 0 || slices.Contains(p.Types, e.Type))
}

// EventsResult is agent.events' result: how many events the agent's log
// holds (read through), and the last seq it holds.
type EventsResult struct {
	Events  int    `json:"events"`
	LastSeq uint64 `json:"last_seq"`
}

// Tail keeps the last n of what it is given (all of it when n <= 0), in
// a ring, in bounded memory.
type Tail struct {
	n    int
	ring []fsstore.Event
	next int
}

// NewTail keeps the last n events.
func NewTail(n int) *Tail { return &Tail{n: n} }

// Add keeps e, forgetting the oldest once n are kept.
func (t *Tail) Add(e fsstore.Event) {
	if len(t.ring) < t.n {
		t.ring = append(t.ring, e)
		return
	}
	t.ring[t.next] = e
	t.next = (t.next + 1) % t.n
}

// Events returns what is kept, oldest first.
func (t *Tail) Events() []fsstore.Event {
	return append(slices.Clone(t.ring[t.next:]), t.ring[:t.next]...)
}
