package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"pgregory.net/rapid"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script"
)

// chaos wraps the script provider. Create, Restore, Send and Suspend fail
// when the test says so, and a failing Send may first run part of the
// prompt, as a model stream that stops part-way does.
type chaos struct {
	inner provider.Provider
	fail  func(op string) (bool, int)
}

func (p *chaos) Name() string { return "script" }

func (p *chaos) Create(ctx context.Context, cfg provider.Config) (provider.Session, error) {
	if f, _ := p.fail("create"); f {
		return nil, fmt.Errorf("chaos: create failed: %w", provider.ErrRetryable)
	}
	s, err := p.inner.Create(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &chaosSession{s, p}, nil
}

func (p *chaos) Restore(ctx context.Context, cfg provider.Config, state []byte) (provider.Session, error) {
	if f, _ := p.fail("restore"); f {
		return nil, fmt.Errorf("chaos: restore failed")
	}
	s, err := p.inner.Restore(ctx, cfg, state)
	if err != nil {
		return nil, err
	}
	return &chaosSession{s, p}, nil
}

type chaosSession struct {
	provider.Session
	p *chaos
}

func (s *chaosSession) Send(ctx context.Context, turn provider.Turn) (provider.TurnResult, error) {
	if f, keep := s.p.fail("send"); f {
		lines := strings.Split(turn.Prompt, "\n")
		turn.Prompt = strings.Join(lines[:min(keep, len(lines))], "\n")
		s.Session.Send(ctx, turn) // the part that streamed before the cut
		return provider.TurnResult{}, fmt.Errorf("chaos: stream stopped part-way: %w", provider.ErrProtocol)
	}
	return s.Session.Send(ctx, turn)
}

func (s *chaosSession) Suspend(ctx context.Context) ([]byte, error) {
	if f, _ := s.p.fail("suspend"); f {
		s.Session.Stop()
		return nil, errors.New("chaos: suspend failed")
	}
	return s.Session.Suspend(ctx)
}

// propertyHome is a fresh home for one rapid run: on tmpfs when there is
// one, because this test is about the orchestrator's logic (the sim
// package is about durability) and must run many steps.
func propertyHome(t *rapid.T) string {
	base := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		base = "/dev/shm"
	}
	dir, err := os.MkdirTemp(base, "substrat-prop-")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

type propModel struct {
	home     string
	clk      *fakeClock
	core     *Core
	chaos    *chaos
	t        *rapid.T
	counters map[string]fsstore.Counters
	names    int
}

func (m *propModel) start(unclean bool) {
	st, err := fsstore.Open(m.home, fsstore.Options{Now: m.clk.Now})
	if err != nil {
		m.t.Fatal(err)
	}
	m.core = New(Config{Store: st, Providers: provider.NewRegistry(m.chaos), Clock: m.clk,
		Pools: map[string]int{DefaultPool: 3}, MaxHops: 6})
	if _, err := m.core.Recover(context.Background(), unclean); err != nil {
		m.t.Fatal(err)
	}
}

func (m *propModel) agents() []*node {
	m.core.mu.Lock()
	defer m.core.mu.Unlock()
	out := make([]*node, 0, len(m.core.nodes))
	for _, n := range m.core.nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b *node) int { return strings.Compare(a.id(), b.id()) })
	return out
}

func (m *propModel) pick(t *rapid.T, label string) *node {
	all := m.agents()
	if len(all) == 0 {
		t.Skip("no agents yet")
	}
	return rapid.SampledFrom(all).Draw(t, label)
}

