package supervisor

import (
	"slices"
	"strings"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
)

// Status returns the tree's figures of daemon.status: agents, live
// sessions, busy agents, watchers and each pool's use. The daemon adds
// what it knows of itself (pid, home, version, start).
func (c *Core) Status() api.StatusResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := api.StatusResult{Agents: len(c.nodes), Watchers: len(c.subs)}
	now := c.clock.Now()
	for k, until := range c.parked {
		if now.Before(until) {
			if st.Parked == nil {
				st.Parked = map[string]time.Time{}
			}
			st.Parked[k] = until
		}
	}
	pools := map[string]*api.PoolStatus{}
	for name := range c.settings().Pools {
		pools[name] = &api.PoolStatus{Name: name, Size: c.poolLimit(name)}
	}
	for _, n := range c.nodes {
		name := poolOf(n.s())
		p := pools[name]
		if p == nil {
			p = &api.PoolStatus{Name: name, Size: c.poolLimit(name)}
			pools[name] = p
		}
		if n.live != nil {
			st.LiveSessions++
			p.Live++
		}
		if n.s().AgentState == fsstore.AgentBusy {
			st.Busy++
			p.Busy++
		}
	}
	for _, p := range pools {
		st.Pools = append(st.Pools, *p)
	}
	slices.SortFunc(st.Pools, func(a, b api.PoolStatus) int { return strings.Compare(a.Name, b.Name) })
	return st
}

// Inspect returns an agent as agent.inspect shows it: its info, its whole
// session and how many messages wait in its inbox.
func (c *Core) Inspect(ref string) (api.InspectResult, error) {
	c.mu.Lock()
	n, err := c.resolveLocked(ref)
	if err != nil {
		c.mu.Unlock()
		return api.InspectResult{}, err
	}
	res := api.InspectResult{Agent: c.infoLocked(n), Session: n.s().Clone()}
	c.mu.Unlock()
	res.LimitsInForce = c.limitsOf(res.Session)
	if msgs, _, err := n.agent.Pending(); err == nil {
		res.Pending = len(msgs)
	}
	return res, nil
}

// Sessions lists every agent's provider session, in tree order.
func (c *Core) Sessions() []api.SessionInfo {
	out := []api.SessionInfo{}
	for _, a := range c.List() {
		c.mu.Lock()
		if n := c.nodes[a.ID]; n != nil {
			out = append(out, api.SessionInfo{ID: a.ID, Path: a.Path, Provider: n.s().Provider, SessionState: n.s().SessionState,
				ProviderSessionID: n.s().ProviderSessionID, HasStateBlob: len(n.s().StateBlob) > 0, Live: n.live != nil})
		}
		c.mu.Unlock()
	}
	return out
}

// Events calls fn with the agent's events that p asks for (all, or
// those after a seq, since a time, of some types; with p.Tail > 0 the
// last p.Tail of those), and returns how many the log holds and its last
// seq.
func (c *Core) Events(p api.EventsParams, fn func(fsstore.Event) error) (api.EventsResult, error) {
	c.mu.Lock()
	n, err := c.resolveLocked(p.Ref)
	c.mu.Unlock()
	if err != nil {
		return api.EventsResult{}, err
	}
	var res api.EventsResult
	tail := api.NewTail(p.Tail)
	err = fsstore.ReadEvents(c.store.FS(), n.agent.Files().Events(), func(e fsstore.Event) error {
		res.Events++
		res.LastSeq = e.Seq
		switch {
		case !p.Match(e):
			return nil
		case p.Tail > 0:
			tail.Add(e)
			return nil
		}
		return fn(e)
	})
	if err != nil {
		return res, storeErr(err)
	}
	for _, e := range tail.Events() {
		if err := fn(e); err != nil {
			return res, err
		}
	}
	return res, nil
}

// infoFromLocked is n as the CLI shows it, given its path, its subtree's
// counters and the budget its spending is over (nil: none).
func (c *Core) infoFromLocked(n *node, path string, subtree fsstore.Counters, over *api.OverBudget) api.AgentInfo {
	s := n.s()
	info := api.AgentInfo{
		ID: n.id(), Name: s.Name, Path: path, ParentID: s.ParentID,
		Provider: s.Provider, Model: s.Model, AgentState: s.AgentState,
		SessionState: s.SessionState, StateReason: s.StateReason,
		Counters: s.Counters, Subtree: subtreeTotals(subtree),
		Live: n.live != nil, Dir: n.agent.Files().Dir, DiskInvalid: n.diskInvalid,
		Gated: s.Gated, Pending: n.pending, Budget: s.Budget, Pool: poolOf(s), Workspace: s.Workspace, Executor: s.Executor,
		Failing: len(n.failures), Parked: c.parkInfoLocked(n), OverBudget: over,
	}
	for _, id := range n.children {
		if ch := c.nodes[id]; ch != nil {
			info.Children = append(info.Children, ch.s().Name)
		}
	}
	info.State = api.StateOf(&info)
	return info
}

