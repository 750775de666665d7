package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor"
	"github.com/substrat/substrat/supervisor/api"
)

// effectsModel is a provider whose model, at a message "go", spawns a
// child, sends it a message, sets a reminder, messages USER and
// completes, each call with a new tool-use id, as a real CLI's model does
// when a turn runs again. Any other turn just answers.
type effectsModel struct{}

func (effectsModel) Name() string { return "fx" }

func (effectsModel) Create(context.Context, provider.Config) (provider.Session, error) {
	return effectsSession{}, nil
}

func (effectsModel) Restore(context.Context, provider.Config, []byte) (provider.Session, error) {
	return effectsSession{}, nil
}

type effectsSession struct{}

func (effectsSession) Suspend(context.Context) ([]byte, error) { return []byte("{}"), nil }
func (effectsSession) Stop() error                             { return nil }

var effectCalls = []struct {
	name string
	args any
}{
	{"spawn_agent", map[string]string{"name": "kid", "instructions": "wait"}},
	{"send_message", map[string]string{"recipient": "kid", "text": "hello kid"}},
	{"send_message", map[string]string{"recipient": "kid", "text": "hello kid"}}, // a second, meant, identical send
	{"remind_me", map[string]any{"timeout": "1h", "reason": "check"}},
	{"send_message", map[string]string{"recipient": "USER", "text": "report"}},
	{"complete", map[string]string{"result": "all done"}},
}

func (effectsSession) Send(ctx context.Context, turn provider.Turn) (provider.TurnResult, error) {
	if !strings.Contains(turn.Prompt, "\ngo\n") {
		return provider.TurnResult{Text: "ok"}, nil
	}
	for _, c := range effectCalls {
		args, _ := json.Marshal(c.args)
		r := turn.Tools.CallTool(ctx, provider.ToolCall{ID: "toolu_" + uuid.NewString(), Name: c.name, Args: args})
		if r.IsError {
			return provider.TurnResult{}, fmt.Errorf("%s: %s", c.name, r.Text)
		}
	}
	return provider.TurnResult{Text: "done"}, nil
}

// effectsWorld starts a core on fsys with the effects model.
func effectsWorld(t *testing.T, fsys *FS, clock *Clock, ids *IDs, unclean bool) *supervisor.Core {
	t.Helper()
	st, err := fsstore.Open(Home, fsstore.Options{FS: fsys, Now: clock.Now, NewID: ids.New})
	if err != nil {
		t.Fatal(err)
	}
	c := supervisor.New(supervisor.Config{Store: st, Providers: provider.NewRegistry(effectsModel{}), Clock: clock, DefaultProvider: "fx"})
	if _, err := c.Recover(context.Background(), unclean); err != nil {
		t.Fatal(err)
	}
	return c
}

// drainAll runs turns until none is runnable (or a round limit).
func drainAll(c *supervisor.Core) {
	for range 10 {
		ids := c.Runnable()
		if len(ids) == 0 {
			return
		}
		for _, id := range ids {
			c.RunTurn(context.Background(), id)
		}
	}
}

// TestEffectsExactlyOnceAtEveryCrashPoint: a turn that spawns, sends
// (twice the same message, on purpose), sets a reminder, messages USER and
// completes is cut by a crash at each of its persist points in turn; after
// the restart and the turn run again (with new tool-use ids), each effect
// is there exactly once.
func TestEffectsExactlyOnceAtEveryCrashPoint(t *testing.T) {
	epoch := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	setup := func() (*FS, *Clock, *IDs, *supervisor.Core) {
		clock := NewClock(epoch)
		fsys := NewFS(clock.Now)
		ids := NewIDs(clock.Now, 7, 1)
		c := effectsWorld(t, fsys, clock, ids, false)
		if _, err := c.CreateAgent(api.CreateParams{Name: "lead", Provider: "fx"}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Send(api.SendParams{To: "lead", Text: "go"}); err != nil {
			t.Fatal(err)
		}
		return fsys, clock, ids, c
	}
	fsys, _, _, c := setup()
	start := fsys.Ops()
	drainAll(c)
	end := fsys.Ops()
	if end-start < 20 {
		t.Fatalf("the turn made only %d persist points", end-start)
	}
	check(t, "no crash", fsys, c)

	for k := start + 1; k <= end; k++ {
		fsys, clock, ids, c := setup()
		fsys.CrashAfter(k)
		drainAll(c)
		fsys.Crash(nil)
		clock.Set(clock.Now().Add(time.Minute))
		c2 := effectsWorld(t, fsys, clock, ids, true)
		drainAll(c2)
		check(t, fmt.Sprintf("crash after op %d of %d..%d", k, start, end), fsys, c2)
	}
}

// check asserts each effect of the "go" turn exactly once.
func check(t *testing.T, when string, fsys *FS, c *supervisor.Core) {
	t.Helper()
	var kids int
	var kidID string
	for _, a := range c.List() {
		if strings.HasPrefix(a.Name, "kid") {
			kids++
			kidID = a.ID
		}
	}
	if kids != 1 {
		t.Fatalf("%s: %d children named kid*", when, kids)
	}
	l := fsstore.Layout{Home: Home}
	count := func(inbox fsstore.Inbox, text string) int {
		n := 0
		seen := map[string]bool{}
		for _, sub := range []string{fsstore.InboxNew, fsstore.InboxCur} {
			msgs, _, _ := fsstore.ReadInbox(fsys, inbox, sub)
			for _, m := range msgs {
				if m.Text == text && !seen[m.ID] {
					seen[m.ID] = true
					n++
				}
			}
		}
		return n
	}
	if n := count(l.Agent(kidID).Inbox(), "hello kid"); n != 2 {
		t.Fatalf("%s: kid has %d of the 2 messages sent to it", when, n)
	}
	if n := count(l.UserInbox(), "report"); n != 1 {
		t.Fatalf("%s: USER has %d reports", when, n)
	}
	if n := count(l.UserInbox(), "lead completed: all done"); n != 1 {
		t.Fatalf("%s: USER has %d completions", when, n)
	}
	lead, err := c.Inspect("lead")
	if err != nil {
		t.Fatal(err)
	}
	if len(lead.Session.Reminders) > 1 {
		t.Fatalf("%s: %d reminders", when, len(lead.Session.Reminders))
	}
}
