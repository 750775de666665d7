package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor"
)

// AgentCmd groups the agent commands.
type AgentCmd struct {
	Create    AgentCreateCmd    `cmd:"" help:"Create a root agent, or a child with --parent."`
	List      AgentListCmd      `cmd:"" help:"Show the agent tree."`
	Inspect   AgentInspectCmd   `cmd:"" help:"Show one agent in detail."`
	Send      AgentSendCmd      `cmd:"" help:"Send a message from USER and show the turn it starts."`
	Attach    AgentAttachCmd    `cmd:"" help:"Follow an agent's activity live."`
	Terminate AgentTerminateCmd `cmd:"" help:"End an agent (and with --recursive its subtree)."`
	Archive   AgentArchiveCmd   `cmd:"" help:"End an agent's subtree and move its directories to archive/."`
}

// AgentCreateCmd creates an agent.
type AgentCreateCmd struct {
	Name         string `arg:"" help:"The agent's name: no '/', no '..', no spaces, at most 64 bytes."`
	Provider     string `help:"Provider: script (default), claude, cursor-agent, openai." default:"script"`
	Model        string `help:"Model; for the script provider, a path to a model script."`
	Instructions string `help:"The agent's instructions (system prompt)."`
	Workspace    string `help:"Workspace to run in."`
	Parent       string `help:"Parent agent ref; without it the agent is a root."`
}

// Run creates the agent.
func (c *AgentCreateCmd) Run(g *Globals) error {
	var info supervisor.AgentInfo
	err := g.call("agent.create", supervisor.CreateParams{Name: c.Name, Provider: c.Provider, Model: c.Model,
		Instructions: c.Instructions, Workspace: c.Workspace, Parent: c.Parent}, &info)
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(info)
	}
	fmt.Printf("created %s (%s)\n  dir: %s\n", info.Path, info.ID, info.Dir)
	return nil
}

// AgentListCmd lists agents.
type AgentListCmd struct{}

// Run draws the tree.
func (AgentListCmd) Run(g *Globals) error {
	var list []supervisor.AgentInfo
	if err := g.call("agent.list", nil, &list); err != nil {
		return err
	}
	if g.JSON {
		return printJSON(list)
	}
	if len(list) == 0 {
		fmt.Println("no agents; create one with 'substrat agent create NAME'")
		return nil
	}
	fmt.Print(drawTree(list))
	return nil
}

