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

// The daemon logs a delivery before it links the messages into cur/. A stop
// between the two leaves them in new/ under a message_delivered event: a
// scan reports it, a repairing scan finishes the delivery (and does not
// count them as pending), and a second scan finds nothing more.
func TestUnfinishedDeliveryIsFinished(t *testing.T) {
	home := t.TempDir()
	s := mustOpen(t, home, Options{})
	a, err := s.CreateAgent(&Session{Name: "a", Provider: "script"})
	if err != nil {
		t.Fatal(err)
	}
	var ms []*Message
	for _, text := range []string{"one", "two", "three"} {
		m := &Message{From: User, To: a.ID(), Kind: KindMessage, Text: text}
		if err := s.Send(m); err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	// Logged as delivered: the first two; the stop comes before the link.
	if _, err := a.Commit(Delivered{IDs: []string{ms[0].ID, ms[1].ID}}); err != nil {
		t.Fatal(err)
	}
	a.Close()
	box := a.Files().Inbox()

	before := hashTree(t, home)
	res := mustScan(t, mustOpen(t, home, Options{}), ScanOptions{})
	closeAgents(res)
	if d := before.diff(hashTree(t, home), ""); len(d) != 0 {
		t.Fatalf("a scan without repair changed the tree: %v", d)
	}
	var f *Finding
	for i := range res.Findings {
		if res.Findings[i].Kind == FindUnfinishedDelivery {
			f = &res.Findings[i]
		}
	}
	if f == nil || f.Repaired || f.Agent != a.ID() {
		t.Fatalf("findings %+v, want an unrepaired unfinished_delivery", res.Findings)
	}

	res = mustScan(t, mustOpen(t, home, Options{}), ScanOptions{Repair: true})
	defer closeAgents(res)
	f = nil
	for i := range res.Findings {
		if res.Findings[i].Kind == FindUnfinishedDelivery {
			f = &res.Findings[i]
		}
	}
	if f == nil || !f.Repaired {
		t.Fatalf("findings %+v, want a repaired unfinished_delivery", res.Findings)
	}
	for i, m := range ms {
		_, err := os.Stat(box.Path(InboxCur, m.ID))
		if delivered := err == nil; delivered != (i < 2) {
			t.Errorf("message %q in cur/: %v, want %v", m.Text, delivered, i < 2)
		}
	}
	if n := findAgent(res, a.ID()).PendingAtLoad(); n != 1 {
		t.Errorf("pending after the repair: %d, want 1 (the message never delivered)", n)
	}
	again := mustScan(t, mustOpen(t, home, Options{}), ScanOptions{Repair: true})
	defer closeAgents(again)
	for _, f := range again.Findings {
		if f.Kind == FindUnfinishedDelivery {
			t.Errorf("a second scan still finds %+v", f)
		}
	}
}
