package main

import (
	"fmt"
	"strings"

	"github.com/substrat/substrat/internal/termtext"
	"github.com/substrat/substrat/supervisor/api"
)

// InboxCmd shows messages to USER.
type InboxCmd struct {
	All    bool `help:"Also show messages already read."`
	Peek   bool `help:"Leave the messages shown unread."`
	Follow bool `short:"f" help:"Stream what needs you as it happens (messages, approval requests, gated, parked and unparked agents, completed roots), across daemon restarts, until interrupted; --json prints one notification object a line."`
}

// Run prints the messages, then marks those it showed read (a message
// that arrived meanwhile stays unread).
func (c *InboxCmd) Run(g *Globals) error {
	if c.Follow {
		return followInbox(g)
	}
	out, err := call(g, api.InboxList, api.InboxListParams{All: c.All})
	if err != nil {
		return err
	}
	if err := printInbox(g, out); err != nil || c.Peek {
		return err
	}
	var shown []string
	for _, m := range out {
		if m.Unread {
			shown = append(shown, m.ID)
		}
	}
	if len(shown) == 0 {
		return nil
	}
	_, err = call(g, api.InboxRead, api.InboxReadParams{IDs: shown})
	return err
}

func printInbox(g *Globals, out []api.InboxMessage) error {
	if g.JSON {
		return printJSON(out)
	}
	if len(out) == 0 {
		fmt.Println("no new messages")
		return nil
	}
	for _, m := range out {
		mark := " "
		if m.Unread {
			mark = "*"
		}
		// The text is an agent's: shown, not obeyed (termtext.Lines).
		fmt.Printf("%s %s  from %s (%s)\n    %s\n", mark, m.SentAt.Local().Format("2006-01-02 15:04:05"), termtext.Lines(m.FromName), termtext.Lines(m.Kind),
			strings.ReplaceAll(termtext.Lines(strings.TrimRight(m.Text, "\n")), "\n", "\n    "))
	}
	return nil
}
