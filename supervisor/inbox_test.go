package supervisor

import (
	"testing"

	"github.com/substrat/substrat/fsstore"
)

// TestUserInboxReadsWhatWasShown: listing USER's inbox marks nothing
// read; marking read takes the ids a reader showed, so a message that
// came after the list stays unread; a bad id is refused, with nothing
// marked.
func TestUserInboxReadsWhatWasShown(t *testing.T) {
	c, _ := newCore(t, t.TempDir(), false)
	tell := func(text string) {
		if err := c.sendUser(&fsstore.Message{From: fsstore.User, Kind: fsstore.KindMessage, Text: text}); err != nil {
			t.Fatal(err)
		}
	}
	tell("first")
	shown, err := c.UserInbox(false)
	if err != nil || len(shown) != 1 {
		t.Fatalf("UserInbox = %v, %v", shown, err)
	}
	if again, _ := c.UserInbox(false); len(again) != 1 || !again[0].Unread {
		t.Fatalf("listing marked the message read: %v", again)
	}
	tell("second, after the list")
	if _, err := c.MarkUserRead([]string{shown[0].ID, "../../etc/passwd"}); err == nil {
		t.Fatal("a path for an id was accepted")
	}
	if n, err := c.MarkUserRead([]string{shown[0].ID, shown[0].ID}); err != nil || n != 1 {
		t.Fatalf("MarkUserRead = %d, %v; want 1", n, err)
	}
	unread, _ := c.UserInbox(false)
	if len(unread) != 1 || unread[0].Text != "second, after the list" {
		t.Fatalf("unread after marking what was shown: %v", unread)
	}
	all, _ := c.UserInbox(true)
	if len(all) != 2 || all[0].Unread || !all[1].Unread {
		t.Fatalf("all: %+v", all)
	}
}
