package supervisor

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script"
)

func testLog(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// newCore opens home and recovers a core on it, as a daemon start does.
func newCore(t *testing.T, home string, unclean bool) (*Core, *api.Report) {
	t.Helper()
	st, err := fsstore.Open(home, fsstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := New(Config{Store: st, Providers: provider.NewRegistry(script.New()), Log: testLog(t)})
	rep, err := c.Recover(context.Background(), unclean)
	if err != nil {
		t.Fatal(err)
	}
	return c, rep
}

// drain runs turns until no agent is runnable.
func drain(t *testing.T, c *Core) {
	t.Helper()
	for range 100 {
		ids := c.Runnable()
		if len(ids) == 0 {
			return
		}
		for _, id := range ids {
			if err := c.RunTurn(context.Background(), id); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Fatal("still runnable after 100 rounds")
}

func mustCreate(t testing.TB, c *Core, p api.CreateParams) api.AgentInfo {
	t.Helper()
	a, err := c.CreateAgent(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func nodeOf(t *testing.T, c *Core, ref string) *node {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.resolveLocked(ref)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func call(name string, id string, args any) provider.ToolCall {
	b, _ := json.Marshal(args)
	return provider.ToolCall{ID: id, Name: name, Args: b}
}

// A spawn re-executed after a crash with the same tool-use id returns the
// child made the first time, and the child's instructions arrive once.
func TestIdempotentSpawnAcrossCrash(t *testing.T) {
	home := t.TempDir()
	c1, _ := newCore(t, home, false)
	mustCreate(t, c1, api.CreateParams{Name: "root"})
	tt := newTurnTools(c1, nodeOf(t, c1, "root"), nil)
	spawn := call("spawn_agent", "toolu_1", map[string]string{"name": "kid", "instructions": "do it"})
	if r := tt.CallTool(context.Background(), spawn); r.IsError {
		t.Fatal(r.Text)
	}
	// Crash: c1 is dropped mid-turn.
	c2, rep := newCore(t, home, true)
	if rep.Agents != 2 {
		t.Fatalf("recovered %d agents, want 2", rep.Agents)
	}
	tt2 := newTurnTools(c2, nodeOf(t, c2, "root"), nil)
	r := tt2.CallTool(context.Background(), spawn)
	if r.IsError || !strings.Contains(r.Text, "already exists") {
		t.Fatalf("re-executed spawn: %+v", r)
	}
	if n := len(c2.List()); n != 2 {
		t.Fatalf("%d agents after re-executed spawn, want 2 (no twin)", n)
	}
	msgs, _, _ := nodeOf(t, c2, "kid").agent.Pending()
	if len(msgs) != 1 || msgs[0].Text != "do it" {
		t.Fatalf("kid's inbox: %v", msgs)
	}
	// A different tool-use id with the same name is a conflict, not a twin.
	r = tt2.CallTool(context.Background(), call("spawn_agent", "toolu_2", map[string]string{"name": "kid", "instructions": "x"}))
	if !r.IsError || !strings.Contains(r.Text, "already exists") {
		t.Fatalf("second spawn with a new id: %+v", r)
	}
}

// A message sent to a child in the same turn that spawned it is durable
// even if the daemon dies before the turn ends (failure 3 of the earlier
// implementation), and the child does not start before the turn ends.
func TestMessageToChildSpawnedInSameTurn(t *testing.T) {
	home := t.TempDir()
	c1, _ := newCore(t, home, false)
	mustCreate(t, c1, api.CreateParams{Name: "root"})
	tt := newTurnTools(c1, nodeOf(t, c1, "root"), nil)
	tt.CallTool(context.Background(), call("spawn_agent", "t1", map[string]string{"name": "kid", "instructions": "start"}))
	if r := tt.CallTool(context.Background(), call("send_message", "t2", map[string]string{"recipient": "kid", "text": "second"})); r.IsError {
		t.Fatal(r.Text)
	}
	if got := c1.Runnable(); len(got) != 0 {
		t.Fatalf("runnable during the parent's turn: %v", got)
	}
	c2, rep := newCore(t, home, true)
	msgs, _, _ := nodeOf(t, c2, "kid").agent.Pending()
	if len(msgs) != 2 || msgs[1].Text != "second" {
		t.Fatalf("kid's inbox after crash: %v", msgs)
	}
	found := false
	for _, r := range rep.Redelivered {
		found = found || (r.Path == "root/kid" && r.Messages == 2)
	}
	if !found {
		t.Errorf("recovery report does not redeliver kid's 2 messages: %+v", rep.Redelivered)
	}
}

func TestRecoverySuspendsAndRequeues(t *testing.T) {
	home := t.TempDir()
	c1, _ := newCore(t, home, false)
	mustCreate(t, c1, api.CreateParams{Name: "root"})
	if _, err := c1.Send(api.SendParams{To: "root", Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	drain(t, c1)
	root := nodeOf(t, c1, "root")
	if root.s().SessionState != fsstore.SessionActive {
		t.Fatalf("root session %s, want ACTIVE", root.s().SessionState)
	}
	// Leave a BUSY agent and an undelivered message behind, then crash.
	if err := c1.commit(root, fsstore.StateChange{AgentState: fsstore.AgentBusy}); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Send(api.SendParams{To: "root", Text: "pending"}); err != nil {
		t.Fatal(err)
	}
	c2, rep := newCore(t, home, true)
	r2 := nodeOf(t, c2, "root")
	if r2.s().SessionState != fsstore.SessionSuspended || r2.s().AgentState != fsstore.AgentIdle {
		t.Fatalf("after recovery: %s/%s, want SUSPENDED/IDLE", r2.s().AgentState, r2.s().SessionState)
	}
	if len(rep.Suspended) != 1 || len(rep.Resumed) != 1 || len(rep.Redelivered) != 1 {
		t.Fatalf("report: %+v", rep)
	}
	msgs, _, _ := r2.agent.Pending()
	if len(msgs) != 2 || msgs[0].Text != "pending" || msgs[1].Text != RecoveryPrompt {
		t.Fatalf("pending after recovery: %v", msgs)
	}
	drain(t, c2)
	r2 = nodeOf(t, c2, "root")
	if r2.s().Counters.Turns != 2 || r2.s().SessionState != fsstore.SessionActive {
		t.Fatalf("after the recovered turn: %+v", r2.s())
	}
	// The script session resumed under its saved provider id.
	if r2.s().ProviderSessionID != "script-"+r2.id() {
		t.Errorf("provider session id %q", r2.s().ProviderSessionID)
	}
}

func TestOneHopRouting(t *testing.T) {
	c, _ := newCore(t, t.TempDir(), false)
	mustCreate(t, c, api.CreateParams{Name: "root"})
	mustCreate(t, c, api.CreateParams{Name: "a", Parent: "root"})
	mustCreate(t, c, api.CreateParams{Name: "b", Parent: "root"})
	mustCreate(t, c, api.CreateParams{Name: "a1", Parent: "root/a"})
	send := func(from, to string) provider.ToolResult {
		tt := newTurnTools(c, nodeOf(t, c, from), nil)
		return tt.CallTool(context.Background(), call("send_message", "x", map[string]string{"recipient": to, "text": "hi"}))
	}
	for _, ok := range [][2]string{{"root/a", "b"}, {"root/a", "root"}, {"root/a", "a1"}, {"root/a/a1", "a"}, {"root", "a"}, {"root", "USER"}} {
		if r := send(ok[0], ok[1]); r.IsError {
			t.Errorf("%s -> %s refused: %s", ok[0], ok[1], r.Text)
		}
	}
	for _, bad := range [][2]string{{"root", "a1"}, {"root/a/a1", "root"}, {"root/a/a1", "b"}, {"root/a", "USER"}, {"root/a", "nobody"}} {
		if r := send(bad[0], bad[1]); !r.IsError {
			t.Errorf("%s -> %s allowed: %s", bad[0], bad[1], r.Text)
		}
	}
}

func TestToolErrorsAreResults(t *testing.T) {
	c, _ := newCore(t, t.TempDir(), false)
	mustCreate(t, c, api.CreateParams{Name: "root"})
	tt := newTurnTools(c, nodeOf(t, c, "root"), nil)
	for _, tc := range []struct {
		call provider.ToolCall
		want string
	}{
		{provider.ToolCall{Name: "nope"}, "unknown tool"},
		{provider.ToolCall{Name: "spawn_agent", Args: json.RawMessage(`{"name":1}`)}, "bad arguments"},
		{provider.ToolCall{Name: "spawn_agent", Args: json.RawMessage(`{"name":"x","instructions":"y","extra":1}`)}, "unknown field"},
		{provider.ToolCall{Name: "spawn_agent", Args: json.RawMessage(`{"name":"../x","instructions":"y"}`)}, "contains '..'"},
		{provider.ToolCall{Name: "send_message", Args: json.RawMessage(`{"recipient":"USER","text":""}`)}, "empty"},
		{provider.ToolCall{Name: "inspect_agent", Args: json.RawMessage(`{"name":"ghost"}`)}, "no agent"},
		{provider.ToolCall{Name: "check_inbox", Args: json.RawMessage(`not json`)}, "bad arguments"},
	} {
		r := tt.CallTool(context.Background(), tc.call)
		if !r.IsError || !strings.Contains(r.Text, tc.want) {
			t.Errorf("%s(%s): %+v, want an error with %q", tc.call.Name, tc.call.Args, r, tc.want)
		}
	}
}

func TestTransitions(t *testing.T) {
	s := &fsstore.Session{Name: "x", AgentState: fsstore.AgentIdle, SessionState: fsstore.SessionCreated}
	if err := checkTransition(s, fsstore.StateChange{AgentState: fsstore.AgentWaiting}); err == nil {
		t.Error("IDLE -> WAITING allowed")
	}
	if err := checkTransition(s, fsstore.StateChange{SessionState: fsstore.SessionSuspended}); err == nil {
		t.Error("CREATED -> SUSPENDED allowed")
	}
	s.AgentState = fsstore.AgentTerminated
	if err := checkTransition(s, fsstore.StateChange{AgentState: fsstore.AgentIdle}); err == nil {
		t.Error("TERMINATED -> IDLE allowed")
	}
	s.AgentState = fsstore.AgentBusy
	if err := checkTransition(s, fsstore.StateChange{AgentState: fsstore.AgentIdle, SessionState: fsstore.SessionActive}); err != nil {
		t.Error(err)
	}
}

func TestCompleteReportsToParentAndEnds(t *testing.T) {
	c, _ := newCore(t, t.TempDir(), false)
	mustCreate(t, c, api.CreateParams{Name: "root"})
	if _, err := c.Send(api.SendParams{To: "root", Text: `!spawn_agent {"name":"kid","instructions":"!complete {\"result\":\"42\"}"}`}); err != nil {
		t.Fatal(err)
	}
	drain(t, c)
	kid := nodeOf(t, c, "kid")
	if kid.s().AgentState != fsstore.AgentTerminated || kid.s().SessionState != fsstore.SessionTerminated {
		t.Fatalf("kid after complete: %s/%s", kid.s().AgentState, kid.s().SessionState)
	}
	root := nodeOf(t, c, "root")
	if root.s().Counters.Turns != 2 {
		t.Fatalf("root turns %d, want 2 (the spawn, then the result)", root.s().Counters.Turns)
	}
	if _, err := c.Send(api.SendParams{To: "kid", Text: "more"}); err == nil {
		t.Error("a terminated agent accepted a message")
	}
}