// scriptLine draws one line of a script-provider message.
func (m *propModel) scriptLine(t *rapid.T) string {
	names := []string{"USER", "parent", "self"}
	for _, n := range m.agents() {
		names = append(names, n.s().Name)
	}
	name := rapid.SampledFrom(names).Draw(t, "name")
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	switch rapid.IntRange(0, 11).Draw(t, "line") {
	case 0:
		m.names++
		return fmt.Sprintf(`!spawn_agent {"name":"n%d","instructions":%s}`, m.names,
			q(rapid.SampledFrom([]string{"hello", `!complete {"result":"done"}`, `!send_message {"recipient":"parent","text":"hi"}`}).Draw(t, "instr")))
	case 1:
		return fmt.Sprintf(`!send_message {"recipient":%s,"text":%s}`, q(name),
			q(rapid.SampledFrom([]string{"ping", `!send_message {"recipient":"parent","text":"pong"}`}).Draw(t, "text")))
	case 2:
		return `!complete {"result":"finished"}`
	case 3:
		return fmt.Sprintf(`!subscribe {"agent_name":%s,"transition":%s,"once":%v}`, q(name),
			q(rapid.SampledFrom([]string{"IDLE->BUSY", "*->TERMINATED", "BUSY->*", "*->WAITING"}).Draw(t, "tr")), rapid.Bool().Draw(t, "once"))
	case 4:
		return fmt.Sprintf(`!%s {"agent_name":%s}`, rapid.SampledFrom([]string{"gate", "ungate", "permit_turn", "poke"}).Draw(t, "gate"), q(name))
	case 5:
		return fmt.Sprintf(`!remind_me {"reason":"r","timeout":%d}`, rapid.IntRange(1, 120).Draw(t, "secs"))
	case 6:
		return `!check_inbox {}`
	case 7:
		return `!list_children {}`
	case 8:
		return `!broadcast {"text":"all"}`
	case 9:
		return fmt.Sprintf(`!set_agent_metadata {"agent_name":%s,"key":"k","value":"v"}`, q(name))
	case 10:
		return `!nonsense {"x":1}`
	default:
		return "just text"
	}
}

