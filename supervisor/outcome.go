package supervisor

import (
	"sync"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
)

// Outcome is what became of a message a client waits on: the text of the
// turn that took it, or why that turn failed.
type Outcome struct {
	Text   string
	Failed string
}

// outcomes hands each message's outcome to the clients waiting for it.
// Unlike a watch subscription, it never drops one: a client that reads
// late still gets it.
type outcomes struct {
	mu      sync.Mutex // guards the field below
	waiting map[string][]chan Outcome
}

// await registers a waiter for message id; the channel receives its
// outcome once. cancel unregisters it.
func (o *outcomes) await(id string) (<-chan Outcome, func()) {
	ch := make(chan Outcome, 1)
	o.mu.Lock()
	if o.waiting == nil {
		o.waiting = map[string][]chan Outcome{}
	}
	o.waiting[id] = append(o.waiting[id], ch)
	o.mu.Unlock()
	return ch, func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		list := o.waiting[id]
		for i, c := range list {
			if c == ch {
				o.waiting[id] = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(o.waiting[id]) == 0 {
			delete(o.waiting, id)
		}
	}
}

// settle gives the outcome to the waiters of each message in ids.
func (o *outcomes) settle(ids []string, out Outcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range ids {
		for _, ch := range o.waiting[id] {
			select {
			case ch <- out:
			default: // already settled
			}
		}
		delete(o.waiting, id)
	}
}

// SendAndAwait sends USER's message like Send, and returns a channel that
// receives the outcome of the turn that takes it (or fails it). cancel
// stops waiting.
func (c *Core) SendAndAwait(p api.SendParams) (m *fsstore.Message, outcome <-chan Outcome, cancel func(), err error) {
	c.mu.Lock()
	n, err := c.resolveLocked(p.To)
	c.mu.Unlock()
	if err != nil {
		return nil, nil, nil, err
	}
	return c.sendAndAwait(n, p.Text)
}

// Sending is a message of USER's that SendWatched sent, and the turn
// that takes it.
type Sending struct {
	Message *fsstore.Message
	// Agent is the id of the agent the ref named.
	Agent string
	// Sub has the agent's events from before the message was delivered.
	Sub *Subscription
	// Outcome receives the outcome of the turn that takes the message.
	Outcome <-chan Outcome
	cancel  func()
}

// Close stops waiting for the outcome and ends the subscription.
func (s *Sending) Close() {
	s.cancel()
	s.Sub.Close()
}

// SendWatched is SendAndAwait for a client that follows the turn
// (agent.send with wait): it resolves p.To once, subscribes to that
// agent's events, then sends. Close the Sending when done.
func (c *Core) SendWatched(p api.SendParams) (*Sending, error) {
	c.mu.Lock()
	n, err := c.resolveLocked(p.To)
	id := ""
	if err == nil {
		id = n.id()
	}
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	sub := c.Subscribe(id)
	m, outcome, cancel, err := c.sendAndAwait(n, p.Text)
	if err != nil {
		sub.Close()
		return nil, err
	}
	return &Sending{Message: m, Agent: id, Sub: sub, Outcome: outcome, cancel: cancel}, nil
}

func (c *Core) sendAndAwait(n *node, text string) (m *fsstore.Message, outcome <-chan Outcome, cancel func(), err error) {
	m = &fsstore.Message{ID: c.store.NewID(), From: fsstore.User, FromName: fsstore.User, Kind: fsstore.KindMessage, Text: text}
	ch, cancel := c.outcomes.await(m.ID)
	if _, err := c.send(m, n); err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return m, ch, cancel, nil
}

func messageIDs(msgs []*fsstore.Message) []string {
	ids := make([]string, 0, len(msgs))
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	return ids
}
