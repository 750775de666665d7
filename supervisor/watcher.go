package supervisor

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/fsnotify/fsnotify"

	"github.com/substrat/substrat/fsstore"
)

// The supervisor watches agents/ and each agent directory. fsnotify
// events are hints: they only say which agent to look at again; what is on
// disk is the truth. A watch overflow means events were lost, so every
// agent is looked at again; a watch-limit error switches to polling.

// watchDebounce is how long the watcher lets a burst of events settle
// (an editor's save, an rsync) before it looks.
const watchDebounce = 15 * time.Millisecond

// pollEvery is the rescan period when watches are not to be had.
var pollEvery = 2 * time.Second

// addWatch adds a watch; a seam so tests can simulate the watch limit.
var addWatch = func(w *fsnotify.Watcher, path string) error { return w.Add(path) }

// Watcher reconciles the in-memory tree with the directories.
type Watcher struct {
	c   *Core
	fsw *fsnotify.Watcher

	mu      sync.Mutex // guards the fields below
	polling bool
	dirty   map[string]bool // agent ids to look at
	watched map[string]bool // directories with a watch
	all     bool            // look at everything
	kick    chan struct{}
	pause   chan struct{} // tests: closed to let the loop run (nil: running)
	parked  chan struct{} // tests: closed when the loop waits on pause

	overflows int // watch overflows seen, for tests and status
}

// NewWatcher sets up the watches on agents/ and on every agent directory
// there. Call it before Recover, so that nothing changed during the scan
// is missed, then run Run.
func (c *Core) NewWatcher() (*Watcher, error) {
	w := &Watcher{c: c, dirty: map[string]bool{}, watched: map[string]bool{}, kick: make(chan struct{}, 1)}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		c.log.Warn("fsnotify unavailable; polling the agents directory", "err", err, "every", pollEvery)
		w.polling = true
		return w, nil
	}
	w.fsw = fsw
	dir := c.store.Layout().AgentsDir()
	if err := w.add(dir); err != nil {
		return w, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.IsDir() && fsstore.IsID(e.Name()) {
			if w.add(filepath.Join(dir, e.Name())) != nil {
				break
			}
		}
	}
	return w, nil
}

// add watches path (once); on the watch limit it falls back to polling.
func (w *Watcher) add(path string) error {
	w.mu.Lock()
	polling, known := w.polling, w.watched[path]
	w.mu.Unlock()
	if polling || known {
		return nil
	}
	err := addWatch(w.fsw, path)
	if err == nil {
		w.mu.Lock()
		w.watched[path] = true
		w.mu.Unlock()
		return nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	w.c.log.Warn("cannot add a file watch; falling back to polling every "+pollEvery.String()+
		" (raise the limit: sysctl fs.inotify.max_user_watches=524288)", "path", path, "err", err)
	w.mu.Lock()
	w.polling = true
	w.mu.Unlock()
	return err
}

// forget drops the cached watch of a directory that went away (the kernel
// removed the watch with it).
func (w *Watcher) forget(path string) {
	w.mu.Lock()
	delete(w.watched, path)
	w.mu.Unlock()
}

// Polling reports whether the watcher has fallen back to polling.
func (w *Watcher) Polling() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.polling
}

// mark notes that agent id (or, with id "", everything) needs a look.
func (w *Watcher) mark(id string) {
	w.mu.Lock()
	if id == "" {
		w.all = true
	} else {
		w.dirty[id] = true
	}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// agentOf maps an event path to the agent id it concerns, or "".
func (w *Watcher) agentOf(path string) string {
	rel, err := filepath.Rel(w.c.store.Layout().AgentsDir(), path)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return ""
	}
	id, _, _ := strings.Cut(rel, string(filepath.Separator))
	if !fsstore.IsID(id) {
		return ""
	}
	return id
}

// Run handles events until ctx is done, then closes the watches.
func (w *Watcher) Run(ctx context.Context) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w.fsw != nil {
		defer w.fsw.Close()
		events, errs = w.fsw.Events, w.fsw.Errors
	}
	poll := time.NewTicker(pollEvery)
	defer poll.Stop()
	var debounce *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if id := w.agentOf(e.Name); id != "" {
				w.mark(id)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				w.mu.Lock()
				w.overflows++
				w.mu.Unlock()
				w.c.log.Warn("file watch overflow: events were lost; rescanning every agent (raise fs.inotify.max_queued_events if it recurs)")
			} else {
				w.c.log.Warn("file watch error; rescanning every agent", "err", err)
			}
			w.mark("")
		case <-poll.C:
			if w.Polling() {
				w.mark("")
			}
		case <-w.kick:
			if debounce == nil {
				debounce = time.NewTimer(watchDebounce)
			} else {
				debounce.Reset(watchDebounce)
			}
			fire = debounce.C
		case <-fire:
			fire = nil
			w.waitPause(ctx)
			w.flush(ctx)
		}
	}
}

