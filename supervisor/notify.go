package supervisor

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
)

// Notifications.
//
// USER hears of what needs a person (api.Notification: a message reached
// USER, an approval request waits, an agent was gated, parked or
// unparked, a root completed) in two ways: the host runs notify_command
// (Settings.Notify) with the notification as JSON on its stdin, bounded
// and coalesced, never waiting for it; and the subscribers of
// api.NotifyTopic (inbox.follow) get it as a watch event. What the
// notification is about is already durable when it is sent: a message is
// in USER's inbox, a gate or a park is an event of the agent's log.

// notify sends n; it never blocks. Call it without c.mu held.
func (c *Core) notify(n api.Notification) {
	n.Version = 1
	if n.Time.IsZero() {
		n.Time = c.clock.Now().UTC()
	}
	n.Text = clip(n.Text, api.MaxNotifyText)
	c.mu.Lock()
	c.publishLocked(api.WatchEvent{Agent: api.NotifyTopic, Name: n.AgentName, Type: api.WatchType(n.Kind), Time: n.Time, Data: n})
	c.mu.Unlock()
	c.host.Notify(c.settings().Notify, n)
}

// notifyAbout sends a notification of kind about agent x.
func (c *Core) notifyAbout(kind string, x *node, text string, until time.Time) {
	c.mu.Lock()
	n := api.Notification{Kind: kind, AgentID: x.id(), AgentName: x.s().Name, AgentPath: c.pathLocked(x), Text: text}
	c.mu.Unlock()
	if !until.IsZero() {
		u := until.UTC()
		n.Until = &u
	}
	c.notify(n)
}

// MessageNotification is the notification of message m to USER (for
// one read back from the inbox).
func (c *Core) MessageNotification(m *fsstore.Message) api.Notification {
	n := c.messageNote(m, "", nil)
	n.Version, n.Text = 1, clip(n.Text, api.MaxNotifyText)
	return n
}

// messageNote is the notification of message m to USER, of kind kind
// ("": api.NotifyApproval for a request, else api.NotifyMessage), about
// agent about (nil: its sender, if an agent).
func (c *Core) messageNote(m *fsstore.Message, kind string, about *node) api.Notification {
	if kind == "" {
		kind = api.NotifyMessage
		if m.Kind == fsstore.KindApproval {
			kind = api.NotifyApproval
		}
	}
	n := api.Notification{Kind: kind, Time: m.SentAt.UTC(), Text: m.Text, MessageID: m.ID, MessageKind: m.Kind, From: m.FromName}
	if kind == api.NotifyApproval {
		n.RequestID = m.ID
	}
	c.mu.Lock()
	if about == nil {
		about = c.nodes[m.From]
	}
	if x := about; x != nil {
		n.AgentID, n.AgentName, n.AgentPath = x.id(), x.s().Name, c.pathLocked(x)
	}
	c.mu.Unlock()
	return n
}

// clip cuts s to at most max bytes, on a rune boundary, marking the cut.
func clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// notifyUnread nudges USER, after a crash, about the messages to USER not
// read yet: a notification sent just before the crash may never have run
// its command (notifications are not stored; the messages are).
func (c *Core) notifyUnread() {
	unread, err := c.UserInbox(false)
	if err != nil || len(unread) == 0 {
		return
	}
	last := unread[len(unread)-1]
	text := fmt.Sprintf("%d unread message(s) to USER are waiting (the daemon restarted after a crash; substrat inbox shows them); the newest, from %s: %s",
		len(unread), last.FromName, last.Text)
	c.notify(api.Notification{Kind: api.NotifyMessage, Text: text, MessageID: last.ID, MessageKind: last.Kind, From: last.FromName,
		Coalesced: len(unread) - 1})
}
