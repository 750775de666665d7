package supervisor

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
)

// Reconcile brings agent id in memory in line with its directory: a
// directory that left agents/ detaches the agent, one that arrived is
// adopted, and a changed session.json is adopted or refused.
func (c *Core) Reconcile(ctx context.Context, id string, watch func(string) error, forget func(string)) {
	dir := c.store.Layout().AgentDir(id)
	// Lstat: an agent directory moved back as a symlink (to another disk)
	// is not adopted; the scan at the next start refuses it the same way
	// (agent directories must be real directories in agents/).
	fi, err := os.Lstat(dir)
	onDisk := err == nil && fi.IsDir()
	if err == nil && fi.Mode()&os.ModeSymlink != 0 {
		c.log.Warn("not adopted: an agent directory that is a symlink; move the directory itself back", "path", dir)
	}
	c.mu.Lock()
	n := c.nodes[id]
	down := c.down
	c.mu.Unlock()
	if onDisk {
		// A new directory gets its watch, then a look (the look below).
		watch(dir)
	} else {
		forget(dir)
	}
	switch {
	case down:
	case n != nil && !onDisk:
		c.detach(ctx, n)
	case n == nil && onDisk:
		c.adopt(id)
	case n != nil && n.agent.Log().Replaced():
		c.reloadAgent(ctx, n, "its events.jsonl was replaced by hand")
	case n != nil:
		c.checkHandEdit(n)
		c.checkInbox(n)
	}
}

// reloadAgent reads agent n again from its directory, once its running
// turn (if any) is over: its log was replaced, so what is in memory is not
// what is on disk. One that cannot be read is taken out of the live tree,
// as at a start.
func (c *Core) reloadAgent(ctx context.Context, n *node, why string) {
	if err := c.acquire(ctx, n); err != nil {
		return
	}
	a, findings := c.store.Load(n.id(), false)
	if a == nil {
		c.release(n)
		c.log.Error("agent directory changed by hand and no longer loads; taking it out of the live tree", "agent", n.id(), "why", why, "findings", findings)
		c.detach(ctx, n)
		return
	}
	c.mu.Lock()
	old := n.agent
	n.agent = a
	n.state.Store(a.Session())
	n.pending = a.PendingAtLoad()
	n.spawnKeys = nil
	c.publishLocked(api.WatchEvent{Agent: n.id(), Name: a.Session().Name, Type: api.WatchReloaded, Time: c.clock.Now().UTC(),
		Data: map[string]string{"reason": why}})
	c.mu.Unlock()
	old.Close()
	c.release(n)
	c.log.Warn("agent reloaded from disk", "agent", n.id(), "why", why)
}

// detach takes an agent whose directory was moved away out of the live
// tree and stops its provider session. Its children stay live; with their
// parent gone they cannot reach it, and they are linked to it again if the
// directory comes back.
func (c *Core) detach(ctx context.Context, n *node) {
	if err := c.preempt(ctx, n); err != nil {
		return
	}
	// Archived (or restored) meanwhile: the archive took it out itself.
	c.mu.Lock()
	gone := c.nodes[n.id()] != n
	c.mu.Unlock()
	if gone {
		c.release(n)
		return
	}
	// Stop the provider first: once the agent is out of the tree, nothing
	// of it runs.
	c.mu.Lock()
	live := n.live
	n.live = nil
	c.mu.Unlock()
	if live != nil {
		live.Stop()
	}
	c.host.CloseToolSocket(n.id())
	c.mu.Lock()
	delete(c.nodes, n.id())
	if p := c.nodes[n.s().ParentID]; p != nil {
		p.children = removeString(p.children, n.id())
	}
	c.indexSubsLocked(stubNode(n.id()))
	c.publishLocked(api.WatchEvent{Agent: n.id(), Name: n.s().Name, Type: api.WatchDetached, Time: c.clock.Now().UTC(),
		Data: map[string]string{"reason": "its directory left agents/"}})
	c.mu.Unlock()
	n.agent.Close()
	c.release(n)
	c.log.Warn("agent directory moved away; agent detached and its provider stopped", "agent", n.id(), "name", n.s().Name)
}

