package fsstore

import (
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
