package supervisor

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
)

// node is one agent in the in-memory tree. Core.mu guards every field
// except agent, which is safe for concurrent use.
type node struct {
	agent    *fsstore.Agent
	state    atomic.Pointer[fsstore.Session] // the latest committed session; never modified in place
	children []string                        // ids, in creation order

	live     provider.Session // nil unless the session is ACTIVE in this process
	busy     bool             // a turn or a session operation holds the node
	claimers int              // session operations waiting to hold it (acquire): no turn starts meanwhile
	idle     chan struct{}    // closed when busy becomes false
	heldBy   string           // a parent whose running turn spawned this node
	mail     bool             // inbox/new may hold messages
	retryAt  time.Time        // after a failed turn: not before then
	failures []time.Time      // recent failed turns, for the restart limit
	cancel   context.CancelFunc
	reserved map[string]bool // child names being created
	turn     *turnTools      // the tools of the running turn, for tool.call
	lastUsed time.Time       // start of the last turn, for LRU eviction
	waitSlot bool            // its pool was full of busy sessions
	// diskInvalid says why session.json on disk is unusable (a refused
	// hand edit); "" when it is fine.
	diskInvalid string
	// frozen counts the terminations of a subtree holding n (terminate
	// -r, archive): while it is not zero, no child can be created under n.
	frozen int
	// parks counts n's parks in a row without a reset time (backoff);
	// woken: `agent wake` let it past its provider's park.
	parks int
	woken bool
	// pending counts n's undelivered messages: from the scan, plus each
	// delivery to it, less each turn's; for people, not for scheduling.
	pending int
	// effects is the effect journal of n's pending turns (effects.go):
	// nil until first needed.
	effects map[string]map[string]fsstore.Effect
	// spawnKeys maps the spawn keys (tool-use ids) of n's spawned events
	// to the children they made; nil until first needed, then kept up to
	// date by commit, so that a spawn does not read the whole log.
	spawnKeys map[string]string
}

func newNode(a *fsstore.Agent) *node {
	n := &node{agent: a, pending: a.PendingAtLoad()}
	n.state.Store(a.Session())
	return n
}

// stubNode is a node that only has an id, for index updates.
func stubNode(id string) *node {
	n := &node{}
	n.state.Store(&fsstore.Session{ID: id})
	return n
}

// s returns the node's latest committed session. It is safe to call
// without Core.mu; the session must not be modified.
func (n *node) s() *fsstore.Session { return n.state.Load() }

func (n *node) id() string { return n.s().ID }

func (n *node) terminated() bool { return n.s().AgentState == fsstore.AgentTerminated }

// pathLocked returns root/child/... for n.
func (c *Core) pathLocked(n *node) string {
	parts := []string{n.s().Name}
	seen := map[string]bool{n.id(): true}
	for p := c.nodes[n.s().ParentID]; p != nil && !seen[p.id()]; p = c.nodes[p.s().ParentID] {
		seen[p.id()] = true
		parts = append(parts, p.s().Name)
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, "/")
}

// rootsLocked returns the agents without a live parent, sorted by creation.
func (c *Core) rootsLocked() []*node {
	var roots []*node
	for _, n := range c.nodes {
		if c.nodes[n.s().ParentID] == nil {
			roots = append(roots, n)
		}
	}
	sort.Slice(roots, func(i, j int) bool { return roots[i].id() < roots[j].id() })
	return roots
}