// adopt loads a directory that appeared in agents/ (moved back, copied or
// rsynced in). One that cannot be loaded yet (a copy still in progress) is
// logged and looked at again on its next change.
func (c *Core) adopt(id string) {
	c.mu.Lock()
	if wait := c.adopting[id]; wait != nil {
		c.mu.Unlock()
		<-wait // the other adoption decides
		return
	}
	if c.nodes[id] != nil {
		c.mu.Unlock()
		return
	}
	if c.adopting == nil {
		c.adopting = map[string]chan struct{}{}
	}
	done := make(chan struct{})
	c.adopting[id] = done
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.adopting, id)
		c.mu.Unlock()
		close(done)
	}()
	a, findings := c.store.Load(id, true)
	if a == nil {
		for _, f := range findings {
			if f.Kind == fsstore.FindKeptOut {
				c.log.Warn("agent directory not adopted (yet)", "path", f.Path, "reason", f.Detail)
			}
		}
		return
	}
	// A sibling with the same name (a directory copied in from another
	// home) would make a path resolve to either: it waits, as at a start.
	c.mu.Lock()
	var sibs []*node
	if p := c.nodes[a.Session().ParentID]; p != nil {
		for _, id := range p.children {
			sibs = append(sibs, c.nodes[id])
		}
	} else if a.Session().ParentID == "" {
		sibs = c.rootsLocked()
	}
	var twin *node
	for _, s := range sibs {
		if s != nil && s.id() != id && s.s().Name == a.Session().Name {
			twin = s
		}
	}
	c.mu.Unlock()
	if twin != nil {
		a.Close()
		c.log.Warn("agent directory not adopted: a sibling has its name; rename it in its session.json",
			"path", c.store.Layout().AgentDir(id), "name", twin.s().Name, "sibling", twin.id())
		return
	}
	// Put right what no longer holds, before anyone sees the agent: no
	// provider process or turn of ours runs for it.
	n := newNode(a)
	if n.s().SessionState == fsstore.SessionActive {
		c.commit(n, fsstore.StateChange{SessionState: fsstore.SessionSuspended, Reason: "adopted: no live session"})
	}
	if n.s().AgentState == fsstore.AgentBusy {
		c.commit(n, fsstore.StateChange{AgentState: fsstore.AgentIdle, Reason: "adopted: no turn running"})
	}
	c.snapshot(n)
	c.mu.Lock()
	if c.nodes[id] != nil {
		c.mu.Unlock()
		a.Close()
		return
	}
	c.insertNodeLocked(n)
	// Children that lost this parent get it back.
	for _, x := range c.nodes {
		if x.s().ParentID == id && !slices.Contains(n.children, x.id()) {
			n.children = append(n.children, x.id())
		}
	}
	slices.Sort(n.children)
	c.publishLocked(api.WatchEvent{Agent: id, Name: n.s().Name, Type: api.WatchAdopted, Time: c.clock.Now().UTC()})
	c.mu.Unlock()
	c.checkInbox(n)
	c.log.Info("agent directory adopted", "agent", id, "name", n.s().Name)
}

// checkInbox marks n runnable if its inbox/new holds messages (copied or
// dropped in by hand).
func (c *Core) checkInbox(n *node) {
	msgs, _, err := n.agent.Pending()
	if err != nil || len(msgs) == 0 {
		return
	}
	c.mu.Lock()
	n.pending = max(n.pending, len(msgs))
	wake := !n.mail && !n.terminated()
	n.mail = n.mail || wake
	c.mu.Unlock()
	if wake {
		c.signal()
	}
}