// waitPause blocks while a test holds the loop.
func (w *Watcher) waitPause(ctx context.Context) {
	w.mu.Lock()
	p, parked := w.pause, w.parked
	w.mu.Unlock()
	if parked != nil {
		close(parked)
	}
	if p != nil {
		select {
		case <-p:
		case <-ctx.Done():
		}
	}
}

// flush looks at everything marked.
func (w *Watcher) flush(ctx context.Context) {
	w.mu.Lock()
	all, ids := w.all, slices.Sorted(maps.Keys(w.dirty))
	w.all, w.dirty = false, map[string]bool{}
	w.mu.Unlock()
	if all {
		ids = w.allIDs()
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		w.c.reconcile(ctx, id, w.add, w.forget)
	}
}

// allIDs lists the agents on disk and in memory.
func (w *Watcher) allIDs() []string {
	set := map[string]bool{}
	if entries, err := os.ReadDir(w.c.store.Layout().AgentsDir()); err == nil {
		for _, e := range entries {
			if fsstore.IsID(e.Name()) {
				set[e.Name()] = true
			}
		}
	}
	w.c.mu.Lock()
	for id := range w.c.nodes {
		set[id] = true
	}
	w.c.mu.Unlock()
	return slices.Sorted(maps.Keys(set))
}

// Rescan looks at every agent now, as after an overflow.
func (w *Watcher) Rescan(ctx context.Context) {
	w.mark("")
	w.flush(ctx)
}

// reconcile brings agent id in memory in line with its directory: a
// directory that left agents/ detaches the agent, one that arrived is
// adopted, and a changed session.json is adopted or refused.
func (c *Core) reconcile(ctx context.Context, id string, watch func(string) error, forget func(string)) {
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
	c.publishLocked(api.WatchEvent{Agent: n.id(), Name: a.Session().Name, Type: "reloaded", Time: c.clock.Now().UTC(),
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
	c.mu.Lock()
	if n.cancel != nil {
		n.cancel()
	}
	c.mu.Unlock()
	if err := c.acquire(ctx, n); err != nil {
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
	c.closeToolSocket(n.id())
	c.mu.Lock()
	delete(c.nodes, n.id())
	if p := c.nodes[n.s().ParentID]; p != nil {
		p.children = removeString(p.children, n.id())
	}
	c.indexSubsLocked(stubNode(n.id()))
	c.publishLocked(api.WatchEvent{Agent: n.id(), Name: n.s().Name, Type: "detached", Time: c.clock.Now().UTC(),
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
	a, findings := c.store.Load(id, true)
	if a == nil {
		for _, f := range findings {
			if f.Kind == fsstore.FindKeptOut {
				c.log.Warn("agent directory not adopted (yet)", "path", f.Path, "reason", f.Detail)
			}
		}
		return
	}
	// Put right what no longer holds, before anyone sees the agent: no
	// provider process or turn of ours runs for it.
	n := newNode(a)
	if n.s().SessionState == fsstore.SessionActive {
		c.commit(n, fsstore.EvState, fsstore.StateChange{SessionState: fsstore.SessionSuspended, Reason: "adopted: no live session"})
	}
	if n.s().AgentState == fsstore.AgentBusy {
		c.commit(n, fsstore.EvState, fsstore.StateChange{AgentState: fsstore.AgentIdle, Reason: "adopted: no turn running"})
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
	c.publishLocked(api.WatchEvent{Agent: id, Name: n.s().Name, Type: "adopted", Time: c.clock.Now().UTC()})
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
			c.commit(n, fsstore.EvEditRefused, fsstore.EditRefused{Reason: reason})
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
	case disk.WorkDir != cur.WorkDir:
		// The CLI's sessions belong to their working directory.
		return fmt.Errorf("work_dir cannot be changed by hand (it is %q); create an agent in the other directory", cur.WorkDir)
	}
	var e fsstore.Edit
	var changed []string
	if disk.Name != cur.Name {
		if err := fsstore.CheckNewName(disk.Name); err != nil {
			return fmt.Errorf("name: %s", strings.TrimPrefix(err.Error(), "fsstore: invalid: "))
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
		if err := c.commit(n, fsstore.EvEdited, e); err != nil {
			return err
		}
		c.log.Info("hand edit of session.json adopted", "agent", n.id(), "fields", strings.Join(changed, ","))
	}
	n.agent.AcceptDisk(sum)
	c.snapshot(n) // the merged state: the user's fields and the daemon's
	return nil
}