// overBudgetLocked returns the budget n's spending is over: its own
// (its subtree spent sum) or its closest ancestor's, or nil.
func (c *Core) overBudgetLocked(n *node, sum fsstore.Counters) *api.OverBudget {
	seen := map[string]bool{}
	for x := n; x != nil && !seen[x.id()]; x = c.nodes[x.s().ParentID] {
		seen[x.id()] = true
		b := x.s().Budget
		if b == nil {
			continue
		}
		used := sum
		if x != n {
			used = c.subtreeCountersLocked(x, map[string]bool{})
		}
		if b.Exceeded(used) {
			return &api.OverBudget{ID: x.id(), Path: c.pathLocked(x), Budget: *b, Subtree: subtreeTotals(used)}
		}
	}
	return nil
}

// Query returns the agents p selects, in tree order (parents before
// children, siblings in creation order), a page at a time. The daemon
// filters, so an answer holds only what was asked for; the tree is
// walked once and each subtree summed once.
func (c *Core) Query(p api.ListParams) (api.ListPage, error) {
	states, err := wordSet(p.States, api.States)
	if err != nil {
		return api.ListPage{}, err
	}
	if p.Limit < 0 {
		return api.ListPage{}, invalidParams("a limit cannot be negative")
	}
	providers, _ := wordSet(p.Providers, nil)
	ids, _ := wordSet(p.IDs, nil)
	c.mu.Lock()
	defer c.mu.Unlock()
	var sub *node
	if p.Ref != "" {
		if sub, err = c.resolveLocked(p.Ref); err != nil {
			return api.ListPage{}, err
		}
	}
	if ids != nil && p.After == "" && p.Limit == 0 {
		return c.byIDsLocked(ids, sub, states, providers), nil
	}
	w := c.walkLocked()
	lo, hi := 0, len(w.order) // the subtree asked for: a run of the order
	if sub != nil {
		i, ok := w.index[sub.id()]
		if !ok { // not in the tree (a loop of parents)
			return api.ListPage{Agents: []api.AgentInfo{}}, nil
		}
		lo, hi = i, i+w.size[i]
	}
	after := -1
	if p.After != "" {
		i, ok := w.index[p.After]
		if !ok {
			return api.ListPage{}, api.Errorf(api.CodeNotFound, "no agent %s to start the page after: it has gone; list from the start", p.After)
		}
		after = i
	}
	page := api.ListPage{Agents: []api.AgentInfo{}}
	more := false
	for i := lo; i < hi; i++ {
		n := w.order[i]
		if ids != nil && !ids[n.id()] || providers != nil && !providers[n.s().Provider] {
			continue
		}
		shown := i > after && (p.Limit == 0 || len(page.Agents) < p.Limit)
		var info api.AgentInfo
		if states != nil || shown { // the others are only counted
			info = c.infoFromLocked(n, w.path(i), w.sums[i], w.over[i])
			if states != nil && !states[info.State] {
				continue
			}
		}
		page.Total++
		switch {
		case shown:
			page.Agents = append(page.Agents, info)
		case i > after:
			more = true
		}
	}
	if more {
		page.Next = page.Agents[len(page.Agents)-1].ID
	}
	return page, nil
}

// wordSet returns the set of words, nil for none; with known set, a word
// outside it is an error (and words are upper-cased).
func wordSet(words []string, known []string) (map[string]bool, error) {
	if len(words) == 0 {
		return nil, nil
	}
	set := map[string]bool{}
	for _, w := range words {
		if known != nil {
			w = strings.ToUpper(w)
			if !slices.Contains(known, w) {
				return nil, invalidParams("unknown state %q: a state is one of %s", w, strings.Join(known, ", "))
			}
		}
		set[w] = true
	}
	return set, nil
}