// drawTree renders agents (parents before children) as a tree.
func drawTree(list []supervisor.AgentInfo) string {
	byID := map[string]supervisor.AgentInfo{}
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
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tSTATE\tSESSION\tTURNS\tTOKENS IN/OUT\tID")
	var walk func(id, prefix, branch string)
	walk = func(id, prefix, branch string) {
		a := byID[id]
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%d\t%d/%d\t%s\n", prefix+branch, a.Name, a.AgentState, a.SessionState,
			a.Counters.Turns, a.Counters.InputTokens, a.Counters.OutputTokens, a.ID)
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

// AgentInspectCmd shows one agent.
type AgentInspectCmd struct {
	Ref string `arg:"" help:"The agent: a name, a path (root/child) or an id."`
}

// Run prints the agent.
func (c *AgentInspectCmd) Run(g *Globals) error {
	var res supervisor.InspectResult
	if err := g.call("agent.inspect", map[string]string{"ref": c.Ref}, &res); err != nil {
		return err
	}
	if g.JSON {
		return printJSON(res)
	}
	a, s := res.Agent, res.Session
	tw := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("name", a.Name)
	row("path", a.Path)
	row("id", a.ID)
	row("parent", a.ParentID)
	row("provider", a.Provider)
	row("model", a.Model)
	row("state", fmt.Sprintf("%s (session %s)", a.AgentState, a.SessionState))
	row("reason", a.StateReason)
	row("provider session", s.ProviderSessionID)
	row("children", strings.Join(a.Children, ", "))
	row("pending messages", fmt.Sprint(res.Pending))
	row("turns", fmt.Sprint(a.Counters.Turns))
	row("tokens in/out", fmt.Sprintf("%d/%d (subtree %d/%d)", a.Counters.InputTokens, a.Counters.OutputTokens, a.Subtree.InputTokens, a.Subtree.OutputTokens))
	row("cost", fmt.Sprintf("$%.4f (subtree $%.4f)", a.Counters.CostUSD, a.Subtree.CostUSD))
	row("last event", fmt.Sprint(s.LastSeq))
	row("instructions", oneLine(s.Instructions, 100))
	row("dir", a.Dir)
	return tw.Flush()
}

func oneLine(s string, max int) string {
	s = strings.ReplaceAll(s, "\n", "\\n")
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}

// AgentSendCmd sends a message.
type AgentSendCmd struct {
	Ref     string `arg:"" help:"The agent: a name, a path or an id."`
	Message string `arg:"" help:"The message text."`
	NoWait  bool   `help:"Return once the message is stored, without waiting for the turn."`
}

// Run sends the message and streams the turn that takes it.
func (c *AgentSendCmd) Run(g *Globals) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cl, err := g.client(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	var res supervisor.SendResult
	err = cl.Stream(ctx, "agent.send", map[string]any{"ref": c.Ref, "text": c.Message, "wait": !c.NoWait},
		func(raw json.RawMessage) error {
			if g.JSON {
				fmt.Println(string(raw))
				return nil
			}
			var e struct {
				Type string         `json:"type"`
				Data provider.Chunk `json:"data"`
			}
			if json.Unmarshal(raw, &e) == nil && e.Type == "output" {
				fmt.Printf("[%s] %s\n", e.Data.Kind, strings.TrimRight(e.Data.Text, "\n"))
			}
			return nil
		}, &res)
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(res)
	}
	if res.Failed != "" {
		return fail("message "+res.MessageID+" was stored, but the turn failed: "+res.Failed, "the message stays in the inbox; send another message to retry")
	}
	if c.NoWait {
		fmt.Printf("message %s stored; it is delivered at %s's next turn\n", res.MessageID, c.Ref)
		return nil
	}
	fmt.Printf("message %s delivered\n", res.MessageID)
	return nil
}

// AgentAttachCmd follows one agent.
type AgentAttachCmd struct {
	Ref   string `arg:"" help:"The agent: a name, a path or an id."`
	Until string `help:"Exit after the first event of this type (e.g. turn_done)." placeholder:"TYPE"`
}

// Run streams the agent's events until interrupted.
func (c *AgentAttachCmd) Run(g *Globals) error {
	return follow(g, "agent.attach", map[string]string{"ref": c.Ref}, c.Until)
}

// AgentTerminateCmd ends agents.
type AgentTerminateCmd struct {
	Ref       string `arg:"" help:"The agent: a name, a path or an id."`
	Recursive bool   `short:"r" help:"Terminate the whole subtree, leaves first."`
}

// Run terminates.
func (c *AgentTerminateCmd) Run(g *Globals) error {
	var out []supervisor.AgentInfo
	if err := g.call("agent.terminate", supervisor.TerminateParams{Ref: c.Ref, Recursive: c.Recursive}, &out); err != nil {
		return err
	}
	if g.JSON {
		return printJSON(out)
	}
	if len(out) == 0 {
		fmt.Println("nothing to do: already terminated")
	}
	for _, a := range out {
		fmt.Printf("terminated %s (%s)\n", a.Path, a.ID)
	}
	return nil
}

// AgentArchiveCmd archives a subtree.
type AgentArchiveCmd struct {
	Ref string `arg:"" help:"The agent: a name, a path or an id."`
}

// Run archives.
func (c *AgentArchiveCmd) Run(g *Globals) error {
	var out []supervisor.AgentInfo
	if err := g.call("agent.archive", map[string]string{"ref": c.Ref}, &out); err != nil {
		return err
	}
	if g.JSON {
		return printJSON(out)
	}
	for _, a := range out {
		fmt.Printf("archived %s -> %s\n", a.Path, a.Dir)
	}
	return nil
}
