package fsstore

import (
	"fmt"
	"unicode/utf8"
)

// TurnRecord is the data of a "turn" event: the turn's Counters (which
// Apply adds to the totals) and, for people reading the log, what went
// in and what came out, cut to bounded sizes so that the line stays far
// below MaxEventSize whatever the agent wrote (each byte can grow to six
// in JSON, "\u001b"). It is a Payload through its Counters: their
// EventType and applyTo are its own, and what it adds is history only.
type TurnRecord struct {
	Counters
	// Messages are the messages the turn took (its prompt's), at most
	// MaxTurnMessages of them, each text cut to MaxTurnMessageText bytes.
	Messages []TurnMessage `json:"messages,omitempty"`
	// Output is what the provider streamed: text, tool calls and their
	// results, refusals; at most MaxTurnOutput bytes of text in all.
	Output []OutputPart `json:"output,omitempty"`
	// Cut counts the bytes (and messages) of either that were left out.
	Cut int `json:"cut,omitempty"`
}

// TurnMessage is a message a turn took, as its turn event keeps it.
type TurnMessage struct {
	ID       string `json:"id"`
	From     string `json:"from"`
	FromName string `json:"from_name,omitempty"`
	Kind     string `json:"kind,omitempty"`
	Text     string `json:"text"`
}

// OutputPart is one piece of a turn's output (a provider chunk): Kind is
// "text", "tool_call", "tool_result" or "denied"; Tool names the tool of
// a "denied".
type OutputPart struct {
	Kind string `json:"kind"`
	Tool string `json:"tool,omitempty"`
	Text string `json:"text"`
}

// Bounds of what a turn event keeps of a turn (TurnRecord).
const (
	MaxTurnMessages    = 16
	MaxTurnMessageText = 2 << 10
	MaxTurnOutput      = 32 << 10
	maxTurnParts       = 256
)

// Keep returns the record with the turn's messages and output added, cut
// to the bounds above.
func (r TurnRecord) Keep(msgs []*Message, out []OutputPart) TurnRecord {
	for i, m := range msgs {
		if i == MaxTurnMessages {
			r.Cut += len(msgs) - i
			break
		}
		text, cut := cutText(m.Text, MaxTurnMessageText)
		r.Cut += cut
		r.Messages = append(r.Messages, TurnMessage{ID: short(m.ID), From: short(m.From), FromName: short(m.FromName), Kind: short(m.Kind), Text: text})
	}
	budget := MaxTurnOutput
	for i, p := range out {
		if i == maxTurnParts || budget <= 0 {
			for _, q := range out[i:] {
				r.Cut += len(q.Text)
			}
			break
		}
		text, cut := cutText(p.Text, budget)
		budget -= len(text)
		r.Cut += cut
		r.Output = append(r.Output, OutputPart{Kind: short(p.Kind), Tool: short(p.Tool), Text: text})
	}
	return r
}

// cutText returns s cut to at most max bytes on a character boundary,
// with a note of what was cut, and how many bytes were.
func cutText(s string, max int) (string, int) {
	if len(s) <= max {
		return s, 0
	}
	// Not inside a character: back off to the start of the one cut.
	end := max
	for i := 0; i < utf8.UTFMax-1 && end > 0 && !utf8.RuneStart(s[end]); i++ {
		end--
	}
	head := s[:end]
	cut := len(s) - len(head)
	return head + fmt.Sprintf(" [... %d bytes cut]", cut), cut
}

// short cuts a name or an id (which the daemon checked already) to 128
// bytes, so that no field makes the line long.
func short(s string) string {
	s, _ = cutText(s, 128)
	return s
}
