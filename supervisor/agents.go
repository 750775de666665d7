package supervisor

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
)

// CreateAgent creates a root (or, with Parent, a child) agent durably.
func (c *Core) CreateAgent(p api.CreateParams) (api.AgentInfo, error) {
	n, _, err := c.createAgent(p, nil)
	if err != nil {
		return api.AgentInfo{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.infoLocked(n), nil
}

// createAgent creates an agent. With a spawn key it is idempotent: a child
// of parent already made with that key is returned (existed = true).
func (c *Core) createAgent(p api.CreateParams, parent *node) (n *node, existed bool, err error) {
	if err := fsstore.CheckNewName(p.Name); err != nil {
		return nil, false, api.Errorf(api.CodeInvalidParams, "%s", fsstore.Reason(err))
	}
	if set := c.settings(); p.Provider == "" {
		p.Provider = set.DefaultProvider
		if p.Model == "" {
			p.Model = set.DefaultModel
		}
	}
	if _, err := c.providers.Get(p.Provider); err != nil {
		return nil, false, api.Errorf(api.CodeInvalidParams, "%v", err)
	}
	holder, twin, err := c.reserveName(&p, &parent)
	if err != nil || twin != nil {
		return twin, twin != nil, err
	}
	defer func() {
		c.mu.Lock()
		delete(holder.reserved, p.Name)
		c.mu.Unlock()
	}()
	parentID := ""
	if parent != nil {
		parentID = parent.id()
	}

	if p.Workspace != "" && parent == nil {
		// A user's choice: any existing workspace.
		w, err := c.getWorkspace(p.Workspace)
		if err != nil {
			return nil, false, err
		}
		p.Workspace = w.Ref()
	}
	if p.Budget != nil && (p.Budget.Tokens < 0 || p.Budget.CostUSD < 0) {
		return nil, false, invalidParams("a budget cannot be negative")
	}
	if p.Budget != nil && *p.Budget == (fsstore.Budget{}) {
		p.Budget = nil
	}
	id := c.store.NewID()
	var parentSess *fsstore.Session
	if parent != nil {
		c.mu.Lock()
		parentSess = parent.s()
		c.mu.Unlock()
	}
	if err := c.placeCreate(&p, parentSess, id); err != nil {
		return nil, false, err
	}
	a, err := c.store.CreateAgent(&fsstore.Session{
		ID: id, Name: p.Name, ParentID: parentID, Provider: p.Provider, Model: p.Model,
		Instructions: p.Instructions, Workspace: p.Workspace, WorkDir: p.WorkDir, Permissions: p.Permissions,
		Limits: p.Limits, Executor: p.Executor, SpawnKey: p.SpawnKey, Metadata: p.Metadata, Pool: p.Pool, Budget: p.Budget,
	})
	if err != nil {
		return nil, false, storeErr(err)
	}
	c.mu.Lock()
	n = c.insertLocked(a)
	c.publishLocked(api.WatchEvent{Agent: n.id(), Name: n.s().Name, Type: fsstore.EvCreated, Seq: 1, Time: n.s().CreatedAt})
	c.mu.Unlock()
	c.log.Info("agent created", "agent", n.id(), "name", p.Name, "parent", parentID)
	return n, false, nil
}

// firstOf returns the node of ns with the smallest id whose session
// matches, or nil.
func firstOf(ns []*node, match func(*fsstore.Session) bool) *node {
	var first *node
	for _, n := range ns {
		if match(n.s()) && (first == nil || n.id() < first.id()) {
			first = n
		}
	}
	return first
}

// reserveName finds where a new agent of p goes (*parent, resolved from
// p.Parent if nil) and reserves p.Name among its siblings, in the node
// holding the reservations (the parent, or c.roots for a root), which it
// returns: the caller deletes the reservation when done. If a sibling
// already has p's spawn key, it returns that sibling instead (a spawn run
// again) and reserves nothing.
func (c *Core) reserveName(p *api.CreateParams, parent **node) (holder, twin *node, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return nil, nil, api.Errorf(api.CodeUnavailable, "the daemon is shutting down")
	}
	if *parent == nil && p.Parent != "" {
		if *parent, err = c.resolveLocked(p.Parent); err != nil {
			return nil, nil, err
		}
	}
	var siblings []*node
	holder = c.roots // roots reserve their names here
	if *parent == nil {
		// Every root, in no order (a create must not sort the tree):
		// the checks below pick the smallest id where several match.
		for _, n := range c.nodes {
			if pid := n.s().ParentID; pid == "" || c.nodes[pid] == nil {
				siblings = append(siblings, n)
			}
		}
	}
	if pa := *parent; pa != nil {
		switch {
		case pa.terminated():
			return nil, nil, api.Errorf(api.CodeConflict, "parent %s has terminated", pa.s().Name)
		case pa.frozen > 0:
			return nil, nil, api.Errorf(api.CodeConflict, "parent %s is being terminated or archived", pa.s().Name)
		}
		siblings, holder = nil, pa
		for _, id := range pa.children {
			if ch := c.nodes[id]; ch != nil {
				siblings = append(siblings, ch)
			}
		}
	}
	if p.SpawnKey != "" {
		if twin := firstOf(siblings, func(s *fsstore.Session) bool { return s.SpawnKey == p.SpawnKey }); twin != nil {
			return nil, twin, nil
		}
	}
	if s := firstOf(siblings, func(s *fsstore.Session) bool { return s.Name == p.Name }); s != nil {
		return nil, nil, api.Errorf(api.CodeConflict, "an agent named %q already exists there (%s)", p.Name, s.id())
	}
	if holder.reserved[p.Name] {
		return nil, nil, api.Errorf(api.CodeConflict, "an agent named %q is being created there", p.Name)
	}
	if holder.reserved == nil {
		holder.reserved = map[string]bool{}
	}
	holder.reserved[p.Name] = true
	return holder, nil, nil
}

// List returns every agent, parents before children, siblings in creation
// order.
func (c *Core) List() []api.AgentInfo {
	p, _ := c.Query(api.ListParams{}) // query.go
	return p.Agents
}

// Resolve returns the id of the agent ref names.
func (c *Core) Resolve(ref string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.resolveLocked(ref)
	if err != nil {
		return "", err
	}
	return n.id(), nil
}

// Send delivers a message from USER to an agent and returns once it is
// durable in the agent's inbox.
func (c *Core) Send(p api.SendParams) (*fsstore.Message, error) {
	c.mu.Lock()
	n, err := c.resolveLocked(p.To)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return c.send(&fsstore.Message{From: fsstore.User, FromName: fsstore.User, Kind: fsstore.KindMessage, Text: p.Text}, n)
}

// send puts m in n's inbox (fsstore.Publish) and marks n runnable. (A
// message is delivered later, when a turn takes it: deliverTurn.)
func (c *Core) send(m *fsstore.Message, to *node) (*fsstore.Message, error) {
	if strings.TrimSpace(m.Text) == "" {
		return nil, api.Errorf(api.CodeInvalidParams, "message text is empty")
	}
	c.mu.Lock()
	if to.terminated() {
		c.mu.Unlock()
		return nil, api.Errorf(api.CodeConflict, "agent %s has terminated and takes no messages", to.s().Name)
	}
	c.mu.Unlock()
	m.To = to.id()
	if m.Kind == "" {
		m.Kind = fsstore.KindMessage
	}
	if err := c.store.Send(m); err != nil {
		return nil, storeErr(err)
	}
	c.mu.Lock()
	to.mail = true
	to.pending++
	c.publishLocked(api.WatchEvent{Agent: to.id(), Name: to.s().Name, Type: api.WatchMessage, Time: m.SentAt,
		Data: map[string]string{"id": m.ID, "from": m.FromName, "text": m.Text}})
	answered := m.ReplyTo != "" && slices.Contains(to.s().WaitingFor, m.ReplyTo)
	rest := slices.DeleteFunc(slices.Clone(to.s().WaitingFor), func(id string) bool { return id == m.ReplyTo })
	c.mu.Unlock()
	if answered {
		// The reply is durable in the inbox; the waiting list is history
		// that a crash may leave one reply behind, never ahead.
		if err := c.commit(to, fsstore.Waiting{IDs: rest}); err != nil {
			c.log.Warn("waiting list not updated", "agent", to.id(), "err", err)
		}
	}
	c.signal()
	return m, nil
}

// hasMessage reports whether message id is in the inbox of to (nil:
// USER), waiting or delivered.
func (c *Core) hasMessage(to *node, id string) bool {
	if to == nil {
		return c.store.HasMessage(fsstore.User, id)
	}
	return c.store.HasMessage(to.id(), id)
}

// sendUser publishes m in the USER inbox.
func (c *Core) sendUser(m *fsstore.Message) error { return c.sendUserAs(m, "", nil) }

// sendUserAs is sendUser with the notification's kind ("": by the
// message's kind) and the agent it is about (nil: the sender).
func (c *Core) sendUserAs(m *fsstore.Message, kind string, about *node) error {
	m.To = fsstore.User
	if err := c.store.Send(m); err != nil {
		return storeErr(err)
	}
	c.mu.Lock()
	c.publishLocked(api.WatchEvent{Agent: fsstore.User, Name: fsstore.User, Type: api.WatchMessage, Time: m.SentAt,
		Data: map[string]string{"id": m.ID, "from": m.FromName, "text": m.Text}})
	c.mu.Unlock()
	c.notify(c.messageNote(m, kind, about))
	return nil
}

// Terminate ends an agent (and with Recursive its subtree, leaves first).
// A running turn is cancelled.
func (c *Core) Terminate(ctx context.Context, p api.TerminateParams) ([]api.AgentInfo, error) {
	if p.Recursive {
		c.mu.Lock()
		n, err := c.resolveLocked(p.Ref)
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
		thaw, err := c.freeze(ctx, n)
		if err != nil {
			return nil, err
		}
		defer thaw()
	}
	c.mu.Lock()
	n, err := c.resolveLocked(p.Ref)
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	var order []*node
	if p.Recursive {
		for _, x := range c.subtreeLocked(n) {
			if !x.terminated() {
				order = append(order, x)
			}
		}
	} else {
		for _, id := range n.children {
			if ch := c.nodes[id]; ch != nil && !ch.terminated() {
				c.mu.Unlock()
				e := api.Errorf(api.CodeConflict, "%s has live children (%s, ...)", n.s().Name, ch.s().Name)
				e.Hint = "use --recursive to terminate the whole subtree"
				return nil, e
			}
		}
		if !n.terminated() {
			order = []*node{n}
		}
	}
	c.mu.Unlock()
	var out []api.AgentInfo
	for _, x := range order {
		if err := c.terminate(ctx, x, "terminated by the user"); err != nil {
			return out, err
		}
		c.mu.Lock()
		out = append(out, c.infoLocked(x))
		c.mu.Unlock()
	}
	return out, nil
}

// freeze stops children from being created anywhere in n's subtree, and
// waits for the creations already under way there to finish, so that the
// subtree taken after it is the whole of it (spawns used to race a
// terminate -r or an archive, leaving live children under an archived
// parent). thaw ends it.
func (c *Core) freeze(ctx context.Context, n *node) (thaw func(), err error) {
	c.mu.Lock()
	var frozen []*node
	mark := func() {
		for _, x := range c.subtreeLocked(n) {
			if !slices.Contains(frozen, x) {
				x.frozen++
				frozen = append(frozen, x)
			}
		}
	}
	mark()
	c.mu.Unlock()
	thaw = func() {
		c.mu.Lock()
		for _, x := range frozen {
			x.frozen--
		}
		c.mu.Unlock()
	}
	for {
		c.mu.Lock()
		busy := false
		for _, x := range c.subtreeLocked(n) {
			busy = busy || len(x.reserved) > 0
		}
		if !busy {
			mark() // children that were being created have joined it
			c.mu.Unlock()
			return thaw, nil
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			thaw()
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (c *Core) terminate(ctx context.Context, n *node, reason string) error {
	if err := c.preempt(ctx, n); err != nil {
		return err
	}
	defer c.release(n)
	return c.terminateHeld(n, reason)
}

// terminateHeld ends n, which the caller holds (busy).
func (c *Core) terminateHeld(n *node, reason string) error {
	c.mu.Lock()
	live := n.live
	n.live = nil
	done := n.terminated()
	c.mu.Unlock()
	if live != nil {
		live.Stop()
	}
	c.host.CloseToolSocket(n.id())
	if done {
		return nil
	}
	if err := c.commit(n, fsstore.StateChange{AgentState: fsstore.AgentTerminated,
		SessionState: fsstore.SessionTerminated, Reason: reason}); err != nil {
		return err
	}
	c.snapshot(n)
	c.settlePending(n, "the agent terminated before taking it ("+reason+")")
	return nil
}

// settlePending tells the clients waiting on n's undelivered messages that
// no turn will take them.
func (c *Core) settlePending(n *node, why string) {
	if msgs, _, err := n.agent.Pending(); err == nil && len(msgs) > 0 {
		c.outcomes.settle(messageIDs(msgs), Outcome{Failed: why})
	}
}
