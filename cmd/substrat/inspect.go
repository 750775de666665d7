package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/internal/termtext"
	"github.com/substrat/substrat/supervisor"
	"github.com/substrat/substrat/supervisor/api"
)

// AgentInspectCmd shows one agent.
type AgentInspectCmd struct {
	Ref string `arg:"" predictor:"agent" help:"The agent: a name, a path (root/child) or an id."`
}

// Run prints the agent.
func (c *AgentInspectCmd) Run(g *Globals) error {
	res, err := call(g, api.AgentInspect, api.RefParams{Ref: c.Ref})
	if err != nil {
		if notFound(err) {
			// Not live: an archived agent, read from archive/.
			if found, aerr := inspectArchived(g, c.Ref); found {
				return aerr
			}
		}
		return err
	}
	if g.JSON {
		return printJSON(res)
	}
	a, s := res.Agent, res.Session
	tw := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			// Names, reasons, reminders and instructions can be an
			// agent's text: shown on one row, never obeyed.
			fmt.Fprintf(tw, "%s:\t%s\n", k, termtext.Row(v))
		}
	}
	if a.DiskInvalid != "" {
		row("WARNING", "session.json on disk is invalid and was not adopted: "+a.DiskInvalid+
			" (the daemon keeps the last good state and leaves the file alone until you fix it)")
	}
	row("name", a.Name)
	row("path", a.Path)
	row("id", a.ID)
	row("parent", a.ParentID)
	row("provider", a.Provider)
	row("model", a.Model)
	if s != nil {
		row("workspace", s.Workspace)
		row("works in", s.WorkDir)
		row("permissions", supervisor.PermissionSummary(s))
		if s.Limits != nil {
			row("limits", s.Limits.String())
		}
		row("limits in force", limitsInForce(res.LimitsInForce))
		row("executor", executorShown(s.Executor))
	}
	row("state", fmt.Sprintf("%s (session %s)", shownState(a), a.SessionState))
	if a.Parked != nil {
		row("parked", fmt.Sprintf("until %s: %s (substrat agent wake %s ends it now)", a.Parked.Until.Local().Format("2006-01-02 15:04:05"), a.Parked.Reason, a.Path))
	}
	row("reason", a.StateReason)
	row("provider session", s.ProviderSessionID)
	row("children", strings.Join(a.Children, ", "))
	row("pending messages", fmt.Sprint(res.Pending))
	for _, ap := range s.Approvals {
		state := "PENDING"
		if !ap.Pending() {
			state = ap.Answer + " by " + ap.By + reasonIn(ap.Reason)
			if ap.Remember != "" {
				state += ", remembered " + ap.Remember
			}
		}
		row("approval "+ap.ID, fmt.Sprintf("%s %s: %s", ap.Tool, api.InputSummary(ap.Input, 80), state))
	}
	row("turns", fmt.Sprint(a.Counters.Turns))
	if w := a.Counters.ContextWindow; w > 0 {
		row("context", fmt.Sprintf("%d of %d tokens (%d%%)", a.Counters.ContextTokens, w, a.Counters.ContextTokens*100/w))
	}
	row("tokens in/out", fmt.Sprintf("%d/%d (subtree %d/%d)", a.Counters.InputTokens, a.Counters.OutputTokens, a.Subtree.InputTokens, a.Subtree.OutputTokens))
	row("cost", fmt.Sprintf("$%.4f (subtree $%.4f)", a.Counters.CostUSD, a.Subtree.CostUSD))
	if s.Budget != nil {
		row("budget", s.Budget.String())
	}
	if s.Gated {
		row("gated", fmt.Sprintf("yes (%d permits)", s.Permits))
	}
	row("pool", s.Pool)
	row("waiting for", strings.Join(s.WaitingFor, ", "))
	for _, r := range s.Reminders {
		row("reminder", fmt.Sprintf("%s at %s: %s", r.ID, r.Due.Local().Format("15:04:05"), r.Reason))
	}
	for _, sub := range s.Subscriptions {
		row("subscription", fmt.Sprintf("%s: %s %s->%s", sub.ID, sub.Target, sub.From, sub.To))
	}
	row("last event", fmt.Sprint(s.LastSeq))
	row("instructions", oneLine(s.Instructions, 100))
	row("dir", a.Dir)
	return tw.Flush()
}

// limitsInForce lists the limits a process of the agent gets (zero: none
// of that kind), "" if none at all.
func limitsInForce(l fsstore.Limits) string {
	var parts []string
	if l.MemoryBytes > 0 {
		parts = append(parts, "memory "+fsstore.FormatBytes(l.MemoryBytes))
	}
	if l.Pids > 0 {
		parts = append(parts, fmt.Sprintf("pids %d", l.Pids))
	}
	if l.CPUWeight > 0 {
		parts = append(parts, fmt.Sprintf("cpu weight %d", l.CPUWeight))
	}
	return strings.Join(parts, ", ")
}

func oneLine(s string, max int) string {
	s = strings.ReplaceAll(s, "\n", "\\n")
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}
