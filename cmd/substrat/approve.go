package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/substrat/substrat/internal/termtext"
	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
)

// ApproveCmd answers an approval request with yes.
type ApproveCmd struct {
	ID       string `arg:"" help:"The request's id (from substrat inbox or substrat approvals)."`
	Reason   string `help:"Why, for the record."`
	Remember string `help:"A rule to allow from now on for this agent, such as 'Bash(git *)'." placeholder:"RULE"`
}

// Run allows the request.
func (c *ApproveCmd) Run(g *Globals) error {
	return answer(g, api.AnswerParams{ID: c.ID, Allow: true, Reason: c.Reason, Remember: c.Remember})
}

// DenyCmd answers an approval request with no.
type DenyCmd struct {
	ID       string `arg:"" help:"The request's id (from substrat inbox or substrat approvals)."`
	Reason   string `help:"Why: the agent sees it."`
	Remember string `help:"A rule to deny from now on for this agent, such as 'Bash(rm *)'." placeholder:"RULE"`
}

// Run denies the request.
func (c *DenyCmd) Run(g *Globals) error {
	return answer(g, api.AnswerParams{ID: c.ID, Allow: false, Reason: c.Reason, Remember: c.Remember})
}

func answer(g *Globals, p api.AnswerParams) error {
	res, err := call(g, api.ApprovalAnswer, p)
	if err != nil {
		return err
	}
	if g.JSON {
		res.Input = plainInput(res.Input)
		return printJSON(res)
	}
	fmt.Printf("%s %s: %s %s\n", res.Answer, res.ID, termtext.Lines(res.Tool), api.InputSummary(res.Input, 100))
	if res.Remember != "" {
		fmt.Printf("remembered for the agent: %s\n", res.Remember)
	}
	return nil
}

// ApprovalsCmd lists the requests that wait for an answer, or shows one.
type ApprovalsCmd struct {
	List ApprovalsListCmd `cmd:"" default:"withargs" help:"List the requests that wait (the default); inputs abbreviated."`
	Show ApprovalsShowCmd `cmd:"" help:"Show one request with its whole input, the parts of its command and the suggested rule."`
}

// ApprovalsListCmd lists pending approval requests.
type ApprovalsListCmd struct{}

// Run lists pending approval requests, each input abbreviated to its
// first line and how much more there is.
func (ApprovalsListCmd) Run(g *Globals) error {
	list, err := call(g, api.ApprovalList, struct{}{})
	if err != nil {
		return err
	}
	if g.JSON {
		for i := range list {
			list[i].Input = plainInput(list[i].Input)
		}
		return printJSON(list)
	}
	if len(list) == 0 {
		fmt.Println("no approval request waits")
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tAGENT\tAPPROVER\tUNTIL\tTOOL")
	for _, a := range list {
		approver := a.Approver
		if approver != fsstore.User {
			approver = "parent"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s %s\n", a.ID, a.Agent, approver, a.Deadline.Local().Format("15:04:05"), a.Tool, api.InputSummary(a.Input, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Println("(substrat approvals show ID prints a whole input)")
	return nil
}

// ApprovalsShowCmd shows one approval request whole.
type ApprovalsShowCmd struct {
	ID string `arg:"" help:"The request's id (from substrat approvals or substrat inbox)."`
}

// Run prints the request: who asks what, its state, the whole input as
// one line of JSON (characters that hide text escaped), and for a Bash
// command its parts as the rules see them.
func (c *ApprovalsShowCmd) Run(g *Globals) error {
	d, err := call(g, api.ApprovalShow, api.ShowApprovalParams{ID: c.ID})
	if err != nil {
		return err
	}
	if g.JSON {
		d.Input = plainInput(d.Input)
		return printJSON(d)
	}
	fmt.Print(approvalDetailText(d))
	return nil
}

// approvalDetailText is what approvals show prints for d.
func approvalDetailText(d api.ApprovalDetail) string {
	var b strings.Builder
	row := func(k, v string) { fmt.Fprintf(&b, "%-10s %s\n", k, v) }
	row("request", d.ID)
	row("agent", d.Agent)
	row("tool", d.Tool)
	if d.ToolUseID != "" {
		row("tool use", d.ToolUseID)
	}
	approver := d.Approver
	if approver != fsstore.User {
		approver = "parent (" + approver + ")"
	}
	row("approver", approver)
	row("requested", d.RequestedAt.Local().Format(time.DateTime))
	if d.Pending() {
		row("state", "pending until "+d.Deadline.Local().Format(time.DateTime))
	} else {
		row("state", fmt.Sprintf("%s by %s at %s%s", d.Answer, d.By, d.AnsweredAt.Local().Format(time.DateTime), reasonIn(quoteIf(d.Reason))))
		if d.Remember != "" {
			row("remember", d.Remember)
		}
	}
	switch {
	case d.TooLong:
		row("rule", fmt.Sprintf("none can be remembered: the input is larger than the %d bytes an approval message shows", api.MaxApprovalInput))
	case d.Rule != "":
		row("rule", d.Rule+" (suggested)")
	default:
		row("rule", "none suggested")
	}
	if len(d.Commands) > 0 {
		b.WriteString("commands, as the rules see them:\n")
		for _, p := range d.Commands {
			fmt.Fprintf(&b, "  %s\n", strconv.QuoteToGraphic(p))
		}
	}
	fmt.Fprintf(&b, "input (%d bytes of JSON, whole):\n%s\n", d.Size, api.InputText(d.Input))
	return b.String()
}

// plainInput returns an input as the same JSON without the HTML escapes
// (\u003e for >) that the store and the wire may have put in it, and
// with the characters that hide text escaped (api.InputText).
func plainInput(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return raw
	}
	return json.RawMessage(api.InputText(raw))
}

// quoteIf quotes a non-empty text an agent may have written, escapes
// and all.
func quoteIf(s string) string {
	if s == "" {
		return ""
	}
	return strconv.QuoteToGraphic(s)
}

func reasonIn(r string) string {
	if r == "" {
		return ""
	}
	return " (" + r + ")"
}
