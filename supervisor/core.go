package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
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
}

// Core is the daemon's model of the agent tree and every operation on it.
type Core struct {
	store     *fsstore.Store
	ws        *workspace.Store
	providers Providers
	clock     Clock
	log       *slog.Logger
	timeout   time.Duration
	defProv   string
	pools     map[string]int
	maxHops   int
	host      Host

	mu    sync.Mutex // guards the fields below
	nodes map[string]*node
	subs  map[*Subscription]struct{}
	wake  chan struct{}
	down  bool  // shutting down: no new turns
	roots *node // holds the names of roots being created
	// subsByTarget indexes subscriptions: target id -> subscriber ids.
	subsByTarget map[string]map[string]bool
	slotWaiters  int // nodes with waitSlot set

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
	if cfg.TurnTimeout == 0 {
		cfg.TurnTimeout = 10 * time.Minute
	}
	if cfg.DefaultProvider == "" {
		cfg.DefaultProvider = "script"
	}
	pools := map[string]int{DefaultPool: 8}
	for k, v := range cfg.Pools {
		pools[k] = v
	}
	if cfg.MaxHops <= 0 {
		cfg.MaxHops = DefaultMaxHops
	}
	return &Core{
		store: cfg.Store, ws: workspace.NewStore(cfg.Store.Layout(), cfg.Store.FS()), providers: cfg.Providers, clock: cfg.Clock, log: cfg.Log,
		timeout: cfg.TurnTimeout, defProv: cfg.DefaultProvider, pools: pools, maxHops: cfg.MaxHops, host: cfg.Host,
		nodes: map[string]*node{}, roots: &node{}, subs: map[*Subscription]struct{}{}, wake: make(chan struct{}, 1),
		subsByTarget: map[string]map[string]bool{},
	}
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

// commit appends an event for n and publishes it to subscribers. State
// changes are checked against the transition tables first, and agent state
// changes are told to the agents subscribed to them.
func (c *Core) commit(n *node, typ string, data any) error {
	c.mu.Lock()
	from := n.s().AgentState
	if ch, ok := data.(fsstore.StateChange); ok {
		if err := checkTransition(n.s(), ch); err != nil {
			c.mu.Unlock()
			return api.Errorf(api.CodeConflict, "%v", err)
		}
	}
	c.mu.Unlock()
	sess, err := n.agent.Commit(typ, data)
	if err != nil {
		c.log.Error("commit failed", "agent", n.agent.ID(), "type", typ, "err", err)
		return storeErr(err)
	}
	c.mu.Lock()
	n.state.Store(sess)
	if typ == fsstore.EvSubscribed || typ == fsstore.EvUnsubscribed {
		c.indexSubsLocked(n)
	}
	if sp, ok := data.(fsstore.Spawned); ok && typ == fsstore.EvSpawned && n.spawnKeys != nil && sp.SpawnKey != "" {
		n.spawnKeys[sp.SpawnKey] = sp.ChildID
	}
	hops := 0
	if n.turn != nil {
		hops = n.turn.hops + 1
	}
	c.publishLocked(api.WatchEvent{Agent: sess.ID, Name: sess.Name, Type: typ, Seq: sess.LastSeq, Time: sess.UpdatedAt, Data: data})
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
		return nil, false, api.Errorf(api.CodeInvalidParams, "%s", strings.TrimPrefix(err.Error(), "fsstore: invalid: "))
	}
	if p.Provider == "" {
		p.Provider = c.defProv
	}
	if _, err := c.providers.Get(p.Provider); err != nil {
		return nil, false, api.Errorf(api.CodeInvalidParams, "%v", err)
	}
	c.mu.Lock()
	if c.down {
		c.mu.Unlock()
		return nil, false, api.Errorf(api.CodeUnavailable, "the daemon is shutting down")
	}
	if parent == nil && p.Parent != "" {
		parent, err = c.resolveLocked(p.Parent)
		if err != nil {
			c.mu.Unlock()
			return nil, false, err
		}
	}
	var siblings []*node
	parentID := ""
	if parent != nil {
		parentID = parent.id()
		if parent.terminated() {
			c.mu.Unlock()
			return nil, false, api.Errorf(api.CodeConflict, "parent %s has terminated", parent.s().Name)
		}
		if parent.frozen > 0 {
			c.mu.Unlock()
			return nil, false, api.Errorf(api.CodeConflict, "parent %s is being terminated or archived", parent.s().Name)
		}
		for _, id := range parent.children {
			if ch := c.nodes[id]; ch != nil {
				siblings = append(siblings, ch)
			}
		}
	} else {
		siblings = c.rootsLocked()
	}
	for _, s := range siblings {
		if p.SpawnKey != "" && s.s().SpawnKey == p.SpawnKey {
			c.mu.Unlock()
			return s, true, nil
		}
	}
	for _, s := range siblings {
		if s.s().Name == p.Name {
			c.mu.Unlock()
			return nil, false, api.Errorf(api.CodeConflict, "an agent named %q already exists there (%s)", p.Name, s.id())
		}
	}
	holder := parent
	if holder == nil {
		holder = c.roots // roots reserve their names here
	}
	if holder.reserved[p.Name] {
		c.mu.Unlock()
		return nil, false, api.Errorf(api.CodeConflict, "an agent named %q is being created there", p.Name)
	}
	if holder.reserved == nil {
		holder.reserved = map[string]bool{}
	}
	holder.reserved[p.Name] = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(holder.reserved, p.Name)
		c.mu.Unlock()
	}()

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
		SpawnKey: p.SpawnKey, Metadata: p.Metadata, Pool: p.Pool, Budget: p.Budget,
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

