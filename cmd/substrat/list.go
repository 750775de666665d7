package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
)

// The states agent list shows, in the order of what needs a person
// first: an agent shows the first that holds.
const (
	stateTerminated = "TERMINATED"  // ended; archive it to remove it
	stateOverBudget = "OVER-BUDGET" // its subtree, or an ancestor's, spent past a budget
	stateGated      = "GATED"       // no turn starts until permitted or ungated
	stateParked     = "PARKED"      // waits for its provider's usage or rate limit to reset
	stateFailed     = "FAILED"      // its last turn failed; retried with backoff
	stateBusy       = "BUSY"        // a turn runs
	stateWaiting    = "WAITING"     // for a reply, or for an approval
	stateIdle       = "IDLE"
)

var listStates = []string{stateIdle, stateBusy, stateWaiting, stateParked, stateGated, stateOverBudget, stateFailed, stateTerminated}

// listOptions are agent list's filters and output format.
type listOptions struct {
	Ref      string   `arg:"" optional:"" predictor:"agent" help:"Only this agent and its subtree (a name, a path or an id)."`
	State    []string `help:"Only agents in these states (repeat, or comma-separated): IDLE, BUSY, WAITING, PARKED, GATED, OVER-BUDGET, FAILED, TERMINATED." placeholder:"STATE"`
	Provider []string `help:"Only agents of these providers (repeat, or comma-separated)." predictor:"provider" placeholder:"NAME"`
	Output   string   `short:"o" help:"Output format: tree (the default), wide (more columns: provider, model, pending, budget, pool, workspace, why) or json." enum:"tree,wide,json" default:"tree" placeholder:"FORMAT"`
}

// listedAgent is an agent as agent list shows it: what the daemon says,
// and the state in one word (listStates).
type listedAgent struct {
	api.AgentInfo
	State string `json:"state"`
	// Why says what holds it in that state, if anything does.
	Why string `json:"why,omitempty"`
}

// Validate refuses an unknown --state before the daemon is asked (kong
// calls it after parsing: a usage error).
func (o *listOptions) Validate() error {
	for _, s := range splitList(o.State) {
		if !slices.Contains(listStates, strings.ToUpper(s)) {
			return fmt.Errorf("unknown state %q: a state is one of %s", s, strings.Join(listStates, ", "))
		}
	}
	return nil
}

// filter returns the agents of list that the options select, with their
// state, parents before children as the daemon sent them.
func (o *listOptions) filter(g *Globals, list []api.AgentInfo) ([]listedAgent, error) {
	if o.Output == "json" {
		g.JSON = true
	}
	states := map[string]bool{}
	for _, s := range splitList(o.State) {
		states[strings.ToUpper(s)] = true
	}
	providers := map[string]bool{}
	for _, p := range splitList(o.Provider) {
		providers[p] = true
	}
	var root string
	if o.Ref != "" {
		var res api.InspectResult
		if err := g.call(api.MethodAgentInspect, map[string]string{"ref": o.Ref}, &res); err != nil {
			return nil, err
		}
		root = res.Agent.ID
	}
	ids := byID(list)
	out := []listedAgent{}
	for _, a := range listed(list) {
		switch {
		case len(states) > 0 && !states[a.State]:
		case len(providers) > 0 && !providers[a.Provider]:
		case root != "" && !within(&a.AgentInfo, root, ids):
		default:
			out = append(out, a)
		}
	}
	return out, nil
}

// listed returns the agents with their states.
func listed(list []api.AgentInfo) []listedAgent {
	byID := byID(list)
	out := make([]listedAgent, 0, len(list))
	for _, a := range list {
		st := agentState(&a, byID)
		out = append(out, listedAgent{a, st, why(&a, st, byID)})
	}
	return out
}

func byID(list []api.AgentInfo) map[string]*api.AgentInfo {
	m := make(map[string]*api.AgentInfo, len(list))
	for i := range list {
		m[list[i].ID] = &list[i]
	}
	return m
}

// drawTree renders agents (parents before children) as agent list does.
func drawTree(list []api.AgentInfo) string {
	var o listOptions
	return o.table(listed(list))
}