// checkHandEdit adopts a hand edit of n's session.json, or refuses it,
// keeping the last good state and leaving the user's file alone.
func (c *Core) checkHandEdit(n *node) {
	disk, changed, sum, err := n.agent.DiskSession()
	if !changed {
		c.setDiskInvalid(n, "")
		return
	}
	if err == nil {
		err = c.adoptEdit(n, disk, sum)
	}
	if err != nil {
		reason := strings.TrimPrefix(err.Error(), "fsstore: ")
		if c.setDiskInvalid(n, reason) {
			c.log.Warn("hand edit of session.json refused; keeping the last good state and not touching the file",
				"agent", n.id(), "path", n.agent.Files().Session(), "reason", reason)
			c.commit(n, fsstore.EditRefused{Reason: reason})
		}
		return
	}
	c.setDiskInvalid(n, "")
}

// setDiskInvalid records why session.json on disk is not usable ("" when
// it is), and reports whether that is news.
func (c *Core) setDiskInvalid(n *node, reason string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	news := n.diskInvalid != reason
	n.diskInvalid = reason
	return news
}

// adoptEdit applies the editable fields of a valid hand-edited session and
// records them in an edited event. Fields the daemon owns (state,
// counters, provider state...) are naturally stale in a copy the user
// edited, and are left as the daemon has them; identity fields may not
// change.
func (c *Core) adoptEdit(n *node, disk *fsstore.Session, sum [sha256.Size]byte) error {
	c.mu.Lock()
	cur := n.s().Clone()
	c.mu.Unlock()
	switch {
	case disk.ParentID != cur.ParentID:
		return fmt.Errorf("parent_id cannot be changed by hand (it is %q)", cur.ParentID)
	case disk.Provider != cur.Provider:
		return fmt.Errorf("provider cannot be changed by hand (it is %q)", cur.Provider)
	case disk.Workspace != cur.Workspace:
		return fmt.Errorf("workspace cannot be changed by hand (it is %q)", cur.Workspace)
	case disk.Executor != cur.Executor:
		return fmt.Errorf("executor cannot be changed by hand (it is %q)", cur.Executor)
	case disk.WorkDir != cur.WorkDir:
		// The CLI's sessions belong to their working directory.
		return fmt.Errorf("work_dir cannot be changed by hand (it is %q); create an agent in the other directory", cur.WorkDir)
	}
	var e fsstore.Edit
	var changed []string
	if disk.Name != cur.Name {
		if err := fsstore.CheckNewName(disk.Name); err != nil {
			return fmt.Errorf("name: %s", fsstore.Reason(err))
		}
		c.mu.Lock()
		var sibs []*node
		if p := c.nodes[cur.ParentID]; p != nil {
			for _, id := range p.children {
				sibs = append(sibs, c.nodes[id])
			}
		} else {
			sibs = c.rootsLocked()
		}
		taken := false
		for _, s := range sibs {
			taken = taken || (s != nil && s != n && s.s().Name == disk.Name)
		}
		c.mu.Unlock()
		if taken {
			return fmt.Errorf("name %q is already used by a sibling", disk.Name)
		}
		e.Name, changed = &disk.Name, append(changed, "name")
	}
	if disk.Instructions != cur.Instructions {
		e.Instructions, changed = &disk.Instructions, append(changed, "instructions")
	}
	if disk.Model != cur.Model {
		e.Model, changed = &disk.Model, append(changed, "model")
	}
	if !disk.Permissions.Equal(cur.Permissions) {
		if disk.Permissions == nil {
			return fmt.Errorf("permissions cannot be removed by hand (it is %s); set another mode", effectivePermissions(cur).Mode)
		}
		e.Permissions, changed = disk.Permissions.Clone(), append(changed, "permissions")
	}
	if !maps.Equal(disk.Metadata, cur.Metadata) {
		md := maps.Clone(disk.Metadata)
		if md == nil {
			md = map[string]string{}
		}
		e.Metadata, changed = &md, append(changed, "metadata")
	}
	if len(changed) > 0 {
		if err := c.commit(n, e); err != nil {
			return err
		}
		c.log.Info("hand edit of session.json adopted", "agent", n.id(), "fields", strings.Join(changed, ","))
	}
	n.agent.AcceptDisk(sum)
	c.snapshot(n) // the merged state: the user's fields and the daemon's
	return nil
}
