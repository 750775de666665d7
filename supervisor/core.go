package supervisor

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor/workspace"
)

// Clock is the core's source of time, so that the simulation can drive it
// with abstract time.
type Clock interface {
	Now() time.Time
}

// WallClock is the real clock.
type WallClock struct{}

// Now returns time.Now().
func (WallClock) Now() time.Time { return time.Now() }

// Providers finds a provider by name.
type Providers interface {
	Get(name string) (provider.Provider, error)
}

// Config is what a Core is built from.
type Config struct {
	Store       *fsstore.Store
	Providers   Providers
	Clock       Clock         // default WallClock
	Log         *slog.Logger  // default discards
	TurnTimeout time.Duration // default 10 minutes
	// DefaultProvider is used by CreateAgent when none is named.
	DefaultProvider string
	// Pools maps slot pool names to the live sessions each may hold; the
	// "default" pool's size applies to unnamed pools. Default: 8.
	Pools map[string]int
	// MaxHops is the ping-pong guard; default DefaultMaxHops.
	MaxHops int
	// Host runs processes, sandboxes and tool sockets; default NopHost.
	Host Host
	// Settings, if set, replace DefaultSettings (TurnTimeout,
	// DefaultProvider and Pools above still apply over them).
	Settings *Settings
}

// Core is the daemon's model of the agent tree and every operation on it.
type Core struct {
	store     *fsstore.Store
	ws        *workspace.Store
	providers Providers
	clock     Clock
	log       *slog.Logger
	maxHops   int
	// settingsPtr holds the Settings in force (SetSettings replaces them).
	settingsPtr atomic.Pointer[Settings]
	host        Host

	mu    sync.Mutex // guards the fields below
	nodes map[string]*node
	// adopting holds the agents being adopted, closed when done: the
	// watcher and a restore may adopt the same directory at once.
	adopting map[string]chan struct{}
	subs     map[*Subscription]struct{}
	wake     chan struct{}
	down     bool  // shutting down: no new turns
	roots    *node // holds the names of roots being created
	// subsByTarget indexes subscriptions: target id -> subscriber ids.
	subsByTarget map[string]map[string]bool
	// parked maps a provider (park.go's key) to the reset of its limit.
	parked      map[string]time.Time
	slotWaiters int // nodes with waitSlot set

	outcomes  outcomes  // what became of the messages clients wait on (own lock)
	approvals approvals // turns waiting for an approval's answer (own lock)
}

// New returns a Core with an empty tree; call Recover to load the store.
func New(cfg Config) *Core {
	if cfg.Host == nil {
		cfg.Host = NopHost{}
	}
	if cfg.Clock == nil {
		cfg.Clock = WallClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	set := DefaultSettings()
	if cfg.Settings != nil {
		set = *cfg.Settings
	}
	if cfg.TurnTimeout != 0 {
		set.TurnTimeout = cfg.TurnTimeout
	}
	if cfg.DefaultProvider != "" {
		set.DefaultProvider = cfg.DefaultProvider
	}
	for k, v := range cfg.Pools {
		set.Pools[k] = v
	}
	if cfg.MaxHops <= 0 {
		cfg.MaxHops = DefaultMaxHops
	}
	c := &Core{
		store: cfg.Store, ws: workspace.NewStore(cfg.Store.Layout(), cfg.Store.FS()).WithGit(cfg.Host.Git()), providers: cfg.Providers, clock: cfg.Clock, log: cfg.Log,
		maxHops: cfg.MaxHops, host: cfg.Host,
		nodes: map[string]*node{}, roots: &node{}, subs: map[*Subscription]struct{}{}, wake: make(chan struct{}, 1),
		subsByTarget: map[string]map[string]bool{}, parked: map[string]time.Time{},
	}
	c.settingsPtr.Store(&set)
	return c
}

// Wake returns a channel that receives when some agent may have become
// runnable.
func (c *Core) Wake() <-chan struct{} { return c.wake }

// Signal wakes the scheduler: some agent may have become runnable.
func (c *Core) Signal() { c.signal() }

func (c *Core) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// insertLocked adds a loaded or created agent to the tree.
func (c *Core) insertLocked(a *fsstore.Agent) *node {
	n := newNode(a)
	c.insertNodeLocked(n)
	return n
}

// insertNodeLocked adds n to the tree under its parent.
func (c *Core) insertNodeLocked(n *node) {
	c.nodes[n.id()] = n
	c.indexSubsLocked(n)
	c.loadParkLocked(n)
	if p := c.nodes[n.s().ParentID]; p != nil {
		p.children = append(p.children, n.id())
	}
}

// linkChildrenLocked rebuilds children lists after a bulk insert.
func (c *Core) linkChildrenLocked() {
	for _, n := range c.nodes {
		n.children = nil
	}
	ids := make([]string, 0, len(c.nodes))
	for id := range c.nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids) // UUIDv7: creation order
	for _, id := range ids {
		n := c.nodes[id]
		if p := c.nodes[n.s().ParentID]; p != nil {
			p.children = append(p.children, id)
		}
	}
}

