package fsstore

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// TestGolden pins the on-disk format: the files a store writes with fixed
// ids and a fixed clock must equal, byte for byte, the committed files in
// testdata/golden. A change to them is a format change; if it is meant,
// rerun with -update and say so in doc.go.
func TestGolden(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 123456789, time.FixedZone("CET", 3600))
	s := mustOpen(t, t.TempDir(), Options{Now: func() time.Time { return now }})
	a, err := s.CreateAgent(&Session{ID: idA, Name: "alpha", Provider: "claude", Model: "opus",
		Instructions: "Lead the team.\nBe brief.", Workspace: "proj/main", Metadata: map[string]string{"team": "red"}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	blob := []byte("opaque\x00state")
	for _, c := range []Payload{
		StateChange{AgentState: AgentBusy, SessionState: SessionActive, Reason: "turn 1"},
		ProviderChange{ProviderSessionID: "sess-1", StateBlob: blob},
		Counters{Turns: 1, InputTokens: 1200, OutputTokens: 340, CostUSD: 0.0123},
		Spawned{ChildID: idB, Name: "beta", SpawnKey: "toolu_01"},
		MessageRef{ID: idMsg1, To: idB},
	} {
		if _, err := a.Commit(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Snapshot(); err != nil {
		t.Fatal(err)
	}
	b, err := s.CreateAgent(&Session{ID: idB, Name: "beta", ParentID: idA, Provider: "claude", SpawnKey: "toolu_01"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := s.Send(&Message{ID: idMsg1, From: idA, FromName: "alpha", To: idB, Kind: KindMessage,
		Text: "Look at \"main.go\" <soon> & reply.\nThanks."}); err != nil {
		t.Fatal(err)
	}

	for _, g := range []struct{ golden, path string }{
		{"events.jsonl", a.Files().Events()},
		{"session.json", a.Files().Session()},
		{"child-session.json", b.Files().Session()},
		{"message.json", b.Files().Inbox().Path(InboxNew, idMsg1)},
	} {
		got := readFile(t, g.path)
		golden := filepath.Join("testdata", "golden", g.golden)
		if *update {
			if err := os.WriteFile(golden, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test -run TestGolden -update to create it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s (a format change? rerun with -update if it is meant):\n got:\n%s\nwant:\n%s", g.path, golden, got, want)
		}
	}
}

// TestGoldenDecodes reads the committed golden files back with the
// decoders: what was written by this format version stays readable.
func TestGoldenDecodes(t *testing.T) {
	dir := filepath.Join("testdata", "golden")
	var sess *Session
	for i, line := range lines(readFile(t, filepath.Join(dir, "events.jsonl"))) {
		e, err := DecodeEvent(line)
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if sess, err = Apply(sess, e); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
	}
	snap, err := DecodeSession(readFile(t, filepath.Join(dir, "session.json")))
	if err != nil {
		t.Fatal(err)
	}
	if snap.LastSeq != 6 || string(snap.StateBlob) != "opaque\x00state" || snap.Counters.InputTokens != 1200 ||
		snap.AgentState != AgentBusy || snap.Metadata["team"] != "red" {
		t.Errorf("session.json: %+v", snap)
	}
	assertSession(t, sess, snap)
	child, err := DecodeSession(readFile(t, filepath.Join(dir, "child-session.json")))
	if err != nil || child.ParentID != idA || child.LastSeq != 1 {
		t.Errorf("child-session.json: %+v, %v", child, err)
	}
	m, err := DecodeMessage(readFile(t, filepath.Join(dir, "message.json")))
	if err != nil || m.ID != idMsg1 || m.From != idA || m.To != idB || m.Text != "Look at \"main.go\" <soon> & reply.\nThanks." {
		t.Errorf("message.json: %+v, %v", m, err)
	}
}
