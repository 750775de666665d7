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
	Follow bool `short:"f" help:"Stream what needs you as it happens (messages, approval requests, gated, parked and unparked agents, completed roots), across daemon restarts, until interrupted; --json prints one notification object a line."`
}

// Run prints the messages and marks them read.
func (c *InboxCmd) Run(g *Globals) error {
	if c.Follow {
		return followInbox(g)
	}
	var out []api.InboxMessage
	if err := g.call(api.MethodInboxList, map[string]bool{"all": c.All}, &out); err != nil {
		return err
	}
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
