package supervisor

import (
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
)

// TestRecoveryPromptOnlyToCutShort: after an unclean stop, only the roots
// whose turn was cut short get the recovery prompt: one BUSY, one waiting
// for an approval inside its turn. A root that never took a turn, one that
// ended its turn, one waiting for replies after its turn, and a child cut
// short (it resumes on demand, with its messages) get nothing. After a
// clean stop nobody gets it.
func TestRecoveryPromptOnlyToCutShort(t *testing.T) {
	for _, unclean := range []bool{true, false} {
		home := t.TempDir()
		c1, _ := newCore(t, home, false)
		for _, name := range []string{"fresh", "done", "mid", "asking", "replies"} {
			mustCreate(t, c1, api.CreateParams{Name: name})
		}
		mustCreate(t, c1, api.CreateParams{Name: "kid", Parent: "done"})
		for _, name := range []string{"done", "mid", "asking", "replies", "kid"} {
			if _, err := c1.Send(api.SendParams{To: name, Text: "work"}); err != nil {
				t.Fatal(err)
			}
		}
		drain(t, c1)
		// A turn begun and never ended: BUSY, its message still in inbox/new.
		for _, name := range []string{"mid", "asking", "kid"} {
			n := nodeOf(t, c1, name)
			if _, err := c1.Send(api.SendParams{To: name, Text: "again"}); err != nil {
				t.Fatal(err)
			}
			if err := c1.commit(n, fsstore.StateChange{AgentState: fsstore.AgentBusy}); err != nil {
				t.Fatal(err)
			}
		}
		// A turn waiting for its approval request.
		asking := nodeOf(t, c1, "asking")
		now := time.Now().UTC()
		if err := c1.commit(asking, fsstore.Approval{ID: "req-1", Tool: "Bash",
			Approver: fsstore.User, RequestedAt: now, Deadline: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if err := c1.commit(asking, fsstore.StateChange{AgentState: fsstore.AgentWaiting}); err != nil {
			t.Fatal(err)
		}
		// A finished turn that waits for a reply.
		replies := nodeOf(t, c1, "replies")
		if err := c1.commit(replies, fsstore.Waiting{IDs: []string{"m-1"}}); err != nil {
			t.Fatal(err)
		}
		if err := c1.commit(replies, fsstore.StateChange{AgentState: fsstore.AgentBusy}); err != nil {
			t.Fatal(err)
		}
		if err := c1.commit(replies, fsstore.StateChange{AgentState: fsstore.AgentWaiting}); err != nil {
			t.Fatal(err)
		}

		c2, rep := newCore(t, home, unclean)
		var resumed []string
		for _, r := range rep.Resumed {
			resumed = append(resumed, r.Path)
		}
		want := []string{"asking", "mid"}
		if nodeOf(t, c2, "asking").id() > nodeOf(t, c2, "mid").id() {
			want = []string{"mid", "asking"}
		}
		if !unclean {
			want = nil
		}
		if len(resumed) != len(want) || (len(want) == 2 && (resumed[0] != want[0] || resumed[1] != want[1])) {
			t.Errorf("unclean=%v: resumed %v, want %v", unclean, resumed, want)
		}
		for _, name := range []string{"fresh", "done", "mid", "asking", "replies", "kid"} {
			msgs, _, err := nodeOf(t, c2, name).agent.Pending()
			if err != nil {
				t.Fatal(err)
			}
			prompted := false
			for _, m := range msgs {
				prompted = prompted || (m.From == fsstore.System && m.Text == RecoveryPrompt)
			}
			if wantPrompt := unclean && (name == "mid" || name == "asking"); prompted != wantPrompt {
				t.Errorf("unclean=%v: %s has the recovery prompt: %v, want %v (inbox %d)", unclean, name, prompted, wantPrompt, len(msgs))
			}
			// The cut-short turns' messages are there to run again.
			if cut := name == "mid" || name == "asking" || name == "kid"; cut && len(msgs) == 0 {
				t.Errorf("unclean=%v: %s lost the message of its cut-short turn", unclean, name)
			}
		}
		if got := nodeOf(t, c2, "fresh").s().Counters.Turns; got != 0 {
			t.Errorf("fresh took %d turns", got)
		}
	}
}
