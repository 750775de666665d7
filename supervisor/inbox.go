package supervisor

import (
	"sort"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
)

// UserInbox returns the unread messages to USER (and with all, the read
// ones too), oldest first. It marks nothing read: a reader marks what it
// has shown with MarkUserRead.
func (c *Core) UserInbox(all bool) ([]api.InboxMessage, error) {
	out := []api.InboxMessage{}
	if all {
		read, _, err := c.store.UserInbox(fsstore.InboxCur)
		if err != nil {
			return nil, storeErr(err)
		}
		for _, m := range read {
			out = append(out, api.InboxMessage{Message: m})
		}
	}
	unread, _, err := c.store.UserInbox(fsstore.InboxNew)
	if err != nil {
		return nil, storeErr(err)
	}
	for _, m := range unread {
		out = append(out, api.InboxMessage{Message: m, Unread: true})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// MarkUserRead marks the messages to USER ids read, and returns how many
// were unread.
func (c *Core) MarkUserRead(ids []string) (int, error) {
	n, err := c.store.MarkUserRead(ids)
	if err != nil {
		return 0, storeErr(err)
	}
	return n, nil
}
