package supervisor

import (
	"github.com/substrat/substrat/supervisor/api"
)

// Subscription receives WatchEvents for one agent (or all when agent is
// empty). A subscriber that falls behind loses events and is told so by
// Lagged.
type Subscription struct {
	C       chan api.WatchEvent
	agent   string
	lagged  bool
	dropped int
	core    *Core
}

// Subscribe starts a subscription; Close it when done.
func (c *Core) Subscribe(agent string) *Subscription {
	s := &Subscription{C: make(chan api.WatchEvent, 256), agent: agent, core: c}
	c.mu.Lock()
	c.subs[s] = struct{}{}
	c.mu.Unlock()
	return s
}

// Close ends the subscription.
func (s *Subscription) Close() {
	s.core.mu.Lock()
	delete(s.core.subs, s)
	s.core.mu.Unlock()
}

// Dropped returns how many events were dropped because C was full.
func (s *Subscription) Dropped() int {
	s.core.mu.Lock()
	defer s.core.mu.Unlock()
	return s.dropped
}

// Lagged reports whether events were dropped because C was full.
func (s *Subscription) Lagged() bool {
	s.core.mu.Lock()
	defer s.core.mu.Unlock()
	return s.lagged
}

func (c *Core) publishLocked(e api.WatchEvent) {
	for s := range c.subs {
		if s.agent != e.Agent && (s.agent != "" || e.Agent == api.NotifyTopic) {
			continue // another agent's; or a notification, for its topic's subscribers only
		}
		select {
		case s.C <- e:
		default:
			s.lagged = true
			s.dropped++
		}
	}
}