// splitList splits repeated, comma-separated values.
func splitList(in []string) []string {
	var out []string
	for _, v := range in {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// within reports whether a is root or one of its descendants.
func within(a *api.AgentInfo, root string, byID map[string]*api.AgentInfo) bool {
	for depth := 0; a != nil && depth < 1000; depth++ {
		if a.ID == root {
			return true
		}
		a = byID[a.ParentID]
	}
	return false
}

// agentState is the one word that says most about a: the first of
// listStates' order that holds.
func agentState(a *api.AgentInfo, byID map[string]*api.AgentInfo) string {
	switch {
	case a.AgentState == fsstore.AgentTerminated:
		return stateTerminated
	case overBudget(a, byID) != nil:
		return stateOverBudget
	case a.Gated:
		return stateGated
	case a.Parked != nil:
		return stateParked
	case a.Failing > 0:
		return stateFailed
	case a.AgentState == fsstore.AgentBusy:
		return stateBusy
	case a.AgentState == fsstore.AgentWaiting:
		return stateWaiting
	}
	return stateIdle
}

// overBudget returns the agent, a or an ancestor, whose budget a's
// spending is over, or nil.
func overBudget(a *api.AgentInfo, byID map[string]*api.AgentInfo) *api.AgentInfo {
	for depth := 0; a != nil && depth < 1000; depth++ {
		if a.Budget.Exceeded(a.Subtree) {
			return a
		}
		a = byID[a.ParentID]
	}
	return nil
}

// none is what agent list prints when it has no agent to show.
func (o *listOptions) none(all int) string {
	if all == 0 {
		return "no agents; create one with 'substrat agent create NAME'"
	}
	return fmt.Sprintf("no agent matches (%d agents in all; 'substrat agent list' shows them)", all)
}

// table renders agents (parents before children) as a tree, with more
// columns for -o wide. An agent whose parent is filtered out is drawn
// as a root, under its path.
func (o *listOptions) table(list []listedAgent) string {
	byID := map[string]listedAgent{}
	kids := map[string][]string{}
	var roots []string
	for _, a := range list {
		byID[a.ID] = a
	}
	for _, a := range list {
		if _, ok := byID[a.ParentID]; ok {
			kids[a.ParentID] = append(kids[a.ParentID], a.ID)
		} else {
			roots = append(roots, a.ID)
		}
	}
	wide := o.Output == "wide"
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 2, 2, ' ', 0)
	head := "AGENT\tSTATE\tSESSION\tTURNS\tTOKENS IN/OUT\tCOST\tID"
	if wide {
		head = "AGENT\tSTATE\tSESSION\tTURNS\tTOKENS IN/OUT\tCOST\tPROVIDER\tMODEL\tPENDING\tBUDGET\tPOOL\tWORKSPACE\tID\tWHY"
	}
	fmt.Fprintln(tw, head)
	var walk func(id, prefix, branch string)
	walk = func(id, prefix, branch string) {
		a := byID[id]
		name := a.Name
		if branch == "" {
			name = a.Path
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%d\t%d/%d\t$%.4f", prefix+branch, name, a.State, a.SessionState,
			a.Counters.Turns, a.Counters.InputTokens, a.Counters.OutputTokens, a.Counters.CostUSD)
		if wide {
			fmt.Fprintf(tw, "\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", a.Provider, cmp.Or(a.Model, "-"), a.Pending, budgetShown(a.AgentInfo),
				cmp.Or(a.Pool, "-"), cmp.Or(a.Workspace, "-"), a.ID, cmp.Or(oneLine(a.Why, 100), "-"))
		} else {
			fmt.Fprintf(tw, "\t%s\n", a.ID)
		}
		next := prefix
		switch branch {
		case "├── ":
			next += "│   "
		case "└── ":
			next += "    "
		}
		for i, k := range kids[id] {
			br := "├── "
			if i == len(kids[id])-1 {
				br = "└── "
			}
			walk(k, next, br)
		}
	}
	for _, r := range roots {
		walk(r, "", "")
	}
	tw.Flush()
	return b.String()
}

// why says what holds a in its state st.
func why(a *api.AgentInfo, st string, byID map[string]*api.AgentInfo) string {
	switch st {
	case stateOverBudget:
		p := overBudget(a, byID)
		return fmt.Sprintf("over the budget of %s (%s): %d tokens, $%.4f used", p.Path, p.Budget.String(),
			p.Subtree.InputTokens+p.Subtree.OutputTokens, p.Subtree.CostUSD)
	case stateFailed:
		return plural(a.Failing, "failed turn") + " in a row, retried with backoff"
	case stateGated:
		return cmp.Or(a.StateReason, "gated: turns wait for 'substrat agent permit' or 'ungate'")
	case stateParked:
		return fmt.Sprintf("until %s: %s ('substrat agent wake %s' tries now)", a.Parked.Until.Local().Format("15:04:05"), a.Parked.Reason, a.Path)
	}
	return a.StateReason
}

// budgetShown is a budget and how much of it the subtree used.
func budgetShown(a api.AgentInfo) string {
	b := a.Budget
	switch {
	case b == nil:
		return "-"
	case b.Tokens > 0:
		return fmt.Sprintf("%d%% of %d tokens", (a.Subtree.InputTokens+a.Subtree.OutputTokens)*100/b.Tokens, b.Tokens)
	case b.CostUSD > 0:
		return fmt.Sprintf("%.0f%% of $%.4f", a.Subtree.CostUSD*100/b.CostUSD, b.CostUSD)
	}
	return "-"
}
