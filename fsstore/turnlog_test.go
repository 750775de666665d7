package fsstore

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestTurnRecordBounded: whatever a turn took and gave (many long
// messages and outputs of characters JSON writes as six bytes each,
// invalid UTF-8 included), its turn event stays well below MaxEventSize,
// and says how much it left out.
func TestTurnRecordBounded(t *testing.T) {
	worst := strings.Repeat("\x01\xff", 1<<19)
	var msgs []*Message
	for range 100 {
		msgs = append(msgs, &Message{ID: strings.Repeat("i", 36), From: User, FromName: worst, Kind: "message", Text: worst})
	}
	var out []OutputPart
	for range 1000 {
		out = append(out, OutputPart{Kind: "tool_call", Tool: worst, Text: worst})
	}
	r := TurnRecord{Counters: Counters{Turns: 1}}.Keep(msgs, out)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("worst turn event: %d bytes", len(b))
	if len(b) > MaxEventSize/2 {
		t.Errorf("a turn event of %d bytes; MaxEventSize is %d", len(b), MaxEventSize)
	}
	if r.Cut == 0 || len(r.Messages) != MaxTurnMessages {
		t.Errorf("cut %d, %d messages kept", r.Cut, len(r.Messages))
	}
	if got := r.Messages[0].Text; !strings.HasPrefix(got, worst[:MaxTurnMessageText]) {
		t.Errorf("a message's text is cut before its bound: %d bytes kept", len(got))
	}
	// A character is not cut in two.
	if got, _ := cutText(strings.Repeat("é", 10), 5); got != "éé [... 16 bytes cut]" {
		t.Errorf("cutText cut a character: %q", got)
	}
	// A small turn is kept whole.
	small := TurnRecord{}.Keep([]*Message{{ID: "m", From: User, Text: "hi && <b>"}}, []OutputPart{{Kind: "text", Text: "hello"}})
	if small.Cut != 0 || small.Messages[0].Text != "hi && <b>" || small.Output[0].Text != "hello" {
		t.Errorf("a small turn: %+v", small)
	}
}
