package fsstore

import (
	"context"
	"testing"
)

func TestCreateCommitScanRoundTrip(t *testing.T) {
	home := t.TempDir()
	s, err := Open(home, Options{})
	if err != nil {
		t.Fatal(err)
	}
	root, err := s.CreateAgent(&Session{Name: "root", Provider: "script"})
	if err != nil {
		t.Fatal(err)
	}
	child, err := s.CreateAgent(&Session{Name: "child", Provider: "script", ParentID: root.ID()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.Commit(StateChange{AgentState: AgentBusy, SessionState: SessionActive}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Commit(Counters{Turns: 1, InputTokens: 10}); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&Message{From: root.ID(), To: child.ID(), Kind: KindMessage, Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	root.Close()
	child.Close()

	res, err := s.Scan(context.Background(), ScanOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Agents) != 2 {
		t.Fatalf("got %d agents, want 2; findings %+v", len(res.Agents), res.Findings)
	}
	var gotRoot, gotChild *Agent
	for _, a := range res.Agents {
		switch a.ID() {
		case root.ID():
			gotRoot = a
		case child.ID():
			gotChild = a
		}
	}
	rs := gotRoot.Session()
	if rs.LastSeq != 3 || rs.AgentState != AgentBusy || rs.Counters.InputTokens != 10 {
		t.Errorf("root after replay: %+v", rs)
	}
	msgs, _, err := gotChild.Pending()
	if err != nil || len(msgs) != 1 || msgs[0].Text != "hi" {
		t.Fatalf("pending = %v, %v", msgs, err)
	}
	if len(res.Findings) != 1 || res.Findings[0].Kind != FindReplayed {
		t.Errorf("findings = %+v", res.Findings)
	}
}