// List returns every agent, parents before children, siblings in creation
// order.
func (c *Core) List() []api.AgentInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []api.AgentInfo
	seen := map[string]bool{}
	var walk func(n *node)
	walk = func(n *node) {
		if seen[n.id()] {
			return
		}
		seen[n.id()] = true
		out = append(out, c.infoLocked(n))
		for _, id := range n.children {
			if ch := c.nodes[id]; ch != nil {
				walk(ch)
			}
		}
	}
	for _, r := range c.rootsLocked() {
		walk(r)
	}
	return out
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
	return c.deliver(&fsstore.Message{From: fsstore.User, FromName: fsstore.User, Kind: fsstore.KindMessage, Text: p.Text}, n)
}

// deliver publishes m in n's inbox and marks n runnable.
func (c *Core) deliver(m *fsstore.Message, to *node) (*fsstore.Message, error) {
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
	c.publishLocked(api.WatchEvent{Agent: to.id(), Name: to.s().Name, Type: "message", Time: m.SentAt,
		Data: map[string]string{"id": m.ID, "from": m.FromName, "text": m.Text}})
	answered := m.ReplyTo != "" && slices.Contains(to.s().WaitingFor, m.ReplyTo)
	rest := slices.DeleteFunc(slices.Clone(to.s().WaitingFor), func(id string) bool { return id == m.ReplyTo })
	c.mu.Unlock()
	if answered {
		// The reply is durable in the inbox; the waiting list is history
		// that a crash may leave one reply behind, never ahead.
		if err := c.commit(to, fsstore.EvWaiting, fsstore.Waiting{IDs: rest}); err != nil {
			c.log.Warn("waiting list not updated", "agent", to.id(), "err", err)
		}
	}
	c.signal()
	return m, nil
}

// sendUser publishes m in the USER inbox.
func (c *Core) sendUser(m *fsstore.Message) error {
	m.To = fsstore.User
	if err := c.store.Send(m); err != nil {
		return storeErr(err)
	}
	c.mu.Lock()
	c.publishLocked(api.WatchEvent{Agent: fsstore.User, Name: fsstore.User, Type: "message", Time: m.SentAt,
		Data: map[string]string{"id": m.ID, "from": m.FromName, "text": m.Text}})
	c.mu.Unlock()
	return nil
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

// acquire waits until n is not busy and claims it.
func (c *Core) acquire(ctx context.Context, n *node) error {
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
		if n.mail && !n.busy && !now.Before(n.retryAt) && !n.waitSlot && n.heldBy == "" && !n.terminated() && (!n.s().Gated || n.s().Permits > 0) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
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
	c.mu.Lock()
	if n.cancel != nil {
		n.cancel()
	}
	c.mu.Unlock()
	if err := c.acquire(ctx, n); err != nil {
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
	if err := c.commit(n, fsstore.EvState, fsstore.StateChange{AgentState: fsstore.AgentTerminated,
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
	if err := c.commit(n, fsstore.EvProvider, fsstore.ProviderChange{Reset: true}); err != nil {
		return api.AgentInfo{}, err
	}
	if n.s().SessionState != fsstore.SessionCreated {
		if err := c.commit(n, fsstore.EvState, fsstore.StateChange{SessionState: fsstore.SessionCreated, Reason: "session deleted by the user"}); err != nil {
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
		if err := c.commit(n, fsstore.EvProvider, fsstore.ProviderChange{StateBlob: blob}); err != nil {
			return err
		}
	}
	if n.s().SessionState == fsstore.SessionActive {
		if err := c.commit(n, fsstore.EvState, fsstore.StateChange{SessionState: fsstore.SessionSuspended, Reason: reason}); err != nil {
			return err
		}
	}
	c.snapshot(n)
	return nil
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
	cfg := provider.Config{
		AgentID: sess.ID, Name: sess.Name, Model: sess.Model, Instructions: sess.Instructions,
		WorkDir:     workDir,
		Permissions: providerPermissions(sess),
		Home:        c.store.Layout().Home,
		Sandbox:     c.host.Sandbox(sess),
		Track:       c.host.Track(sess.ID),
		SessionID: func(id string) error {
			c.mu.Lock()
			known := n.s().ProviderSessionID
			c.mu.Unlock()
			if id == "" || id == known {
				return nil
			}
			return c.commit(n, fsstore.EvProvider, fsstore.ProviderChange{ProviderSessionID: id})
		},
	}
	if cfg.Sandbox != nil {
		cfg.ToolSocket = c.store.Layout().ToolSocket(sess.ID)
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
	if err := c.commit(n, fsstore.EvState, fsstore.StateChange{SessionState: fsstore.SessionActive}); err != nil {
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
