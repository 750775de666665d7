package daemon

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/substrat/substrat/executor/ssh"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor"
)

// sweepTimeout bounds a host's sweep.
const sweepTimeout = 2 * time.Minute

// start sweeps, in the background, the hosts that the agents of core's
// tree run on; any other host is swept at its first use in this
// daemon's life (executor). A sweep removes this home's copies on the
// host (ssh.Options.Home) that nothing of the store has any more: those
// of agents and workspaces removed while no daemon ran, whose removal
// (forget, forgetWorkspace) this daemon never saw. A host's first
// process (ready) waits for its sweep. The tree is listed in the
// background: a host used meanwhile is swept at that use.
func (r *remotes) start(core *supervisor.Core) {
	r.mu.Lock()
	r.core = core
	var hosts []string
	for h := range r.byHost {
		hosts = append(hosts, h)
	}
	r.mu.Unlock()
	go r.sweepHosts(core, hosts)
}

// sweepHosts sweeps hosts and those the agents of core's tree run on.
func (r *remotes) sweepHosts(core *supervisor.Core, hosts []string) {
	for _, a := range core.List() {
		if h := fsstore.ExecutorHost(a.Executor); h != "" && !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	for _, h := range hosts {
		e, err := r.executor(h)
		if err != nil {
			r.log.Warn("ssh sweep: the host cannot be used", "host", h, "err", err)
			continue
		}
		r.mu.Lock()
		r.sweepLocked(e)
		r.mu.Unlock()
	}
}

// sweepLocked starts e's host's sweep, once in the daemon's life, once
// the core is there. r.mu is held.
func (r *remotes) sweepLocked(e *ssh.Executor) {
	if r.core == nil || r.swept[e.Host()] != nil {
		return
	}
	done := make(chan struct{})
	r.swept[e.Host()] = done
	go func() {
		defer close(done)
		r.sweep(e)
	}()
}

// waitSwept waits for host's sweep, if one was started.
func (r *remotes) waitSwept(ctx context.Context, host string) error {
	r.mu.Lock()
	done := r.swept[host]
	r.mu.Unlock()
	return waitClosed(ctx, done)
}

// sweep removes, on e's host, this home's copies that the store has
// nothing of (kept): listed first, then the store read, so that a copy
// made meanwhile is not among them. What the host lists is the agents'
// to write: only a name of the copies' own forms is removed, and a copy
// some process of this daemon uses is left alone.
func (r *remotes) sweep(e *ssh.Executor) {
	ctx, cancel := context.WithTimeout(context.Background(), sweepTimeout)
	defer cancel()
	t0 := time.Now()
	keys, err := e.Copies(ctx)
	if err != nil {
		r.log.Warn("ssh sweep: the host's copies were not listed", "host", e.Host(), "err", err)
		return
	}
	if len(keys) == 0 {
		return
	}
	live, err := r.kept()
	if err != nil {
		r.log.Warn("ssh sweep: the store was not read; nothing removed", "host", e.Host(), "err", err)
		return
	}
	var removed []string
	for _, k := range keys {
		if live[k] || !copyKey(k) || r.busy(e.Host(), k) {
			continue
		}
		if err := e.Remove(ctx, k); err != nil {
			r.log.Warn("ssh sweep: a copy was not removed", "host", e.Host(), "key", k, "err", err)
			continue
		}
		removed = append(removed, k)
	}
	r.log.Info("ssh sweep", "host", e.Host(), "copies", len(keys), "removed", removed, "ms", time.Since(t0).Milliseconds())
}

// kept returns the keys of the copies that the store still has: the
// agents of the tree but the terminated ones (whose own copies forget
// removes), and every workspace, by its root and by its own directory's
// root (a view's spec may fail for a while).
func (r *remotes) kept() (map[string]bool, error) {
	r.mu.Lock()
	core := r.core
	r.mu.Unlock()
	if core == nil {
		return nil, fmt.Errorf("no core")
	}
	keep := map[string]bool{}
	for _, a := range core.List() {
		if a.AgentState != fsstore.AgentTerminated {
			keep[a.ID] = true
		}
	}
	ws, err := core.ListWorkspaces()
	if err != nil {
		return nil, err
	}
	layout := r.store.Layout()
	for _, w := range ws {
		scope, name, _ := strings.Cut(w.Ref, "/")
		keep[workspaceKey(w.Root)] = true
		keep[workspaceKey(layout.WorkspaceRoot(scope, name))] = true
	}
	return keep, nil
}

// copyKey says whether k is of a copy's key's form: an agent's id, or
// a workspace's key (workspaceKey).
func copyKey(k string) bool {
	if fsstore.IsID(k) {
		return true
	}
	h, ok := strings.CutPrefix(k, "ws-")
	b, err := hex.DecodeString(h)
	return ok && err == nil && len(b) == 16 && hex.EncodeToString(b) == h
}

// busy says whether the copy key on host is in use by a process of this
// daemon.
func (r *remotes) busy(host, key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.copies[host+" "+key]
	return c != nil && c.busy()
}
