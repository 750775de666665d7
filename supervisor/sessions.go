package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor/api"
)

// Suspend saves an agent's live provider session to its state blob.
func (c *Core) Suspend(ctx context.Context, ref string) (api.AgentInfo, error) {
	n, err := c.hold(ctx, ref)
	if err != nil {
		return api.AgentInfo{}, err
	}
	defer c.release(n)
	if n.s().SessionState != fsstore.SessionActive {
		return api.AgentInfo{}, api.Errorf(api.CodeConflict, "the session of %s is %s, not ACTIVE", n.s().Name, n.s().SessionState)
	}
	if err := c.suspendHeld(ctx, n, "suspended by the user"); err != nil {
		return api.AgentInfo{}, err
	}
	return c.infoOf(n), nil
}

// Resume restores an agent's provider session now instead of on demand.
func (c *Core) Resume(ctx context.Context, ref string) (api.AgentInfo, error) {
	n, err := c.hold(ctx, ref)
	if err != nil {
		return api.AgentInfo{}, err
	}
	defer c.release(n)
	if n.terminated() {
		return api.AgentInfo{}, api.Errorf(api.CodeConflict, "%s has terminated", n.s().Name)
	}
	if _, err := c.ensureSession(ctx, n); errors.Is(err, errPoolFull) {
		return api.AgentInfo{}, api.Errorf(api.CodeConflict, "pool %q is full of busy sessions; try again when one is idle", poolOf(n.s()))
	} else if err != nil {
		return api.AgentInfo{}, err
	}
	c.snapshot(n)
	return c.infoOf(n), nil
}

// ResetSession stops an agent's provider session and forgets its saved
// state, so that the next turn starts a new one (session delete).
func (c *Core) ResetSession(ctx context.Context, ref string) (api.AgentInfo, error) {
	n, err := c.hold(ctx, ref)
	if err != nil {
		return api.AgentInfo{}, err
	}
	defer c.release(n)
	if n.terminated() {
		return api.AgentInfo{}, api.Errorf(api.CodeConflict, "%s has terminated", n.s().Name)
	}
	c.mu.Lock()
	live := n.live
	n.live = nil
	c.mu.Unlock()
	if live != nil {
		live.Stop()
	}
	if err := c.commit(n, fsstore.ProviderChange{Reset: true}); err != nil {
		return api.AgentInfo{}, err
	}
	if n.s().SessionState != fsstore.SessionCreated {
		if err := c.commit(n, fsstore.StateChange{SessionState: fsstore.SessionCreated, Reason: "session deleted by the user"}); err != nil {
			return api.AgentInfo{}, err
		}
	}
	c.snapshot(n)
	return c.infoOf(n), nil
}

func (c *Core) hold(ctx context.Context, ref string) (*node, error) {
	c.mu.Lock()
	n, err := c.resolveLocked(ref)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.acquire(ctx, n); err != nil {
		return nil, api.Errorf(api.CodeConflict, "%s is busy with a turn; try again when it is idle", n.s().Name)
	}
	return n, nil
}

func (c *Core) infoOf(n *node) api.AgentInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.infoLocked(n)
}

// suspendHeld saves the blob of n's live session and marks it SUSPENDED.
func (c *Core) suspendHeld(ctx context.Context, n *node, reason string) error {
	c.mu.Lock()
	live := n.live
	c.mu.Unlock()
	var blob []byte
	if live != nil {
		b, err := live.Suspend(ctx)
		if err != nil {
			c.log.Warn("provider suspend failed; the session resumes from its provider id", "agent", n.id(), "err", err)
		} else {
			blob = b
		}
		live.Stop()
		c.mu.Lock()
		n.live = nil
		c.mu.Unlock()
	}
	if blob != nil {
		if err := c.commit(n, fsstore.ProviderChange{StateBlob: blob}); err != nil {
			return err
		}
	}
	if n.s().SessionState == fsstore.SessionActive {
		if err := c.commit(n, fsstore.StateChange{SessionState: fsstore.SessionSuspended, Reason: reason}); err != nil {
			return err
		}
	}
	c.snapshot(n)
	return nil
}