// treeWalk is the live tree in tree order, with what each agent's info
// needs from the others: its path, its subtree's sum and size, and the
// budget it is over.
type treeWalk struct {
	order  []*node
	index  map[string]int // of each id in order
	parent []int          // the index of each one's parent, -1 for a root
	paths  []string       // made as asked for (path)
	sums   []fsstore.Counters
	size   []int // of each subtree: order[i:i+size[i]]
	over   []*api.OverBudget
}

// walkLocked walks the tree once, depth first from the roots.
func (c *Core) walkLocked() treeWalk {
	w := treeWalk{index: make(map[string]int, len(c.nodes))}
	var walk func(n *node, up int)
	walk = func(n *node, up int) {
		if _, seen := w.index[n.id()]; seen {
			return
		}
		w.index[n.id()] = len(w.order)
		w.order = append(w.order, n)
		w.parent = append(w.parent, up)
		me := len(w.order) - 1
		for _, id := range n.children {
			if ch := c.nodes[id]; ch != nil {
				walk(ch, me)
			}
		}
	}
	for _, r := range c.rootsLocked() {
		walk(r, -1)
	}
	k := len(w.order)
	w.paths, w.sums, w.size, w.over = make([]string, k), make([]fsstore.Counters, k), make([]int, k), make([]*api.OverBudget, k)
	for i, n := range w.order {
		w.sums[i], w.size[i] = n.s().Counters, 1
	}
	for i := k - 1; i > 0; i-- { // children come after their parent
		if up := w.parent[i]; up >= 0 {
			w.sums[up] = w.sums[up].Add(w.sums[i])
			w.size[up] += w.size[i]
		}
	}
	for i, n := range w.order { // the closest budget first
		if b := n.s().Budget; b.Exceeded(w.sums[i]) {
			w.over[i] = &api.OverBudget{ID: n.id(), Path: w.path(i), Budget: *b, Subtree: subtreeTotals(w.sums[i])}
		} else if up := w.parent[i]; up >= 0 {
			w.over[i] = w.over[up]
		}
	}
	return w
}

// path returns root/child/... of the agent at i.
func (w *treeWalk) path(i int) string {
	if w.paths[i] == "" {
		w.paths[i] = w.order[i].s().Name
		if up := w.parent[i]; up >= 0 {
			w.paths[i] = w.path(up) + "/" + w.paths[i]
		}
	}
	return w.paths[i]
}

// byIDsLocked answers a query of a few agents by id (top's refresh)
// without walking the tree: each one's info alone, with the other
// filters, in tree order. Its cost follows the agents asked for (and
// the subtrees summed for them), not the tree.
func (c *Core) byIDsLocked(ids map[string]bool, sub *node, states, providers map[string]bool) api.ListPage {
	type found struct {
		chain []*node // from its root down to it
		info  api.AgentInfo
	}
	var out []found
	for id := range ids {
		n := c.nodes[id]
		if n == nil || providers != nil && !providers[n.s().Provider] {
			continue
		}
		chain := c.chainLocked(n)
		if chain == nil || sub != nil && !slices.Contains(chain, sub) {
			continue
		}
		info := c.infoLocked(n)
		if states != nil && !states[info.State] {
			continue
		}
		out = append(out, found{chain, info})
	}
	pos := map[string]int{} // of a child among its siblings
	at := func(parent, child *node) int {
		if _, ok := pos[child.id()]; !ok {
			for i, id := range parent.children {
				pos[id] = i
			}
		}
		return pos[child.id()]
	}
	slices.SortFunc(out, func(a, b found) int {
		for i := 0; i < len(a.chain) && i < len(b.chain); i++ {
			x, y := a.chain[i], b.chain[i]
			switch {
			case x == y:
				continue
			case i == 0: // roots, by id as rootsLocked orders them
				return strings.Compare(x.id(), y.id())
			default:
				return at(a.chain[i-1], x) - at(b.chain[i-1], y)
			}
		}
		return len(a.chain) - len(b.chain) // a parent before its children
	})
	page := api.ListPage{Agents: make([]api.AgentInfo, 0, len(out)), Total: len(out)}
	for _, f := range out {
		page.Agents = append(page.Agents, f.info)
	}
	return page
}

// chainLocked returns n's ancestors from its root down to n, or nil if
// its parents loop (such an agent is not in the tree's order either).
func (c *Core) chainLocked(n *node) []*node {
	chain := []*node{n}
	for p := c.nodes[n.s().ParentID]; p != nil; p = c.nodes[p.s().ParentID] {
		if slices.Contains(chain, p) {
			return nil
		}
		chain = append(chain, p)
	}
	slices.Reverse(chain)
	return chain
}