// resolveLocked finds an agent by ref: a UUID, a path root/child/..., or a
// bare name that is unique in the tree.
func (c *Core) resolveLocked(ref string) (*node, error) {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return nil, api.Errorf(api.CodeInvalidParams, "empty agent ref")
	}
	if fsstore.IsID(ref) {
		if n := c.nodes[ref]; n != nil {
			return n, nil
		}
		return nil, api.Errorf(api.CodeNotFound, "no agent with id %s", ref)
	}
	if strings.Contains(ref, "/") {
		parts := strings.Split(strings.Trim(ref, "/"), "/")
		// Each step must name one agent: siblings sharing a name (which
		// only hand-made directories can bring about) are refused, never
		// resolved to either of them.
		level := c.rootsLocked()
		var cur *node
		for i, name := range parts {
			var matches []*node
			for _, x := range level {
				if x != nil && x.s().Name == name {
					matches = append(matches, x)
				}
			}
			if len(matches) == 0 {
				return nil, api.Errorf(api.CodeNotFound, "no agent at path %q", ref)
			}
			if len(matches) > 1 {
				ids := make([]string, len(matches))
				for j, m := range matches {
					ids[j] = m.id()
				}
				sort.Strings(ids)
				e := api.Errorf(api.CodeAmbiguous, "path %q is ambiguous: %d siblings are named %q (%s)",
					strings.Join(parts[:i+1], "/"), len(matches), name, strings.Join(ids, ", "))
				e.Hint = "use an id, and rename one of them (substrat fsck lists them)"
				return nil, e
			}
			cur, level = matches[0], nil
			for _, id := range cur.children {
				level = append(level, c.nodes[id])
			}
		}
		return cur, nil
	}
	if err := fsstore.ValidateName(ref); err != nil {
		return nil, api.Errorf(api.CodeInvalidParams, "bad agent ref %q: %v", ref, fsstore.Reason(err))
	}
	var matches []*node
	for _, n := range c.nodes {
		if n.s().Name == ref {
			matches = append(matches, n)
		}
	}
	switch len(matches) {
	case 0:
		return nil, api.Errorf(api.CodeNotFound, "no agent named %q", ref)
	case 1:
		return matches[0], nil
	}
	paths := make([]string, len(matches))
	for i, m := range matches {
		paths[i] = c.pathLocked(m) + " (" + m.id() + ")"
	}
	sort.Strings(paths)
	e := api.Errorf(api.CodeAmbiguous, "agent name %q is ambiguous; it matches: %s", ref, strings.Join(paths, ", "))
	e.Hint = "use a path (root/child) or an id"
	return nil, e
}

func (c *Core) childNamedLocked(parent *node, name string) *node {
	for _, id := range parent.children {
		if ch := c.nodes[id]; ch != nil && ch.s().Name == name {
			return ch
		}
	}
	return nil
}

// siblingsLocked returns the other agents with n's parent: for a root,
// the other roots; for an agent whose parent left the live tree (an
// orphan), the other children of that parent, never the roots.
func (c *Core) siblingsLocked(n *node) []*node {
	var out []*node
	pid := n.s().ParentID
	if p := c.nodes[pid]; p != nil {
		for _, id := range p.children {
			if s := c.nodes[id]; s != nil && s != n {
				out = append(out, s)
			}
		}
		return out
	}
	for _, x := range c.nodes {
		if x != n && x.s().ParentID == pid {
			out = append(out, x)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id() < out[j].id() })
	return out
}

// neighbourLocked resolves a name as seen from n under one-hop routing:
// its parent, a child, or a sibling.
func (c *Core) neighbourLocked(n *node, name string) (*node, error) {
	if p := c.nodes[n.s().ParentID]; p != nil && (p.s().Name == name || name == "parent") {
		return p, nil
	}
	for _, s := range c.siblingsLocked(n) {
		if s.s().Name == name {
			return s, nil
		}
	}
	if ch := c.childNamedLocked(n, name); ch != nil {
		return ch, nil
	}
	if fsstore.IsID(name) {
		if t := c.nodes[name]; t != nil && (t.s().ParentID == n.id() || t.id() == n.s().ParentID ||
			(t.s().ParentID == n.s().ParentID && t != n)) {
			return t, nil
		}
	}
	return nil, fmt.Errorf("no agent %q one hop from %s: you can reach your parent, your children and your siblings", name, n.s().Name)
}

// subtreeLocked returns n and its descendants, leaves first.
func (c *Core) subtreeLocked(n *node) []*node {
	var order []*node
	seen := map[string]bool{}
	var walk func(x *node)
	walk = func(x *node) {
		if seen[x.id()] {
			return
		}
		seen[x.id()] = true
		for _, id := range x.children {
			if ch := c.nodes[id]; ch != nil {
				walk(ch)
			}
		}
		order = append(order, x)
	}
	walk(n)
	return order
}

func (c *Core) infoLocked(n *node) api.AgentInfo {
	sum := c.subtreeCountersLocked(n, map[string]bool{})
	return c.infoFromLocked(n, c.pathLocked(n), sum, c.overBudgetLocked(n, sum)) // query.go
}

// subtreeTotals is a subtree's sum without a context use, which is each
// agent's own.
func subtreeTotals(sum fsstore.Counters) fsstore.Counters {
	sum.ContextTokens, sum.ContextWindow = 0, 0
	return sum
}

func (c *Core) subtreeCountersLocked(n *node, seen map[string]bool) fsstore.Counters {
	seen[n.id()] = true
	sum := n.s().Counters
	for _, id := range n.children {
		if ch := c.nodes[id]; ch != nil && !seen[id] {
			sum = sum.Add(c.subtreeCountersLocked(ch, seen))
		}
	}
	return sum
}

// IDs returns the ids of every agent in the live tree.
func (c *Core) IDs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Collect(maps.Keys(c.nodes))
}
