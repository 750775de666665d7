package fsstore

import (
	"os"
	"testing"
	"time"
)

// A delivered message keeps its new/ name for DeliveredGrace, so that a
// copy of the home taken during the delivery holds it somewhere; readers
// of new/ do not see it as pending, and SweepDelivered drops the name
// later without losing the file.
func TestDeliveryByLinkAndSweep(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.CreateAgent(&Session{Name: "a", Provider: "script"})
	if err != nil {
		t.Fatal(err)
	}
	m := &Message{From: User, To: a.ID(), Kind: KindMessage, Text: "hi"}
	if err := s.Send(m); err != nil {
		t.Fatal(err)
	}
	if err := a.MarkDelivered([]string{m.ID}); err != nil {
		t.Fatal(err)
	}
	box := a.Files().Inbox()
	for _, sub := range []string{InboxNew, InboxCur} {
		if _, err := os.Stat(box.Path(sub, m.ID)); err != nil {
			t.Fatalf("%s/ lacks the message right after delivery: %v", sub, err)
		}
	}
	if msgs, _, _ := a.Pending(); len(msgs) != 0 {
		t.Fatalf("a delivered message is pending: %v", msgs)
	}
	// Delivering twice (a crash between link and event) is harmless.
	if err := a.MarkDelivered([]string{m.ID}); err != nil {
		t.Fatal(err)
	}
	if n, err := SweepDelivered(s.FS(), box, time.Now()); err != nil || n != 0 {
		t.Fatalf("sweep within the grace removed %d (%v)", n, err)
	}
	if n, err := SweepDelivered(s.FS(), box, time.Now().Add(DeliveredGrace+time.Second)); err != nil || n != 1 {
		t.Fatalf("sweep after the grace removed %d (%v), want 1", n, err)
	}
	if _, err := os.Stat(box.Path(InboxNew, m.ID)); !os.IsNotExist(err) {
		t.Fatalf("new/ name still there: %v", err)
	}
	cur, _, err := ReadInbox(s.FS(), box, InboxCur)
	if err != nil || len(cur) != 1 || cur[0].Text != "hi" {
		t.Fatalf("cur/ after the sweep: %v %v", cur, err)
	}
}
