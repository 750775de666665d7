package main

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/substrat/substrat/internal/termtext"
	"github.com/substrat/substrat/supervisor/api"
)

// The states agent list shows (the daemon says which holds).
var listStates = api.States

// listOptions are agent list's filters, page and output format. The
// daemon filters and pages (agent.query).
type listOptions struct {
	Ref      string   `arg:"" optional:"" predictor:"agent" help:"Only this agent and its subtree (a name, a path or an id)."`
	State    []string `help:"Only agents in these states (repeat, or comma-separated): IDLE, BUSY, WAITING, PARKED, GATED, OVER-BUDGET, FAILED, TERMINATED." placeholder:"STATE"`
	Provider []string `help:"Only agents of these providers (repeat, or comma-separated)." predictor:"provider" placeholder:"NAME"`
	Limit    int      `help:"Show at most N agents (0: all); the rest come with --after." placeholder:"N" default:"0"`
	After    string   `help:"Start after this agent (the id a cut list names), in tree order." placeholder:"ID"`
	Output   string   `short:"o" help:"Output format: tree (the default), wide (more columns: provider, model, pending, budget, pool, workspace, executor, why) or json." enum:"tree,wide,json" default:"tree" placeholder:"FORMAT"`
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
	if o.Limit < 0 {
		return fmt.Errorf("--limit %d: a limit is 0 (all) or more", o.Limit)
	}
	return nil
}

// query asks the daemon for the page of agents the options select.
func (o *listOptions) query(g *Globals) (api.ListPage, error) {
	if o.Output == "json" {
		g.JSON = true
	}
	page, err := call(g, api.AgentQuery, api.ListParams{Ref: o.Ref, States: splitList(o.State), Providers: splitList(o.Provider),
		Limit: o.Limit, After: o.After})
	return page, err
}

// more says on stderr how to read the rest of a cut list: the same
// command, after the last agent shown.
func (o *listOptions) more(page api.ListPage) {
	if page.Next == "" {
		return
	}
	cmd := "substrat agent list"
	if o.Ref != "" {
		cmd += " " + quoteArg(o.Ref)
	}
	if s := splitList(o.State); len(s) > 0 {
		cmd += " --state " + quoteArg(strings.Join(s, ","))
	}
	if p := splitList(o.Provider); len(p) > 0 {
		cmd += " --provider " + quoteArg(strings.Join(p, ","))
	}
	fmt.Fprintf(os.Stderr, "%d of %d agents shown; more: %s --limit %d --after %s\n", len(page.Agents), page.Total, termtext.Row(cmd), o.Limit, page.Next)
}

// quoteArg quotes s for a shell if it needs it.
func quoteArg(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./,:@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// listed returns the agents with their states, as the daemon gave them.
func listed(list []api.AgentInfo) []listedAgent {
	out := make([]listedAgent, 0, len(list))
	for _, a := range list {
		st := cmp.Or(a.State, api.StateOf(&a))
		out = append(out, listedAgent{a, st, why(&a, st)})
	}
	return out
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
		head = "AGENT\tSTATE\tSESSION\tTURNS\tTOKENS IN/OUT\tCOST\tPROVIDER\tMODEL\tPENDING\tBUDGET\tPOOL\tWORKSPACE\tEXECUTOR\tID\tWHY"
	}
	fmt.Fprintln(tw, head)
	var walk func(id, prefix, branch string)
	walk = func(id, prefix, branch string) {
		a := byID[id]
		name := a.Name
		if branch == "" {
			name = a.Path
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%d\t%d/%d\t$%.4f", prefix+branch, termtext.Row(name), a.State, a.SessionState,
			a.Counters.Turns, a.Counters.InputTokens, a.Counters.OutputTokens, a.Counters.CostUSD)
		if wide {
			fmt.Fprintf(tw, "\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", termtext.Row(a.Provider), termtext.Row(cmp.Or(a.Model, "-")), a.Pending, budgetShown(a.AgentInfo),
				termtext.Row(cmp.Or(a.Pool, "-")), termtext.Row(cmp.Or(a.Workspace, "-")), termtext.Row(cmp.Or(a.Executor, "local")), a.ID, termtext.Row(cmp.Or(oneLine(a.Why, 100), "-")))
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
func why(a *api.AgentInfo, st string) string {
	switch st {
	case api.StateOverBudget:
		if p := a.OverBudget; p != nil {
			return fmt.Sprintf("over the budget of %s (%s): %d tokens, $%.4f used", p.Path, p.Budget.String(),
				p.Subtree.InputTokens+p.Subtree.OutputTokens, p.Subtree.CostUSD)
		}
	case api.StateFailed:
		return plural(a.Failing, "failed turn") + " in a row, retried with backoff"
	case api.StateGated:
		return cmp.Or(a.StateReason, "gated: turns wait for 'substrat agent permit' or 'ungate'")
	case api.StateParked:
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
