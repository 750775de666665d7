package daemon

import (
	"context"
	"sort"
	"time"

	"github.com/substrat/substrat/supervisor/api"
)

// inbox.follow streams the notifications (api.Notification) as they
// happen, for `substrat inbox --follow`. It subscribes first, then sends
// a hello frame (the time it follows from), then reads USER's inbox: the
// messages sent at or after Since are sent, so that a client that
// reconnects after a daemon restart misses none (it drops those it has
// seen, by id). A live notification of a message sent already from the
// inbox is skipped. Times, not ids, order the messages: a tool call run
// again after a crash sends its message with the id it was given before.
func (d *Daemon) follow(ctx context.Context, p api.FollowParams, send func(api.Notification) error) (struct{}, error) {
	c := d.core
	sub := c.Subscribe(api.NotifyTopic)
	defer sub.Close()
	if err := send(api.Notification{Version: 1, Kind: api.NotifyHello, Time: time.Now().UTC()}); err != nil {
		return struct{}{}, err
	}
	sent := map[string]bool{}
	if !p.Since.IsZero() {
		msgs, err := c.UserInbox(true)
		if err != nil {
			return struct{}{}, err
		}
		sort.SliceStable(msgs, func(i, j int) bool { return msgs[i].SentAt.Before(msgs[j].SentAt) })
		for _, m := range msgs {
			if m.SentAt.Before(p.Since) {
				continue
			}
			if err := send(c.MessageNotification(m.Message)); err != nil {
				return struct{}{}, err
			}
			sent[m.ID] = true
		}
	}
	reported := 0
	for {
		select {
		case <-ctx.Done():
			return struct{}{}, ctx.Err()
		case e := <-sub.C:
			if k := sub.Dropped(); k > reported {
				// The inbox has the messages; say so rather than stop.
				if err := send(api.Notification{Version: 1, Kind: api.NotifyDropped, Time: time.Now().UTC(), Count: k - reported}); err != nil {
					return struct{}{}, err
				}
				reported = k
			}
			n, ok := e.Data.(api.Notification)
			if !ok || sent[n.MessageID] {
				continue
			}
			if err := send(n); err != nil {
				return struct{}{}, err
			}
		}
	}
}