// providerConfig is what a provider is told of agent sess, which works
// in workDir: who it is, its model, instructions and permissions, its
// sandbox and limits.
func (c *Core) providerConfig(sess *fsstore.Session, workDir string) provider.Config {
	cfg := provider.Config{
		AgentID: sess.ID, Name: sess.Name, Model: sess.Model, Instructions: sess.Instructions,
		WorkDir:     workDir,
		Permissions: providerPermissions(sess),
		Home:        c.store.Layout().Home,
		Sandbox:     c.host.Sandbox(sess),
		Start:       c.host.Start(sess, c.limitsOf(sess)),
	}
	if cfg.Start == nil {
		// This machine's limits; a host applies its own in Start.
		cfg.Limit = c.host.Limit(sess.ID, c.limitsOf(sess))
	}
	return cfg
}

// ensureSession makes n's provider session live: created for a new
// session, restored from its blob otherwise. The caller holds n.
func (c *Core) ensureSession(ctx context.Context, n *node) (provider.Session, error) {
	c.mu.Lock()
	live, sess := n.live, n.s()
	c.mu.Unlock()
	if live != nil {
		return live, nil
	}
	p, err := c.providers.Get(sess.Provider)
	if err != nil {
		return nil, err
	}
	if err := c.makeRoom(ctx, n); err != nil {
		return nil, err
	}
	workDir, err := c.workDirFor(sess)
	if err != nil {
		return nil, err
	}
	cfg := c.providerConfig(sess, workDir)
	cfg.Track = c.host.Track(sess.ID)
	cfg.SessionID = func(id string) error {
		c.mu.Lock()
		known := n.s().ProviderSessionID
		c.mu.Unlock()
		if id == "" || id == known {
			return nil
		}
		return c.commit(n, fsstore.ProviderChange{ProviderSessionID: id})
	}
	// The agent's own tool socket, for a provider whose model reaches the
	// tools over MCP (a CLI) or one in a sandbox, sandboxed or not: its
	// processes run in a PID namespace of their own either way, and the
	// daemon's socket refuses such peers. One listener per such live
	// session; the others need none.
	if cfg.Sandbox != nil || provider.HasOwnTools(p) {
		if cfg.ToolSocket, err = c.host.ToolSocket(sess); err != nil {
			return nil, fmt.Errorf("the tool socket of %s: %w", sess.Name, err)
		}
	}
	var s provider.Session
	if sess.SessionState == fsstore.SessionCreated {
		s, err = p.Create(ctx, cfg)
	} else {
		s, err = p.Restore(ctx, cfg, sess.StateBlob)
	}
	if err != nil {
		return nil, fmt.Errorf("start %s session: %w", sess.Provider, err)
	}
	if err := c.commit(n, fsstore.StateChange{SessionState: fsstore.SessionActive}); err != nil {
		s.Stop()
		return nil, err
	}
	c.mu.Lock()
	n.live = s
	c.mu.Unlock()
	return s, nil
}

// Shutdown stops new turns, waits for running ones (cancelling them after
// grace), and suspends every live session so that it can resume.
func (c *Core) Shutdown(ctx context.Context, grace time.Duration) {
	c.mu.Lock()
	c.down = true
	var all []*node
	for _, n := range c.nodes {
		all = append(all, n)
	}
	c.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].id() < all[j].id() })
	gctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	for _, n := range all {
		if err := c.acquire(gctx, n); err != nil {
			c.mu.Lock()
			if n.cancel != nil {
				n.cancel()
			}
			c.mu.Unlock()
			if err := c.acquire(ctx, n); err != nil {
				continue
			}
		}
		if n.s().SessionState == fsstore.SessionActive || n.live != nil {
			if err := c.suspendHeld(ctx, n, "daemon stopped"); err != nil {
				c.log.Error("suspend at shutdown failed", "agent", n.id(), "err", err)
			}
		}
		c.snapshot(n)
		n.agent.Close()
		// Stay claimed: no turn may start after shutdown.
	}
	c.host.CloseToolSocket("")
}
