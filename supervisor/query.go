package supervisor

import (
	"slices"
	"strings"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
)

// Status returns the tree's figures of daemon.status: agents, live
// sessions, busy agents, watchers and each pool's use. The daemon adds
// what it knows of itself (pid, home, version, start).
func (c *Core) Status() api.StatusResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := api.StatusResult{Agents: len(c.nodes), Watchers: len(c.subs)}
	now := c.clock.Now()
	for k, until := range c.parked {
		if now.Before(until) {
			if st.Parked == nil {
				st.Parked = map[string]time.Time{}
			}
			st.Parked[k] = until
		}
	}
	pools := map[string]*api.PoolStatus{}
	for name := range c.settings().Pools {
		pools[name] = &api.PoolStatus{Name: name, Size: c.poolLimit(name)}
	}
	for _, n := range c.nodes {
		name := poolOf(n.s())
		p := pools[name]
		if p == nil {
			p = &api.PoolStatus{Name: name, Size: c.poolLimit(name)}
			pools[name] = p
		}
		if n.live != nil {
			st.LiveSessions++
			p.Live++
		}
		if n.s().AgentState == fsstore.AgentBusy {
			st.Busy++
			p.Busy++
		}
	}
	for _, p := range pools {
		st.Pools = append(st.Pools, *p)
	}
	slices.SortFunc(st.Pools, func(a, b api.PoolStatus) int { return strings.Compare(a.Name, b.Name) })
	return st
}

// Inspect returns an agent as agent.inspect shows it: its info, its whole
// session and how many messages wait in its inbox.
func (c *Core) Inspect(ref string) (api.InspectResult, error) {
	c.mu.Lock()
	n, err := c.resolveLocked(ref)
	if err != nil {
		c.mu.Unlock()
		return api.InspectResult{}, err
	}
	res := api.InspectResult{Agent: c.infoLocked(n), Session: n.s().Clone()}
	c.mu.Unlock()
	if msgs, _, err := n.agent.Pending(); err == nil {
		res.Pending = len(msgs)
	}
	return res, nil
}

// Sessions lists every agent's provider session, in tree order.
func (c *Core) Sessions() []api.SessionInfo {
	out := []api.SessionInfo{}
	for _, a := range c.List() {
		c.mu.Lock()
		if n := c.nodes[a.ID]; n != nil {
			out = append(out, api.SessionInfo{ID: a.ID, Path: a.Path, Provider: n.s().Provider, SessionState: n.s().SessionState,
				ProviderSessionID: n.s().ProviderSessionID, HasStateBlob: len(n.s().StateBlob) > 0, Live: n.live != nil})
		}
		c.mu.Unlock()
	}
	return out
}

// Events calls fn with the agent's events that p asks for (all, or
// those after a seq, since a time, of some types; with p.Tail > 0 the
// last p.Tail of those), and returns how many the log holds and its last
// seq.
func (c *Core) Events(p api.EventsParams, fn func(fsstore.Event) error) (api.EventsResult, error) {
	c.mu.Lock()
	n, err := c.resolveLocked(p.Ref)
	c.mu.Unlock()
	if err != nil {
		return api.EventsResult{}, err
	}
	var res api.EventsResult
	tail := api.NewTail(p.Tail)
	err = fsstore.ReadEvents(c.store.FS(), n.agent.Files().Events(), func(e fsstore.Event) error {
		res.Events++
		res.LastSeq = e.Seq
		switch {
		case !p.Match(e):
			return nil
		case p.Tail > 0:
			tail.Add(e)
			return nil
		}
		return fn(e)
	})
	if err != nil {
		return res, storeErr(err)
	}
	for _, e := range tail.Events() {
		if err := fn(e); err != nil {
			return res, err
		}
	}
	return res, nil
}