func (m *propModel) check(t *rapid.T) {
	c := m.core
	c.mu.Lock()
	defer c.mu.Unlock()
	byParent := map[string][]string{}
	for id, n := range c.nodes {
		if n.id() != id {
			t.Fatalf("node %s filed under %s", n.id(), id)
		}
		// No agent is stuck BUSY and no deferred work is left between steps.
		if n.busy || n.turn != nil || n.heldBy != "" || n.s().AgentState == fsstore.AgentBusy {
			t.Fatalf("%s left busy=%v turn=%v heldBy=%q state=%s", n.s().Name, n.busy, n.turn != nil, n.heldBy, n.s().AgentState)
		}
		if n.s().ParentID != "" {
			if c.nodes[n.s().ParentID] == nil {
				t.Fatalf("%s has a missing parent", n.s().Name)
			}
			byParent[n.s().ParentID] = append(byParent[n.s().ParentID], id)
		}
		// Counters never go backwards.
		prev := m.counters[id]
		if cur := n.s().Counters; cur.Turns < prev.Turns || cur.InputTokens < prev.InputTokens || cur.OutputTokens < prev.OutputTokens {
			t.Fatalf("%s counters went backwards: %+v -> %+v", n.s().Name, prev, cur)
		}
		m.counters[id] = n.s().Counters
		if n.live != nil && n.s().SessionState != fsstore.SessionActive {
			t.Fatalf("%s has a live session but is %s", n.s().Name, n.s().SessionState)
		}
	}
	for id, n := range c.nodes {
		if !slices.Equal(slices.Sorted(slices.Values(n.children)), slices.Sorted(slices.Values(byParent[id]))) {
			t.Fatalf("%s children %v, parent_ids say %v", n.s().Name, n.children, byParent[id])
		}
		for seen, p := (map[string]bool{}), n; p != nil; p = c.nodes[p.s().ParentID] {
			if seen[p.id()] {
				t.Fatalf("cycle through %s", n.s().Name)
			}
			seen[p.id()] = true
		}
	}
	// The subscription index agrees with the sessions.
	want := map[string]map[string]bool{}
	for id, n := range c.nodes {
		for _, s := range n.s().Subscriptions {
			if want[s.Target] == nil {
				want[s.Target] = map[string]bool{}
			}
			want[s.Target][id] = true
		}
	}
	if !reflect.DeepEqual(want, c.subsByTarget) && !(len(want) == 0 && len(c.subsByTarget) == 0) {
		t.Fatalf("subscription index %v, sessions say %v", c.subsByTarget, want)
	}
	live := 0
	for _, n := range c.nodes {
		if n.live != nil {
			live++
		}
	}
	if live > c.poolLimit(DefaultPool) {
		t.Fatalf("%d live sessions in a pool of %d", live, c.poolLimit(DefaultPool))
	}
	// Memory agrees with the disk, and each inbox with its events.
	st, err := fsstore.Open(m.home, fsstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.Scan(context.Background(), fsstore.ScanOptions{Deep: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Agents) != len(c.nodes) {
		t.Fatalf("disk has %d agents, memory %d", len(res.Agents), len(c.nodes))
	}
	for _, a := range res.Agents {
		n := c.nodes[a.ID()]
		if n == nil {
			t.Fatalf("agent %s on disk only", a.ID())
		}
		mem, _ := fsstore.EncodeSession(n.s())
		disk, _ := fsstore.EncodeSession(a.Session())
		if string(mem) != string(disk) {
			t.Fatalf("%s differs from disk:\nmemory %s\ndisk   %s", n.s().Name, mem, disk)
		}
		delivered := map[string]bool{}
		err := fsstore.ReadEvents(st.FS(), a.Files().Events(), func(e fsstore.Event) error {
			if e.Type == fsstore.EvDelivered {
				var d fsstore.Delivered
				if err := e.Decode(&d); err != nil {
					return err
				}
				for _, id := range d.IDs {
					delivered[id] = true
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		cur, _, err := fsstore.ReadInbox(st.FS(), a.Files().Inbox(), fsstore.InboxCur)
		if err != nil {
			t.Fatal(err)
		}
		pending, _, _ := a.Pending()
		for _, msg := range cur {
			if !delivered[msg.ID] {
				t.Fatalf("%s: message %s in cur/ without a delivered event", n.s().Name, msg.ID)
			}
			delete(delivered, msg.ID)
		}
		for _, msg := range pending {
			if delivered[msg.ID] {
				t.Fatalf("%s: message %s delivered but still in new/", n.s().Name, msg.ID)
			}
		}
		a.Close()
	}
}

// TestOrchestratorProperties drives the real core with random actions and
// a provider that fails on a schedule, and checks the invariants after
// every step.
func TestOrchestratorProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := &propModel{clk: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, t: t, counters: map[string]fsstore.Counters{}}
		m.home = propertyHome(t)
		defer os.RemoveAll(m.home)
		m.chaos = &chaos{inner: script.New(), fail: func(op string) (bool, int) {
			return rapid.IntRange(0, 9).Draw(t, "fail-"+op) == 0, rapid.IntRange(0, 3).Draw(t, "keep")
		}}
		m.start(false)
		ctx := context.Background()
		t.Repeat(map[string]func(*rapid.T){
			"createRoot": func(t *rapid.T) {
				m.names++
				if _, err := m.core.CreateAgent(api.CreateParams{Name: fmt.Sprintf("r%d", m.names)}); err != nil {
					t.Fatal(err)
				}
			},
			"userSend": func(t *rapid.T) {
				n := m.pick(t, "to")
				lines := rapid.SliceOfN(rapid.Custom(m.scriptLine), 1, 4).Draw(t, "lines")
				_, err := m.core.Send(api.SendParams{To: n.id(), Text: strings.Join(lines, "\n")})
				if err != nil && !n.terminated() {
					t.Fatalf("send to %s: %v", n.s().Name, err)
				}
			},
			"turn": func(t *rapid.T) {
				ids := m.core.Runnable()
				if len(ids) == 0 {
					t.Skip("nothing runnable")
				}
				if err := m.core.RunTurn(ctx, rapid.SampledFrom(ids).Draw(t, "agent")); err != nil {
					t.Fatalf("turn: %v", err)
				}
			},
			"tick": func(t *rapid.T) {
				m.core.Tick(m.clk.Add(time.Duration(rapid.IntRange(1, 90).Draw(t, "secs")) * time.Second))
			},
			"suspend": func(t *rapid.T) {
				n := m.pick(t, "agent")
				m.core.Suspend(ctx, n.id()) // may be refused; the invariants must hold either way
			},
			"resume": func(t *rapid.T) {
				n := m.pick(t, "agent")
				m.core.Resume(ctx, n.id())
			},
			"terminate": func(t *rapid.T) {
				n := m.pick(t, "agent")
				m.core.Terminate(ctx, api.TerminateParams{Ref: n.id(), Recursive: rapid.Bool().Draw(t, "recursive")})
			},
			"restart": func(t *rapid.T) {
				m.start(true) // the old core is dropped as a crash would drop it
			},
			"": m.check,
		})
	})
}
