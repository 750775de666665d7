package top

import (
	"strings"

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

// tree is the agents of a snapshot, indexed.
type tree struct {
	byID  map[string]*api.AgentInfo
	kids  map[string][]string // ids of each agent's children, in list order
	roots []string            // agents whose parent is not in the tree, in list order
}

func newTree(agents []api.AgentInfo) tree {
	t := tree{byID: make(map[string]*api.AgentInfo, len(agents)), kids: map[string][]string{}}
	for i := range agents {
		t.byID[agents[i].ID] = &agents[i]
	}
	for i := range agents {
		a := &agents[i]
		if _, ok := t.byID[a.ParentID]; ok && a.ParentID != a.ID {
			t.kids[a.ParentID] = append(t.kids[a.ParentID], a.ID)
		} else {
			t.roots = append(t.roots, a.ID)
		}
	}
	return t
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
