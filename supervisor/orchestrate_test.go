package supervisor

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

func newCoreWith(t testing.TB, home string, unclean bool, cfg Config) *Core {
	t.Helper()
	st, err := fsstore.Open(home, fsstore.Options{Now: func() time.Time {
		if cfg.Clock != nil {
			return cfg.Clock.Now()
		}
		return time.Now()
	}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store = st
	if cfg.Providers == nil {
		cfg.Providers = provider.NewRegistry(script.New())
	}
	cfg.Log = testLog(t)
	c := New(cfg)
	if _, err := c.Recover(context.Background(), unclean); err != nil {
		t.Fatal(err)
	}
	return c
}

func send(t testing.TB, c *Core, to, text string) {
	t.Helper()
	if _, err := c.Send(api.SendParams{To: to, Text: text}); err != nil {
		t.Fatal(err)
	}
}

func pendingTexts(t *testing.T, n *node) []string {
	t.Helper()
	msgs, _, err := n.agent.Pending()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range msgs {
		out = append(out, m.Text)
	}
	return out
}

func TestWaitingUntilReply(t *testing.T) {
	c, _ := newCore(t, t.TempDir(), false)
	mustCreate(t, c, api.CreateParams{Name: "root"})
	send(t, c, "root", `!spawn_agent {"name":"b","instructions":"hello"}`)
	drain(t, c)
	// root asks b something; b's script answers.
	send(t, c, "root", `!send_message {"recipient":"b","text":"!send_message {\"recipient\":\"root\",\"text\":\"answer\"}"}`)
	if err := c.RunTurn(context.Background(), nodeOf(t, c, "root").id()); err != nil {
		t.Fatal(err)
	}
	root := nodeOf(t, c, "root")
	if root.s().AgentState != fsstore.AgentWaiting || len(root.s().WaitingFor) != 1 {
		t.Fatalf("root after asking: %s waiting for %v", root.s().AgentState, root.s().WaitingFor)
	}
	request := root.s().WaitingFor[0]
	if err := c.RunTurn(context.Background(), nodeOf(t, c, "b").id()); err != nil {
		t.Fatal(err)
	}
	msgs, _, _ := root.agent.Pending()
	if len(msgs) != 1 || msgs[0].ReplyTo != request || msgs[0].Kind != fsstore.KindReply {
		t.Fatalf("root's inbox: %+v, want a reply to %s", msgs, request)
	}
	if root = nodeOf(t, c, "root"); len(root.s().WaitingFor) != 0 {
		t.Fatalf("still waiting for %v after the reply", root.s().WaitingFor)
	}
	drain(t, c)
	if root = nodeOf(t, c, "root"); root.s().AgentState != fsstore.AgentIdle {
		t.Fatalf("root after the reply: %s", root.s().AgentState)
	}
}

func TestSubscriptionsFireOnEveryTransition(t *testing.T) {
	c, _ := newCore(t, t.TempDir(), false)
	mustCreate(t, c, api.CreateParams{Name: "root"})
	send(t, c, "root", `!spawn_agent {"name":"kid","instructions":"hi"}
!subscribe {"agent_name":"kid","transition":"IDLE->BUSY"}
!subscribe {"agent_name":"kid","transition":"*->TERMINATED","once":true}`)
	if err := c.RunTurn(context.Background(), nodeOf(t, c, "root").id()); err != nil {
		t.Fatal(err)
	}
	if n := len(nodeOf(t, c, "root").s().Subscriptions); n != 2 {
		t.Fatalf("%d subscriptions, want 2", n)
	}
	if err := c.RunTurn(context.Background(), nodeOf(t, c, "kid").id()); err != nil {
		t.Fatal(err)
	}
	got := pendingTexts(t, nodeOf(t, c, "root"))
	if len(got) != 1 || !strings.Contains(got[0], "kid went IDLE -> BUSY") {
		t.Fatalf("root's inbox after kid's turn: %q", got)
	}
	if _, err := c.Terminate(context.Background(), api.TerminateParams{Ref: "kid"}); err != nil {
		t.Fatal(err)
	}
	got = pendingTexts(t, nodeOf(t, c, "root"))
	if len(got) != 2 || !strings.Contains(got[1], "kid went IDLE -> TERMINATED") {
		t.Fatalf("root's inbox after kid ended: %q", got)
	}
	subs := nodeOf(t, c, "root").s().Subscriptions
	if len(subs) != 1 || subs[0].To != "BUSY" {
		t.Fatalf("the once-subscription was not removed: %+v", subs)
	}
}

func TestRemindersSurviveRestart(t *testing.T) {
	home := t.TempDir()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := newCoreWith(t, home, false, Config{Clock: clk})
	mustCreate(t, c, api.CreateParams{Name: "root"})
	send(t, c, "root", `!remind_me {"reason":"check the build","timeout":"60s"}
!remind_me {"reason":"heartbeat","timeout":30,"every":"30s"}`)
	drain(t, c)
	if n := len(nodeOf(t, c, "root").s().Reminders); n != 2 {
		t.Fatalf("%d reminders, want 2", n)
	}
	c.Tick(clk.Add(10 * time.Second))
	if got := pendingTexts(t, nodeOf(t, c, "root")); len(got) != 0 {
		t.Fatalf("early reminder: %q", got)
	}
	// The daemon dies; two minutes pass; a new one starts and ticks.
	clk.Add(2 * time.Minute)
	c2 := newCoreWith(t, home, true, Config{Clock: clk})
	c2.Tick(clk.Now())
	got := pendingTexts(t, nodeOf(t, c2, "root"))
	joined := strings.Join(got, "\n")
	if !strings.Contains(joined, "check the build") || !strings.Contains(joined, "heartbeat") {
		t.Fatalf("after restart: %q", got)
	}
	rs := nodeOf(t, c2, "root").s().Reminders
	if len(rs) != 1 || rs[0].Reason != "heartbeat" || !rs[0].Due.After(clk.Now()) {
		t.Fatalf("reminders after firing: %+v", rs)
	}
	send(t, c2, "root", `!cancel_reminder {"id":"`+rs[0].ID+`"}`)
	drain(t, c2)
	if rs := nodeOf(t, c2, "root").s().Reminders; len(rs) != 0 {
		t.Fatalf("cancelled reminder still there: %+v", rs)
	}
}

func TestGatesAndPermits(t *testing.T) {
	c, _ := newCore(t, t.TempDir(), false)
	mustCreate(t, c, api.CreateParams{Name: "root"})
	send(t, c, "root", `!spawn_agent {"name":"kid","instructions":"hi"}
!gate {"agent_name":"kid"}`)
	drain(t, c)
	kid := nodeOf(t, c, "kid")
	if !kid.s().Gated || kid.s().Counters.Turns != 0 {
		t.Fatalf("kid: gated %v, turns %d", kid.s().Gated, kid.s().Counters.Turns)
	}
	send(t, c, "root", `!permit_turn {"agent_name":"kid"}`)
	drain(t, c)
	if kid = nodeOf(t, c, "kid"); kid.s().Counters.Turns != 1 || kid.s().Permits != 0 {
		t.Fatalf("after one permit: %d turns, %d permits", kid.s().Counters.Turns, kid.s().Permits)
	}
	send(t, c, "kid", "more")
	drain(t, c)
	if kid = nodeOf(t, c, "kid"); kid.s().Counters.Turns != 1 {
		t.Fatalf("a gated agent ran without a permit")
	}
	if _, err := c.Gate(api.GateParams{Ref: "kid", Op: "ungate"}); err != nil {
		t.Fatal(err)
	}
	drain(t, c)
	if kid = nodeOf(t, c, "kid"); kid.s().Counters.Turns != 2 {
		t.Fatalf("ungated kid did not run: %d turns", kid.s().Counters.Turns)
	}
}

// A pool of 2 holding 3 agents: the least recently used session is
// evicted (saved), and its next turn restores it (failure 2 of the earlier
// implementation).
func TestPoolEvictsLeastRecentlyUsed(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := newCoreWith(t, t.TempDir(), false, Config{Clock: clk, Pools: map[string]int{"small": 2}})
	for _, n := range []string{"a", "b", "c"} {
		mustCreate(t, c, api.CreateParams{Name: n, Pool: "small"})
	}
	turn := func(name string) {
		clk.Add(time.Second)
		send(t, c, name, "work "+name)
		drain(t, c)
	}
	turn("a")
	turn("b")
	turn("c")
	a := nodeOf(t, c, "a")
	if a.live != nil || a.s().SessionState != fsstore.SessionSuspended || len(a.s().StateBlob) == 0 {
		t.Fatalf("a was not evicted: live %v, %s, blob %d bytes", a.live != nil, a.s().SessionState, len(a.s().StateBlob))
	}
	if !strings.Contains(a.s().StateReason, "evicted") {
		t.Errorf("reason %q", a.s().StateReason)
	}
	turn("a") // restored from its blob; b is now the oldest
	if a = nodeOf(t, c, "a"); a.s().Counters.Turns != 2 || a.live == nil {
		t.Fatalf("a after restore: %d turns, live %v", a.s().Counters.Turns, a.live != nil)
	}
	if b := nodeOf(t, c, "b"); b.live != nil {
		t.Fatal("b should have been evicted for a")
	}
	live := 0
	for _, n := range []string{"a", "b", "c"} {
		if nodeOf(t, c, n).live != nil {
			live++
		}
	}
	if live != 2 {
		t.Fatalf("%d live sessions in a pool of 2", live)
	}
}

func TestBudgetGatesSubtreeAndTellsUser(t *testing.T) {
	c, _ := newCore(t, t.TempDir(), false)
	mustCreate(t, c, api.CreateParams{Name: "root", Budget: &fsstore.Budget{Tokens: 60}})
	send(t, c, "root", `!spawn_agent {"name":"kid","instructions":"`+strings.Repeat("x", 200)+`"}`)
	drain(t, c)
	for _, name := range []string{"root", "kid"} {
		n := nodeOf(t, c, name)
		if !n.s().Gated || !strings.Contains(n.s().StateReason, "budget of root exceeded") {
			t.Errorf("%s: gated %v, reason %q", name, n.s().Gated, n.s().StateReason)
		}
	}
	msgs, err := c.UserInbox(false)
	if err != nil || len(msgs) != 1 || !strings.Contains(msgs[0].Text, "budget of root exceeded") {
		t.Fatalf("user inbox: %v %v", msgs, err)
	}
	send(t, c, "kid", "more work")
	drain(t, c)
	if n := nodeOf(t, c, "kid").s().Counters.Turns; n != 0 {
		t.Fatalf("kid ran over budget: %d turns", n)
	}
	// Raising the budget and ungating lets the subtree go on.
	if _, err := c.SetBudget("root", fsstore.Budget{Tokens: 100000}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Gate(api.GateParams{Ref: "root", Op: "ungate", Recursive: true}); err != nil {
		t.Fatal(err)
	}
	drain(t, c)
	if n := nodeOf(t, c, "kid").s().Counters.Turns; n != 1 {
		t.Fatalf("kid after raising the budget: %d turns", n)
	}
	if got := pendingTexts(t, nodeOf(t, c, "kid")); len(got) != 0 {
		t.Fatalf("kid's messages were not delivered: %q", got)
	}
}

func TestPingPongGuard(t *testing.T) {
	c, _ := newCore(t, t.TempDir(), false)
	mustCreate(t, c, api.CreateParams{Name: "a"})
	mustCreate(t, c, api.CreateParams{Name: "b"})
	m := &fsstore.Message{From: nodeOf(t, c, "b").id(), FromName: "b", Kind: fsstore.KindMessage, Hops: DefaultMaxHops,
		Text: `!send_message {"recipient":"b","text":"again"}`}
	if _, err := c.send(m, nodeOf(t, c, "a")); err != nil {
		t.Fatal(err)
	}
	var out []provider.Chunk
	sub := c.Subscribe(nodeOf(t, c, "a").id())
	defer sub.Close()
	drain(t, c)
	for len(sub.C) > 0 {
		if e := <-sub.C; e.Type == "output" {
			out = append(out, e.Data.(provider.Chunk))
		}
	}
	found := false
	for _, ch := range out {
		found = found || (ch.Kind == "tool_result" && strings.Contains(ch.Text, "ping-pong guard"))
	}
	if !found {
		t.Fatalf("no guard refusal in %+v", out)
	}
	if got := pendingTexts(t, nodeOf(t, c, "b")); len(got) != 0 {
		t.Fatalf("b got %q past the guard", got)
	}
}

type failingProvider struct{ provider.Provider }

func (failingProvider) Create(ctx context.Context, cfg provider.Config) (provider.Session, error) {
	return nil, errors.New("model process exited with status 1")
}

// A provider that keeps failing: retries back off (1 s, 2 s, 4 s, 8 s),
// and the fifth failure within a minute gates the agent, with the reason
// recorded and USER told.
func TestRestartBackoffAndLimit(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := newCoreWith(t, t.TempDir(), false, Config{Clock: clk,
		Providers: provider.NewRegistry(failingProvider{script.New()})})
	mustCreate(t, c, api.CreateParams{Name: "flaky"})
	send(t, c, "flaky", "work")
	id := nodeOf(t, c, "flaky").id()
	for i, wait := range []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second} {
		if wait > 0 {
			clk.Add(wait - time.Millisecond)
			if len(c.Runnable()) != 0 {
				t.Fatalf("failure %d: retried before its %s backoff", i, wait)
			}
			clk.Add(time.Millisecond)
		}
		if got := c.Runnable(); len(got) != 1 || got[0] != id {
			t.Fatalf("failure %d: runnable %v, want the retry", i, got)
		}
		if err := c.RunTurn(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	n := nodeOf(t, c, "flaky")
	if !n.s().Gated || !strings.Contains(n.s().StateReason, "restart limit: 5 failed turns") {
		t.Fatalf("after 5 failures: gated %v, reason %q", n.s().Gated, n.s().StateReason)
	}
	if got := pendingTexts(t, n); len(got) != 1 {
		t.Fatalf("the inbox was not kept: %q", got)
	}
	clk.Add(time.Hour)
	if len(c.Runnable()) != 0 {
		t.Fatal("a gated agent was retried")
	}
	msgs, err := c.UserInbox(false)
	if err != nil || len(msgs) != 2 || !strings.Contains(msgs[0].Text, "retried with a growing delay") || !strings.Contains(msgs[1].Text, "now gated") {
		t.Fatalf("USER was told %v (%v), want the first failure and the limit", msgs, err)
	}
}
