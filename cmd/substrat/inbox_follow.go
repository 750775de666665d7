package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/substrat/substrat/internal/termtext"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/rpc"
)

// followInbox streams the notifications (inbox.follow) until interrupted:
// with --json one api.Notification a line, else one readable line each.
// When the daemon goes away (a restart), it connects again and resumes
// after the last message to USER it saw: none is lost or shown twice.
func followInbox(g *Globals) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cur := &followCursor{seen: map[string]bool{}}
	first, warned := true, false
	for wait := 100 * time.Millisecond; ; {
		up := false
		err := followOnce(ctx, g, cur, func() {
			if up {
				return
			}
			up = true
			if first || warned {
				fmt.Fprintln(os.Stderr, "substrat: following what needs you (Ctrl-C stops)")
			}
			first, warned, wait = false, false, 100*time.Millisecond
		})
		if ctx.Err() != nil {
			return nil
		}
		if first {
			return err // the daemon was never reached: say why
		}
		if !warned {
			fmt.Fprintf(os.Stderr, "substrat: lost the daemon (%v); reconnecting...\n", err)
			warned = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// followCursor is where a follow resumes: the time of the last message
// seen (or of the first hello), and the ids seen, to drop a message sent
// again on a reconnect.
type followCursor struct {
	since time.Time
	seen  map[string]bool
	order []string // of seen, oldest first: the set is bounded
}

const followSeenMax = 10000

// see records message id; it reports whether it was seen before.
func (c *followCursor) see(id string) bool {
	if c.seen[id] {
		return true
	}
	c.seen[id] = true
	if c.order = append(c.order, id); len(c.order) > followSeenMax {
		delete(c.seen, c.order[0])
		c.order = c.order[1:]
	}
	return false
}

// followOnce follows one connection, resuming from cur and moving it past
// each message shown; connected is called once the stream is up.
func followOnce(ctx context.Context, g *Globals, cur *followCursor, connected func()) error {
	cl, err := g.client(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	_, err = rpc.StreamRaw(ctx, cl, api.InboxFollow, api.FollowParams{Since: cur.since}, func(raw json.RawMessage) error {
		var n api.Notification
		if err := json.Unmarshal(raw, &n); err != nil {
			return err
		}
		connected()
		if n.Kind == api.NotifyHello {
			if cur.since.IsZero() {
				cur.since = n.Time
			}
			return nil
		}
		if n.MessageID != "" {
			if cur.see(n.MessageID) {
				return nil
			}
			if n.Time.After(cur.since) {
				cur.since = n.Time
			}
		}
		if g.JSON {
			return printJSONLine(raw)
		}
		fmt.Println(notificationLine(n))
		return nil
	})
	return err
}

// notificationLine is how a notification reads in the terminal; what an
// agent wrote has its control characters shown, not obeyed.
func notificationLine(n api.Notification) string {
	if n.Kind == api.NotifyDropped {
		return "[... notifications dropped: this reader fell behind; substrat inbox --all has every message ...]"
	}
	who := n.AgentPath
	if who == "" {
		who = n.From
	}
	text := strings.ReplaceAll(strings.TrimRight(termtext.Lines(n.Text), "\n"), "\n", "\n    ")
	line := fmt.Sprintf("%s %-9s %s", n.Time.Local().Format("2006-01-02 15:04:05"), n.Kind, termtext.Lines(who))
	if n.Until != nil {
		line += " until " + n.Until.Local().Format("2006-01-02 15:04:05")
	}
	return line + "\n    " + text
}
