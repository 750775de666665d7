package main

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/substrat/substrat/supervisor/api"
)

// SessionCmd groups the session commands.
type SessionCmd struct {
	List    SessionListCmd    `cmd:"" help:"List provider sessions."`
	Suspend SessionSuspendCmd `cmd:"" help:"Save a live session to its state blob and stop it."`
	Resume  SessionResumeCmd  `cmd:"" help:"Restore a session now instead of on its next turn."`
	Delete  SessionDeleteCmd  `cmd:"" help:"Forget a session's provider state; the next turn starts afresh."`
}

// SessionListCmd lists sessions.
type SessionListCmd struct{}

// Run lists.
func (SessionListCmd) Run(g *Globals) error {
	out, err := call(g, api.SessionList, struct{}{})
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(out)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tPROVIDER\tSTATE\tLIVE\tSAVED\tPROVIDER SESSION")
	for _, s := range out {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%v\t%s\n", s.Path, s.Provider, s.SessionState, s.Live, s.HasStateBlob, s.ProviderSessionID)
	}
	return tw.Flush()
}

// sessionRef is the argument of the session commands on one agent.
type sessionRef struct {
	Ref string `arg:"" predictor:"agent" help:"The agent: a name, a path or an id."`
}

func (c *sessionRef) run(g *Globals, m api.Method[api.RefParams, api.AgentInfo], verb string) error {
	a, err := call(g, m, api.RefParams{Ref: c.Ref})
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(a)
	}
	fmt.Printf("%s the session of %s: now %s\n", verb, a.Path, a.SessionState)
	return nil
}

// SessionSuspendCmd suspends a session.
type SessionSuspendCmd struct{ sessionRef }

// Run suspends.
func (c *SessionSuspendCmd) Run(g *Globals) error {
	return c.run(g, api.SessionSuspend, "suspended")
}

// SessionResumeCmd resumes a session.
type SessionResumeCmd struct{ sessionRef }

// Run resumes.
func (c *SessionResumeCmd) Run(g *Globals) error { return c.run(g, api.SessionResume, "resumed") }

// SessionDeleteCmd forgets a session's provider state.
type SessionDeleteCmd struct {
	sessionRef
	confirmFlag
}

// Run deletes, once confirmed.
func (c *SessionDeleteCmd) Run(g *Globals) error {
	if err := c.confirm(g, "session delete", "forgets the provider session of "+c.Ref+": its next turn starts a new conversation"); err != nil {
		return err
	}
	return c.run(g, api.SessionDelete, "deleted")
}
