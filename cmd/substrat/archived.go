package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
)

// AgentRestoreCmd undoes an archive.
type AgentRestoreCmd struct {
	Ref string `arg:"" help:"The archived agent: its id, or a name only one archived agent has (substrat agent list --archived)."`
}

// Run asks the daemon to move the agent and its archived descendants back
// into agents/.
func (c *AgentRestoreCmd) Run(g *Globals) error {
	out, err := call(g, api.AgentRestore, api.RefParams{Ref: c.Ref})
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(out)
	}
	for _, a := range out {
		fmt.Printf("restored %s -> %s (%s)\n", a.Path, a.Dir, a.AgentState)
	}
	return nil
}

// archivedStore opens the home to read archive/ (no daemon needed: the
// files are read, never changed).
func archivedStore(g *Globals) (*fsstore.Store, error) {
	if _, err := os.Stat(g.Home); err != nil {
		return nil, fail(fmt.Sprintf("no home at %s: %v", g.Home, err), "give --home")
	}
	return fsstore.Open(g.Home, fsstore.Options{})
}

// listArchived prints the agents in archive/.
func listArchived(g *Globals) error {
	store, err := archivedStore(g)
	if err != nil {
		return err
	}
	list, bad, err := store.ListArchived()
	if err != nil {
		return err
	}
	if g.JSON {
		if list == nil {
			list = []*fsstore.ArchivedAgent{}
		}
		return printJSON(list)
	}
	if len(list) == 0 && len(bad) == 0 {
		fmt.Println("no archived agents")
		return nil
	}
	byID := map[string]*fsstore.Session{}
	for _, a := range list {
		byID[a.Session.ID] = a.Session
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tSTATE\tTURNS\tARCHIVED\tID")
	for _, a := range list {
		s := a.Session
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", archivedPath(s, byID), s.AgentState, s.Counters.Turns,
			a.ArchivedAt.Local().Format("2006-01-02 15:04"), s.ID)
	}
	tw.Flush()
	for _, f := range bad {
		fmt.Printf("UNREADABLE %s: %s\n", f.Path, f.Detail)
	}
	return nil
}

// archivedPath is an archived agent's path among the archived agents
// (its archived ancestors' names).
func archivedPath(s *fsstore.Session, byID map[string]*fsstore.Session) string {
	parts := []string{s.Name}
	seen := map[string]bool{s.ID: true}
	for p := byID[s.ParentID]; p != nil && !seen[p.ID]; p = byID[p.ParentID] {
		seen[p.ID] = true
		parts = append([]string{p.Name}, parts...)
	}
	return strings.Join(parts, "/")
}

// inspectArchived prints the archived agent ref (an id, or a name one
// archived agent has); found false if there is none.
func inspectArchived(g *Globals, ref string) (found bool, err error) {
	a, all, err := findArchived(g, ref)
	if a == nil {
		return err != nil, err
	}
	byID := map[string]*fsstore.Session{}
	for _, a := range all {
		byID[a.Session.ID] = a.Session
	}
	if g.JSON {
		return true, printJSON(struct {
			Archived bool `json:"archived"`
			*fsstore.ArchivedAgent
		}{true, a})
	}
	s := a.Session
	tw := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("ARCHIVED", fmt.Sprintf("at %s; bring it back with 'substrat agent restore %s'", a.ArchivedAt.Local().Format("2006-01-02 15:04:05"), s.ID))
	row("name", s.Name)
	row("path", archivedPath(s, byID))
	row("id", s.ID)
	row("parent", s.ParentID)
	row("provider", s.Provider)
	row("model", s.Model)
	row("workspace", s.Workspace)
	row("works in", s.WorkDir)
	row("state", fmt.Sprintf("%s (session %s)", s.AgentState, s.SessionState))
	row("reason", s.StateReason)
	row("turns", fmt.Sprint(s.Counters.Turns))
	row("tokens in/out", fmt.Sprintf("%d/%d", s.Counters.InputTokens, s.Counters.OutputTokens))
	row("cost", fmt.Sprintf("$%.4f", s.Counters.CostUSD))
	row("last event", fmt.Sprint(s.LastSeq))
	row("instructions", oneLine(s.Instructions, 100))
	row("dir", a.Dir)
	return true, tw.Flush()
}

// findArchived returns the archived agent ref (an id, or a name one
// archived agent has): nil and no error if there is none, an error if
// several have the name; and all the archived agents.
func findArchived(g *Globals, ref string) (a *fsstore.ArchivedAgent, all []*fsstore.ArchivedAgent, err error) {
	store, err := archivedStore(g)
	if err != nil {
		return nil, nil, err
	}
	list, _, err := store.ListArchived()
	if err != nil {
		return nil, nil, err
	}
	var match []*fsstore.ArchivedAgent
	for _, a := range list {
		if a.Session.ID == ref || a.Session.Name == ref {
			match = append(match, a)
		}
	}
	switch len(match) {
	case 0:
		return nil, list, nil
	case 1:
		return match[0], list, nil
	}
	ids := make([]string, len(match))
	for i, a := range match {
		ids[i] = a.Session.ID
	}
	return nil, list, fail(fmt.Sprintf("%d archived agents are named %q: %s", len(match), ref, strings.Join(ids, ", ")), "use the id")
}

// notRunning reports whether err says that no daemon runs.
func notRunning(err error) bool {
	var ee *exitError
	return errors.As(err, &ee) && ee.code == 3
}

// notFound reports whether err is the daemon's "no such agent".
func notFound(err error) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Code == api.CodeNotFound
}
