package fsstore

import (
	"errors"
	"testing"
)

// TestReplay commits one event of every type that changes the snapshot,
// with session.json left behind part of the way, and checks that a scan
// (replaying the newer events) and a deep scan (replaying all of them)
// rebuild the session exactly as it was live.
// newHistory is an event type the store does not know: a newer daemon's
// history.
type newHistory map[string]int

func (newHistory) EventType() string { return "something_new" }

func TestReplay(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{Now: newStepClock().Now})
	a, err := s.CreateAgent(&Session{Name: "r", Provider: "script", Metadata: map[string]string{"keep": "1", "drop": "2"}})
	if err != nil {
		t.Fatal(err)
	}
	red, name, instr := "red", "renamed", "new instructions"
	commits := []Payload{
		StateChange{AgentState: AgentBusy, SessionState: SessionActive, Reason: "turn"},
		ProviderChange{ProviderSessionID: "ps-1", StateBlob: []byte{1, 2, 3}},
		Counters{Turns: 1, InputTokens: 10, OutputTokens: 5, CostUSD: 0.5},
		MetadataChange{Key: "team", Value: &red},
		MetadataChange{Key: "drop"},
		Edit{Name: &name, Instructions: &instr},
		MessageRef{ID: idMsg1, To: User},
		Delivered{IDs: []string{idMsg2}},
		Spawned{ChildID: idB, Name: "child"},
		newHistory{"x": 1},
		Counters{Turns: 2, InputTokens: 1, CostUSD: 0.25},
		ProviderChange{ProviderSessionID: "ps-2"},
		StateChange{AgentState: AgentIdle},
	}
	for i, c := range commits {
		if _, err := a.Commit(c); err != nil {
			t.Fatalf("commit %d (%s): %v", i, c.EventType(), err)
		}
		if i == 5 {
			if err := a.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
	}
	live := a.Session()
	a.Close()
	if live.Name != name || live.Metadata["team"] != "red" || live.Metadata["keep"] != "1" || live.Metadata["drop"] != "" ||
		live.Counters != (Counters{Turns: 3, InputTokens: 11, OutputTokens: 5, CostUSD: 0.75}) ||
		live.ProviderSessionID != "ps-2" || string(live.StateBlob) != "\x01\x02\x03" || live.StateReason != "" || live.LastSeq != 14 {
		t.Fatalf("live session: %+v", live)
	}
	for _, opts := range []ScanOptions{{}, {Deep: true}} {
		res := mustScan(t, s, opts)
		closeAgents(res)
		if len(res.Agents) != 1 {
			t.Fatalf("%+v: %d agents", opts, len(res.Agents))
		}
		assertSession(t, res.Agents[0].Session(), live)
		if got := res.Agents[0].SnapshotSeq(); got != 7 {
			t.Errorf("SnapshotSeq = %d, want 7", got)
		}
		assertFindings(t, "scan", res, []wantFinding{
			w(Finding{Kind: FindReplayed, Path: res.Agents[0].Files().Events(), Agent: live.ID, Repaired: true}, "replayed 7 events after last_seq 7"),
		})
	}
}

func TestApplyRefuses(t *testing.T) {
	base := &Session{Version: Version, ID: idA, Name: "a", Provider: "p", AgentState: AgentIdle, SessionState: SessionCreated}
	for _, tc := range []struct {
		name string
		s    *Session
		e    Event
	}{
		{"event before created", nil, Event{Seq: 1, Type: EvState, Data: []byte(`{}`)}},
		{"created after seq 1", nil, Event{Seq: 2, Type: EvCreated, Data: []byte(`{}`)}},
		{"invalid created", nil, Event{Seq: 1, Type: EvCreated, Data: []byte(`{"version":1}`)}},
		{"metadata with an empty key", base, Event{Seq: 2, Type: EvMetadata, Data: []byte(`{"key":"","value":"x"}`)}},
		{"state data of the wrong shape", base, Event{Seq: 2, Type: EvState, Data: []byte(`[1]`)}},
		{"unknown agent state", base, Event{Seq: 2, Type: EvState, Data: []byte(`{"agent_state":"NAPPING"}`)}},
		{"edit to an invalid name", base, Event{Seq: 2, Type: EvEdited, Data: []byte(`{"name":"a/b"}`)}},
		{"negative turn", base, Event{Seq: 2, Type: EvTurn, Data: []byte(`{"turns":-1}`)}},
	} {
		got, err := Apply(tc.s, tc.e)
		if got != nil || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Apply = %+v, %v; want ErrInvalid", tc.name, got, err)
		}
	}
	before := *base
	if _, err := Apply(base, Event{Seq: 2, Type: EvState, Data: []byte(`{"agent_state":"BUSY"}`)}); err != nil {
		t.Fatal(err)
	}
	if base.AgentState != before.AgentState {
		t.Error("Apply modified its input")
	}
}
