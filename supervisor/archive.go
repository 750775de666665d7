package supervisor

import (
	"context"
	"strings"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
)

// Archive terminates an agent's subtree and moves each of its directories
// to archive/<id>, leaves first. The agents leave the live tree; their
// history stays on disk. Moving a directory back into agents/ by hand and
// restarting the daemon brings it back.
func (c *Core) Archive(ctx context.Context, ref string) ([]api.AgentInfo, error) {
	c.mu.Lock()
	root, err := c.resolveLocked(ref)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	// Frozen for the whole archive: nothing is created under it between
	// the terminate and the moves.
	thaw, err := c.freeze(ctx, root)
	if err != nil {
		return nil, err
	}
	defer thaw()
	if _, err := c.Terminate(ctx, api.TerminateParams{Ref: ref, Recursive: true}); err != nil {
		return nil, err
	}
	c.mu.Lock()
	n, err := c.resolveLocked(ref)
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	order := c.subtreeLocked(n)
	out := make([]api.AgentInfo, 0, len(order))
	for _, x := range order {
		out = append(out, c.infoLocked(x))
	}
	c.mu.Unlock()
	for i, x := range order {
		if err := c.acquire(ctx, x); err != nil {
			return out[:i], err
		}
		c.recordSpawn(x)
		c.host.CloseToolSocket(x.id())
		x.agent.Close()
		err := c.store.ArchiveAgent(x.id())
		if err == nil {
			c.mu.Lock()
			c.approvals.archived(x, c.pathLocked(x))
			delete(c.nodes, x.id())
			if p := c.nodes[x.s().ParentID]; p != nil {
				p.children = removeString(p.children, x.id())
			}
			c.publishLocked(api.WatchEvent{Agent: x.id(), Name: x.s().Name, Type: api.WatchArchived, Time: c.clock.Now().UTC()})
			c.mu.Unlock()
		}
		c.release(x)
		if err != nil {
			return out[:i], storeErr(err)
		}
		out[i].Dir = c.store.Layout().ArchivedAgentDir(x.id())
	}
	return out, nil
}

// recordSpawn makes sure the live parent of x, a spawned child about to
// leave the live tree, has the spawned event of x: a crash can fall between
// a child's creation and that event, and without it a spawn call run again
// after the child left would make a twin (found by sim).
func (c *Core) recordSpawn(x *node) {
	c.mu.Lock()
	s, p := x.s(), c.nodes[x.s().ParentID]
	c.mu.Unlock()
	if p == nil || s.SpawnKey == "" || c.spawnedBy(p, s.SpawnKey) != "" {
		return
	}
	if err := c.commit(p, fsstore.Spawned{ChildID: s.ID, Name: s.Name, SpawnKey: s.SpawnKey}); err != nil {
		c.log.Warn("spawned event not recorded", "parent", p.id(), "child", s.ID, "err", err)
	}
}

func removeString(list []string, s string) []string {
	out := list[:0]
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

// Restore undoes an archive: the archived agent ref (an id, or a name
// only one archived agent has) and its archived descendants move back
// from archive/ to agents/, parents first, and rejoin the live tree as
// they were archived (terminated: their history, names and results are
// back; they take no more turns). It works at any time, also while the
// copy an archive leaves in agents/ for backups is there (it is removed:
// the same files).
func (c *Core) Restore(ctx context.Context, ref string) ([]api.AgentInfo, error) {
	all, _, err := c.store.ListArchived()
	if err != nil {
		return nil, storeErr(err)
	}
	var root *fsstore.ArchivedAgent
	var matches []string
	for _, a := range all {
		if a.Session.ID == ref || a.Session.Name == ref {
			root = a
			matches = append(matches, a.Session.ID)
		}
	}
	switch {
	case len(matches) == 0:
		e := api.Errorf(api.CodeNotFound, "no archived agent %q", ref)
		e.Hint = "substrat agent list --archived lists them"
		return nil, e
	case len(matches) > 1:
		e := api.Errorf(api.CodeAmbiguous, "%d archived agents are named %q: %s", len(matches), ref, strings.Join(matches, ", "))
		e.Hint = "use the id"
		return nil, e
	}
	// The archived subtree, parents first (ids sort by creation).
	in := map[string]bool{root.Session.ID: true}
	order := []*fsstore.ArchivedAgent{root}
	for changed := true; changed; {
		changed = false
		for _, a := range all {
			if !in[a.Session.ID] && in[a.Session.ParentID] {
				in[a.Session.ID], changed = true, true
				order = append(order, a)
			}
		}
	}
	c.mu.Lock()
	if c.down {
		c.mu.Unlock()
		return nil, api.Errorf(api.CodeUnavailable, "the daemon is shutting down")
	}
	s := root.Session
	var sibs []*node
	if p := c.nodes[s.ParentID]; p != nil {
		for _, id := range p.children {
			sibs = append(sibs, c.nodes[id])
		}
	} else {
		for _, n := range c.nodes {
			if n.s().ParentID == s.ParentID {
				sibs = append(sibs, n)
			}
		}
	}
	for _, x := range sibs {
		if x != nil && x.s().Name == s.Name {
			c.mu.Unlock()
			e := api.Errorf(api.CodeConflict, "a live agent named %q is already there (%s): restoring %s would give two siblings one name", s.Name, x.id(), s.ID)
			e.Hint = "rename or archive the live one first"
			return nil, e
		}
	}
	c.mu.Unlock()
	out := make([]api.AgentInfo, 0, len(order))
	for _, a := range order {
		id := a.Session.ID
		if err := c.store.RestoreAgent(id); err != nil {
			return out, storeErr(err)
		}
		c.adopt(id)
		c.mu.Lock()
		n := c.nodes[id]
		if n != nil {
			out = append(out, c.infoLocked(n))
		}
		c.mu.Unlock()
		if n == nil {
			e := api.Errorf(api.CodeUnavailable, "agent %s is back in agents/ but was not adopted", id)
			e.Hint = "see 'substrat daemon log' and 'substrat fsck'"
			return out, e
		}
	}
	c.log.Info("archived agents restored", "agent", root.Session.ID, "count", len(out))
	return out, nil
}
