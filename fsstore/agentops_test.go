package fsstore

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// TestAgentOps: the agent's other files, through the store's operations.
func TestAgentOps(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{})
	a, err := s.CreateAgent(&Session{Name: "a", Provider: "script"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if s.HasMessage(a.ID(), idMsg1) || s.HasMessage(User, idMsg1) || s.HasMessage("../x", idMsg1) {
		t.Fatal("HasMessage before any message")
	}
	if err := s.Send(&Message{ID: idMsg1, From: User, To: a.ID(), Kind: KindMessage, Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	if !s.HasMessage(a.ID(), idMsg1) || s.HasMessage(User, idMsg1) {
		t.Fatal("HasMessage: want the message in the agent's inbox only")
	}
	if err := a.MarkDelivered([]string{idMsg1}); err != nil {
		t.Fatal(err)
	}
	if !s.HasMessage(a.ID(), idMsg1) {
		t.Fatal("HasMessage: a delivered message is no longer found")
	}
	if _, err := a.SweepDelivered(time.Now()); err != nil {
		t.Fatal(err)
	}

	for _, text := range []string{"one\n", "two\n"} {
		if err := a.AppendTranscript(text); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile(a.Files().Transcript()); err != nil || string(b) != "one\ntwo\n" {
		t.Fatalf("transcript = %q, %v", b, err)
	}

	for _, sp := range []Spawned{{ChildID: idB, Name: "b", SpawnKey: "toolu_1"}, {ChildID: idA, Name: "c"}} {
		if _, err := a.Commit(sp); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := a.SpawnKeys()
	if err != nil || len(keys) != 1 || keys["toolu_1"] != idB {
		t.Fatalf("SpawnKeys = %v, %v", keys, err)
	}
}

// TestDiskSessionRacesSnapshot: the daemon's own snapshots are never read
// back as a hand edit, however a watcher's read of session.json falls
// among them. (A read of the file before a snapshot, compared after it,
// once saw the old file as an edit, and adopting it undid the change
// the snapshot wrote.)
func TestDiskSessionRacesSnapshot(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{})
	a, err := s.CreateAgent(&Session{Name: "a", Provider: "script"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	done := make(chan error, 1)
	go func() {
		for i := range 300 {
			v := fmt.Sprint(i)
			if _, err := a.Commit(MetadataChange{Key: "k", Value: &v}); err != nil {
				done <- err
				return
			}
			if err := a.Snapshot(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return
		default:
		}
		if disk, changed, _, err := a.DiskSession(); changed {
			t.Fatalf("the agent's own snapshot read as a hand edit: %v, %v", disk != nil, err)
		}
	}
}
