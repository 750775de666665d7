package top

import (
	"errors"
	"strings"
	"testing"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor/api"
)

// TestHostileTextEscaped: what agents write (their stream, messages,
// reasons, names from a hand-edited session.json, approval requests, the
// USER inbox) reaches the terminal with every control and format
// character escaped, in every view: an agent cannot clear the screen,
// retitle the terminal or reorder what a person reads.
func TestHostileTextEscaped(t *testing.T) {
	const bad = "\x1b[2J\x1b]0;pwned\x07\u202e\u009b"
	f := newFake()
	f.snap.Agents[0].StateReason = "reason " + bad
	f.snap.Agents[0].Name = "lead" + bad
	f.snap.Agents[0].Path = "lead" + bad
	f.snap.Agents[1].Children = []string{"helper" + bad}
	f.snap.Agents[2].Parked = &fsstore.Park{Until: t0, Reason: "limit " + bad}
	f.snap.Inbox = append(f.snap.Inbox, api.InboxMessage{Message: &fsstore.Message{ID: "m2", FromName: "w1" + bad, Text: "hi " + bad, SentAt: t0}, Unread: true})
	f.snap.Approvals = []api.PendingApproval{{Agent: "lead" + bad, Approval: fsstore.Approval{ID: "r1", Tool: "Bash" + bad,
		Input: mustJSON(map[string]string{"command": "ls " + bad}), Approver: fsstore.User, Deadline: t0}}}
	m := run(t, f)
	m.Update(eventsMsg{
		{Agent: "a1", Type: "output", Time: t0, Data: mustJSON(provider.Chunk{Kind: provider.ChunkText, Text: "out " + bad})},
		{Agent: "a1", Type: "output", Time: t0, Data: mustJSON(provider.Chunk{Kind: provider.ChunkDenied, Tool: "T" + bad, Text: bad})},
		{Agent: "a1", Type: "message", Time: t0, Data: mustJSON(map[string]string{"from": "w" + bad, "text": "msg " + bad})},
		{Agent: "a1", Type: "weird" + bad, Time: t0, Data: mustJSON(map[string]string{"x": bad})},
	})
	m.Update(actedMsg{Action{Kind: ActSend, ID: "a1"}, errors.New("refused: " + bad)})
	check := func(view string) {
		t.Helper()
		frame := m.View()
		if strings.ContainsAny(frame, "\x1b\x07\u202e\u009b") {
			t.Errorf("%s: a control character reached the screen: %q", view, frame)
		}
		if !strings.Contains(frame, `\u001b`) {
			t.Errorf("%s: the escaped text is not shown: %q", view, frame)
		}
	}
	check("tree")
	press(m, "a")
	check("attach")
	press(m, "esc", "i")
	check("inbox")
	press(m, "esc", "v")
	check("approvals")
	press(m, "a")
	check("confirm")
	press(m, "n", "esc", "j", "j", "j")
	check("parked")
}
