package fsstore

import (
	"errors"
	"os"
	"testing"
)

// Snapshot never replaces a session.json changed on disk since the Agent
// last wrote or accepted it; AcceptDisk lets it, for exactly those bytes.
func TestSnapshotLeavesHandEditAlone(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.CreateAgent(&Session{Name: "a", Provider: "script"})
	if err != nil {
		t.Fatal(err)
	}
	path := a.Files().Session()
	edit := []byte(`{"version": 1, "hand": "edit"`)
	if err := os.WriteFile(path, edit, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Commit(EvTurn, Counters{Turns: 1}); err != nil {
		t.Fatal(err)
	}
	if err := a.Snapshot(); !errors.Is(err, ErrHandEdited) {
		t.Fatalf("Snapshot over a hand edit: %v, want ErrHandEdited", err)
	}
	if got, _ := os.ReadFile(path); string(got) != string(edit) {
		t.Fatalf("the hand edit was replaced: %s", got)
	}
	_, changed, sum, derr := a.DiskSession()
	if !changed || derr == nil {
		t.Fatalf("DiskSession: changed %v, err %v; want a changed, invalid file", changed, derr)
	}
	// Accepting these bytes (as the daemon does after adopting a valid
	// edit) lets the next snapshot write the merged state...
	a.AcceptDisk(sum)
	if err := a.Snapshot(); err != nil {
		t.Fatal(err)
	}
	disk, err := DecodeSession(readFile(t, path))
	if err != nil || disk.Counters.Turns != 1 {
		t.Fatalf("after accept: %+v, %v", disk, err)
	}
	// ...and a file changed after the accept is refused again.
	a.AcceptDisk(sum)
	if _, err := a.Commit(EvTurn, Counters{Turns: 1}); err != nil {
		t.Fatal(err)
	}
	if err := a.Snapshot(); !errors.Is(err, ErrHandEdited) {
		t.Fatalf("Snapshot after a stale accept: %v, want ErrHandEdited", err)
	}
}