// commit appends events for n, in one durable write, and publishes them
// to subscribers. State changes are checked against the transition tables
// first (each against n's state before the commit: give at most one), and
// agent state changes are told to the agents subscribed to them.
func (c *Core) commit(n *node, ps ...fsstore.Payload) error {
	c.mu.Lock()
	from := n.s().AgentState
	for _, p := range ps {
		if ch, ok := p.(fsstore.StateChange); ok {
			if err := checkTransition(n.s(), ch); err != nil {
				c.mu.Unlock()
				return api.Errorf(api.CodeConflict, "%v", err)
			}
		}
	}
	c.mu.Unlock()
	sess, err := n.agent.Commit(ps...)
	if err != nil {
		c.log.Error("commit failed", "agent", n.agent.ID(), "type", ps[0].EventType(), "events", len(ps), "err", err)
		return storeErr(err)
	}
	c.mu.Lock()
	n.state.Store(sess)
	hops := 0
	if n.turn != nil {
		hops = n.turn.hops + 1
	}
	for i, p := range ps {
		switch d := p.(type) {
		case fsstore.Subscription, fsstore.Unsubscribed:
			c.indexSubsLocked(n)
		case fsstore.Spawned:
			if n.spawnKeys != nil && d.SpawnKey != "" {
				n.spawnKeys[d.SpawnKey] = d.ChildID
			}
		}
		seq := sess.LastSeq - uint64(len(ps)-1-i)
		c.publishLocked(api.WatchEvent{Agent: sess.ID, Name: sess.Name, Type: api.WatchType(p.EventType()), Seq: seq, Time: sess.UpdatedAt, Data: p})
	}
	c.mu.Unlock()
	if to := sess.AgentState; to != from {
		c.notifyTransition(n, from, to, hops)
	}
	return nil
}

func invalidParams(format string, args ...any) error {
	return api.Errorf(api.CodeInvalidParams, format, args...)
}

// snapshot writes n's session.json; a failure is logged, not returned:
// the events are durable and replay covers the gap.
func (c *Core) snapshot(n *node) {
	err := n.agent.Snapshot()
	if errors.Is(err, fsstore.ErrHandEdited) {
		// A hand edit not yet seen by the watcher: adopt or refuse it
		// first; a refused one is left alone until the user fixes it.
		c.checkHandEdit(n)
		c.mu.Lock()
		invalid := n.diskInvalid != ""
		c.mu.Unlock()
		if invalid {
			return
		}
		err = n.agent.Snapshot()
	}
	if err != nil {
		c.log.Warn("snapshot failed; events.jsonl still holds the state", "agent", n.agent.ID(), "err", err)
	}
}

// storeErr turns a store error into an RPC error the user can act on.
func storeErr(err error) error {
	if err == nil {
		return nil
	}
	var re *api.Error
	if errors.As(err, &re) {
		return err
	}
	e := &api.Error{Code: api.CodeUnavailable, Message: err.Error(), Hint: fsstore.Hint(err)}
	switch {
	case errors.Is(err, fsstore.ErrNotFound):
		e.Code = api.CodeNotFound
	case errors.Is(err, fsstore.ErrInvalid), errors.Is(err, fsstore.ErrTooLarge):
		e.Code = api.CodeInvalidParams
	case errors.Is(err, fsstore.ErrExists):
		e.Code = api.CodeConflict
	}
	if e.Hint == "" && e.Code == api.CodeUnavailable {
		e.Hint = ioHint(err) + "; nothing unacknowledged was kept"
	}
	return e
}

// ioHint says what to look at for a failed write, by its cause.
func ioHint(err error) string {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return "the disk (or the quota) is full: free some space"
	case errors.Is(err, syscall.EROFS):
		return "the file system is read-only (remounted after an error?): check dmesg and remount it"
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return "permission denied: check the owner and mode of the home and its files (ls -l)"
	case errors.Is(err, syscall.EIO):
		return "an I/O error: check the disk (dmesg)"
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return "out of file descriptors: raise the limit (ulimit -n) or stop idle clients"
	}
	return "check daemon.log and free disk space"
}

// claim marks n busy. It fails if n is busy already.
func (c *Core) claimLocked(n *node) bool {
	if n.busy {
		return false
	}
	n.busy = true
	n.idle = make(chan struct{})
	return true
}

func (c *Core) release(n *node) {
	c.mu.Lock()
	n.busy = false
	n.cancel = nil
	close(n.idle)
	if c.slotWaiters > 0 && !n.waitSlot {
		// A session may have become idle: let parked turns try again.
		for _, x := range c.nodes {
			x.waitSlot = false
		}
		c.slotWaiters = 0
	}
	c.mu.Unlock()
	c.signal()
}

// acquire waits until n is not busy and claims it. No turn starts on n
// while it waits (RunTurn, Runnable): a session operation is not starved
// by turn after turn.
func (c *Core) acquire(ctx context.Context, n *node) error {
	c.mu.Lock()
	n.claimers++
	c.mu.Unlock()
	defer c.unclaim(n)
	for {
		c.mu.Lock()
		if c.claimLocked(n) {
			c.mu.Unlock()
			return nil
		}
		idle := n.idle
		c.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// preempt cancels n's running turn, if any, and claims n, with no turn
// starting on it in between: the cancelled turn's end would otherwise
// let the scheduler start the next (for the messages it left
// undelivered), which nothing cancels, and the claim would wait for that
// one to end by itself.
func (c *Core) preempt(ctx context.Context, n *node) error {
	c.mu.Lock()
	n.claimers++
	if n.cancel != nil {
		n.cancel()
	}
	c.mu.Unlock()
	defer c.unclaim(n)
	return c.acquire(ctx, n)
}

// unclaim ends a wait of acquire or preempt: turns may start on n again
// when none waits.
func (c *Core) unclaim(n *node) {
	c.mu.Lock()
	n.claimers--
	free := n.claimers == 0
	c.mu.Unlock()
	if free {
		c.signal()
	}
}

// Runnable returns the agents that have mail and can take a turn now, in
// id order.
func (c *Core) Runnable() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return nil
	}
	var ids []string
	now := c.clock.Now()
	for id, n := range c.nodes {
		if n.mail && !n.busy && n.claimers == 0 && !now.Before(n.retryAt) && !n.waitSlot && n.heldBy == "" && !n.terminated() && (!n.s().Gated || n.s().Permits > 0) &&
			c.parkedLocked(n, now).IsZero() {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}
