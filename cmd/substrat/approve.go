package main

import (
	"fmt"
	"os"
	"text/tabwriter"

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
	var res fsstore.Approval
	if err := g.call(api.MethodApprovalAnswer, p, &res); err != nil {
		return err
	}
	if g.JSON {
		return printJSON(res)
	}
	fmt.Printf("%s %s: %s %s\n", res.Answer, res.ID, res.Tool, clipText(string(res.Input), 100))
	if res.Remember != "" {
		fmt.Printf("remembered for the agent: %s\n", res.Remember)
	}
	return nil
}

// ApprovalsCmd lists the requests that wait for an answer.
type ApprovalsCmd struct{}

// Run lists pending approval requests.
func (ApprovalsCmd) Run(g *Globals) error {
	var list []api.PendingApproval
	if err := g.call(api.MethodApprovalList, nil, &list); err != nil {
		return err
	}
	if g.JSON {
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s %s\n", a.ID, a.Agent, approver, a.Deadline.Local().Format("15:04:05"), a.Tool, clipText(string(a.Input), 60))
	}
	return tw.Flush()
}

// clipText cuts s to at most n runes.
func clipText(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

func reasonIn(r string) string {
	if r == "" {
		return ""
	}
	return " (" + r + ")"
}
