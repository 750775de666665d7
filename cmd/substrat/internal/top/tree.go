package top

import (
	"slices"
	"strings"

	"github.com/substrat/substrat/internal/termtext"
	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
)

// row is one line of the tree as shown.
type row struct {
	a         *api.AgentInfo
	depth     int
	kids      int  // children shown or hidden
	collapsed bool // its children are hidden: its figures are the subtree's
}

// tree is the agents top knows, indexed. Each agent has its own
// allocation, so a row's pointer stays good while the agent is updated
// in place.
type tree struct {
	byID  map[string]*api.AgentInfo
	order []string            // every id, in the daemon's tree order; new ones at the end
	kids  map[string][]string // ids of each agent's children, in order
	roots []string            // agents whose parent is not in the tree, in order
}

func newTree(agents []api.AgentInfo) tree {
	t := tree{byID: make(map[string]*api.AgentInfo, len(agents)), order: make([]string, 0, len(agents))}
	for i := range agents {
		a := agents[i]
		visible(&a)
		if _, dup := t.byID[a.ID]; !dup {
			t.order = append(t.order, a.ID)
		}
		t.byID[a.ID] = &a
	}
	t.link()
	return t
}

// link rebuilds the children and roots from order, dropping the ids of
// agents gone.
func (t *tree) link() {
	t.kids, t.roots = map[string][]string{}, nil
	kept := t.order[:0]
	for _, id := range t.order {
		a := t.byID[id]
		if a == nil {
			continue
		}
		kept = append(kept, id)
		if _, ok := t.byID[a.ParentID]; ok && a.ParentID != a.ID {
			t.kids[a.ParentID] = append(t.kids[a.ParentID], a.ID)
		} else {
			t.roots = append(t.roots, a.ID)
		}
	}
	t.order = kept
}

// update puts a in the tree, in place if it is there, and reports
// whether the tree's shape changed (a new agent, a new parent or name).
func (t *tree) update(a api.AgentInfo) (shape bool) {
	visible(&a)
	old := t.byID[a.ID]
	if old == nil {
		t.byID[a.ID] = &a
		t.order = append(t.order, a.ID)
		return true
	}
	shape = old.ParentID != a.ParentID || old.Name != a.Name
	*old = a
	return shape
}

// visible escapes, in what top shows of an agent, whatever could drive
// the terminal (termtext.Row): names and reasons can be an agent's text.
func visible(a *api.AgentInfo) {
	for _, f := range []*string{&a.Name, &a.Path, &a.Provider, &a.Model, &a.StateReason, &a.DiskInvalid, &a.Workspace, &a.Pool, &a.Dir} {
		*f = termtext.Row(*f)
	}
	a.Children = slices.Clone(a.Children)
	for i := range a.Children {
		a.Children[i] = termtext.Row(a.Children[i])
	}
	if a.Parked != nil {
		p := *a.Parked
		p.Reason = termtext.Row(p.Reason)
		a.Parked = &p
	}
}

// remove takes agent id out of the tree (link it after).
func (t *tree) remove(id string) { delete(t.byID, id) }

// subtree returns id and the ids below it, as the tree knows them.
func (t *tree) subtree(id string) []string {
	out := []string{id}
	for i := 0; i < len(out) && i < len(t.byID); i++ {
		out = append(out, t.kids[out[i]]...)
	}
	return out
}

// ancestors returns the ids above id, nearest first.
func (t *tree) ancestors(id string) []string {
	var out []string
	for a := t.byID[id]; a != nil && len(out) < 1000; {
		p := t.byID[a.ParentID]
		if p == nil || p.ID == id {
			break
		}
		out = append(out, p.ID)
		a = p
	}
	return out
}

// rows flattens the tree depth first. Collapsed nodes hide their
// children. With a filter, a node shows if it or one of its descendants
// matches, and nothing is collapsed (the matches must be seen).
func (t tree) rows(collapsed map[string]bool, filter string) []row {
	filter = strings.ToLower(strings.TrimSpace(filter))
	var keep map[string]bool
	if filter != "" {
		keep = map[string]bool{}
		for _, id := range t.roots {
			t.mark(id, filter, keep)
		}
	}
	var out []row
	var walk func(id string, depth int)
	walk = func(id string, depth int) {
		a := t.byID[id]
		if a == nil || (keep != nil && !keep[id]) {
			return
		}
		r := row{a: a, depth: depth, kids: len(t.kids[id])}
		r.collapsed = keep == nil && collapsed[id] && r.kids > 0
		out = append(out, r)
		if r.collapsed {
			return
		}
		for _, c := range t.kids[id] {
			walk(c, depth+1)
		}
	}
	for _, id := range t.roots {
		walk(id, 0)
	}
	return out
}

// mark sets keep for id if it or a descendant matches filter, and reports
// whether it did.
func (t tree) mark(id, filter string, keep map[string]bool) bool {
	a := t.byID[id]
	if a == nil {
		return false
	}
	hit := matches(a, filter)
	for _, c := range t.kids[id] {
		if t.mark(c, filter, keep) {
			hit = true
		}
	}
	if hit {
		keep[id] = true
	}
	return hit
}

// matches reports whether an agent's name, path or state contains f.
func matches(a *api.AgentInfo, f string) bool {
	return strings.Contains(strings.ToLower(a.Name), f) || strings.Contains(strings.ToLower(a.Path), f) ||
		strings.Contains(strings.ToLower(stateOf(a)), f)
}

// stateOf is the one word that says most about an agent, in order of
// what needs a person first.
func stateOf(a *api.AgentInfo) string {
	switch {
	case a.AgentState == fsstore.AgentTerminated:
		return "ended"
	case a.Gated:
		return "gated"
	case a.Parked != nil:
		return "PARKED"
	case a.Failing > 0:
		return "failed"
	case a.AgentState == fsstore.AgentBusy:
		return "BUSY"
	case a.AgentState == fsstore.AgentWaiting:
		return "WAITING"
	case a.SessionState == fsstore.SessionSuspended:
		return "suspended"
	}
	return "IDLE"
}

// figures returns what a row shows of its counters: its own, or its
// subtree's when its children are hidden.
func (r row) figures() fsstore.Counters {
	if r.collapsed {
		return r.a.Subtree
	}
	return r.a.Counters
}
