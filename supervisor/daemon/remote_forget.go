package daemon

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor"
)

// forget removes, on their hosts, the copies of agent's own extras (its
// CLI's HOME, its tool socket there) once it has left the tree: those
// that came back after its last process. Its workspace's copy stays, for
// the workspace's other agents. Nothing waits for it.
func (r *remotes) forget(agent string) {
	r.mu.Lock()
	var gone []*remoteCopy
	for k, c := range r.copies {
		if c.key != agent {
			continue
		}
		if !c.mu.TryLock() {
			continue // being copied either way: in use
		}
		if c.running == 0 && c.synced {
			gone = append(gone, c)
			delete(r.copies, k)
		}
		c.mu.Unlock()
	}
	r.mu.Unlock()
	for _, c := range gone {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := c.e.Remove(ctx, agent); err != nil {
				r.log.Warn("an agent's copy was not removed from its host", "agent", agent, "host", c.e.Host(), "err", err)
			}
		}()
	}
}

// forgetWorkspace removes, on hosts and on every host where this
// daemon's life made one, the copy of the workspace root root (its place
// and extras) once the workspace is deleted. A copy some process still
// uses is left alone. Nothing waits for it.
func (r *remotes) forgetWorkspace(root string, hosts []string) {
	key := workspaceKey(root)
	r.mu.Lock()
	for k, c := range r.copies {
		if c.key != key {
			continue
		}
		if c.busy() {
			hosts = slices.DeleteFunc(hosts, func(h string) bool { return h == c.e.Host() })
			continue
		}
		delete(r.copies, k)
		if !slices.Contains(hosts, c.e.Host()) {
			hosts = append(hosts, c.e.Host())
		}
	}
	r.mu.Unlock()
	for _, host := range hosts {
		e, err := r.executor(host)
		if err != nil {
			r.log.Warn("a deleted workspace's copy was not removed from its host", "root", root, "host", host, "err", err)
			continue
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := e.Remove(ctx, key); err != nil {
				r.log.Warn("a deleted workspace's copy was not removed from its host", "root", root, "host", host, "err", err)
			}
		}()
	}
}

// workspaceHosts returns the ssh hosts that agents of the workspace ref
// run on, as the tree records them.
func workspaceHosts(core *supervisor.Core, ref string) []string {
	var hosts []string
	for _, a := range core.List() {
		if h := fsstore.ExecutorHost(a.Executor); h != "" && a.Workspace == ref && !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

// inUse says, as an error, whether a copy of pl's workspace root is in
// use on a host: by a process that runs there now, whose copy will come
// back over the root.
func (r *remotes) inUse(pl supervisor.Workplace) error {
	if pl.Sandbox == nil {
		return nil
	}
	key := workspaceKey(pl.Sandbox.Root.Host)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.copies {
		if c.key != key {
			continue
		}
		if c.busy() {
			return fmt.Errorf("your workspace is in use on %s by a process that runs there now, and its copy will come back over what is here: "+
				"use the shell tool, which runs there", c.e.Host())
		}
	}
	return nil
}

// busy says whether c is in use: a process uses it, or it is being
// copied either way now (its lock is held across the copy, which r.mu
// must not wait for).
func (c *remoteCopy) busy() bool {
	if !c.mu.TryLock() {
		return true
	}
	defer c.mu.Unlock()
	return c.running > 0
}
