package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	wire "github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider/fakeapi"
)

// teamModel plays the model of a team of Claude Code agents: a lead that
// spawns two workers, workers that write a file with the CLI's Write tool,
// run a command on it with Bash and report the output with complete, and
// a lead that sends USER a summary once both have reported. Each agent's
// role is in its instructions (the system prompt). Workers can be held
// just before they report, so that the daemon can be killed there.
type teamModel struct {
	gate *holdGate // workers wait before they complete
}

var roleRE = regexp.MustCompile(`ROLE=worker name=(\w+) word=(\w+)`)

func (m *teamModel) reply(req fakeapi.ClaudeRequest) fakeapi.ClaudeOut {
	sys := string(req.System)
	last := req.Last()
	var result *fakeapi.Block
	for _, b := range last.Blocks() {
		if b.Type == "tool_result" {
			result = &b
		}
	}
	if w := roleRE.FindStringSubmatch(sys); w != nil {
		return m.worker(w[1], w[2], result, len(req.Messages))
	}
	if strings.Contains(sys, "ROLE=lead") {
		return m.lead(req, result)
	}
	if strings.Contains(sys, "ROLE=loner") {
		if result != nil {
			return fakeapi.ClaudeOut{Text: "could not write there: " + fakeapi.ResultText(*result)}
		}
		return fakeapi.ClaudeOut{ToolUse: &fakeapi.Call{ID: "toolu_loner_write", Name: "Write",
			Args: `{"file_path":"/tmp/substrat-e2e-outside/planted.txt","content":"should not be here\n"}`}}
	}
	return fakeapi.ClaudeOut{Text: "ok"}
}

func (m *teamModel) worker(name, word string, result *fakeapi.Block, n int) fakeapi.ClaudeOut {
	// Tool-use ids are unique in a conversation (the CLI treats a repeated
	// one as interrupted); the step is their prefix.
	id := func(step string) string { return fmt.Sprintf("toolu_%s_%s_%d", name, step, n) }
	step := func(s string) bool { return strings.HasPrefix(result.ToolUseID, "toolu_"+name+"_"+s+"_") }
	switch {
	case result == nil:
		return fakeapi.ClaudeOut{ToolUse: &fakeapi.Call{ID: id("write"), Name: "Write",
			Args: fmt.Sprintf(`{"file_path":"/workspace/repo/%s.txt","content":"%s\n"}`, name, word)}}
	case step("write"):
		return fakeapi.ClaudeOut{ToolUse: &fakeapi.Call{ID: id("bash"), Name: "Bash",
			Args: fmt.Sprintf(`{"command":"tr a-z A-Z < /workspace/repo/%s.txt && ls /workspace/repo","description":"shout the word"}`, name)}}
	case step("bash"):
		m.gate.wait(name) // the daemon is killed meanwhile
		out, _ := json.Marshal(map[string]string{"result": fakeapi.ResultText(*result)})
		return fakeapi.ClaudeOut{ToolUse: &fakeapi.Call{ID: id("complete"), Name: "mcp__substrat__complete", Args: string(out)}}
	}
	return fakeapi.ClaudeOut{Text: "done"}
}

func (m *teamModel) lead(req fakeapi.ClaudeRequest, result *fakeapi.Block) fakeapi.ClaudeOut {
	spawn := func(id, name, word string) fakeapi.ClaudeOut {
		in, _ := json.Marshal(map[string]string{"name": name, "instructions": fmt.Sprintf("ROLE=worker name=%s word=%s. Write the word to a file and report what shouting it gives.", name, word)})
		return fakeapi.ClaudeOut{ToolUse: &fakeapi.Call{ID: id, Name: "mcp__substrat__spawn_agent", Args: string(in)}}
	}
	conv := req.Conversation()
	switch {
	case result != nil && result.ToolUseID == "toolu_lead_spawn1":
		return spawn("toolu_lead_spawn2", "w2", "two")
	case result != nil && result.ToolUseID == "toolu_lead_spawn2":
		return fakeapi.ClaudeOut{Text: "Spawned w1 and w2."}
	case result != nil && result.ToolUseID == "toolu_lead_report":
		return fakeapi.ClaudeOut{Text: "Reported to USER."}
	case strings.Contains(last(req), "build the team"):
		return spawn("toolu_lead_spawn1", "w1", "one")
	case strings.Contains(conv, "ONE") && strings.Contains(conv, "TWO") && !strings.Contains(conv, "toolu_lead_report"):
		in, _ := json.Marshal(map[string]string{"recipient": "USER", "text": "summary: w1 said ONE, w2 said TWO"})
		return fakeapi.ClaudeOut{ToolUse: &fakeapi.Call{ID: "toolu_lead_report", Name: "mcp__substrat__send_message", Args: string(in)}}
	}
	return fakeapi.ClaudeOut{Text: "Waiting for the team."}
}

func last(req fakeapi.ClaudeRequest) string { return req.Last().Text() }

// TestClaudeTeamE2E runs a team of real Claude Code CLIs doing work in
// their bwrap sandbox, against the loopback fake API: a lead in a
// workspace with a linked repository spawns two workers over MCP; each
// writes a file with the CLI's own Write tool and runs a command on it
// with Bash, both really executed by the CLI inside the sandbox, and
// reports the command's output with complete; the lead sends USER a
// summary. The daemon is killed with SIGKILL after the spawns and before
// the completes: after a restart the team finishes, the files are in the
// repository, nothing was written outside it, no worker was spawned twice,
// and the resumed sessions carry their history. Outside a sandbox, in the
// CLI's safe mode, a write outside the agent's directory is refused by
// the CLI and the turn goes on.
func TestClaudeTeamE2E(t *testing.T) {
	needBwrap(t)
	cli := claudeCLI(t)
	model := &teamModel{gate: newHoldGate()}
	api := fakeapi.NewClaude(model.reply)
	t.Cleanup(api.Close)
	defer func() {
		if t.Failed() {
			for i, r := range api.Requests() {
				role := "?"
				if m := roleRE.FindStringSubmatch(string(r.System)); m != nil {
					role = m[1]
				} else if strings.Contains(string(r.System), "ROLE=lead") {
					role = "lead"
				}
				var tail []string
				for _, m := range r.Messages[max(0, len(r.Messages)-3):] {
					var kinds []string
					for _, b := range m.Blocks() {
						kinds = append(kinds, b.Type+":"+b.ToolUseID+b.ID+":"+strings.ReplaceAll(fmt.Sprintf("%.60s", b.Text+fakeapi.ResultText(b)), "\n", " "))
					}
					tail = append(tail, m.Role+"["+strings.Join(kinds, ", ")+"]")
				}
				t.Logf("request %d (%s, %d messages): %s", i, role, len(r.Messages), strings.Join(tail, " | "))
			}
		}
	}()
	d := runDaemon(t, claudeEnv(cli, api.URL)...)
	layout := fsstore.Layout{Home: d.home}

	repo := t.TempDir()
	if err := os.WriteFile(filepath.Join(repo, "README"), []byte("the team's repository\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := "/tmp/substrat-e2e-outside"
	os.RemoveAll(outside)
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "team", Network: true}, nil)
	mustCall(d, wire.WorkspaceLink, wire.LinkParams{Workspace: "team", Source: repo, Target: "repo", Mode: "rw"}, nil)
	var lead wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "lead", Provider: "claude", Workspace: "team",
		Instructions: "ROLE=lead. Lead a team of two workers."}, &lead)

	if res := d.send("lead", "Please build the team."); res.Text != "Spawned w1 and w2." {
		t.Fatalf("the lead's first turn: %q", res.Text)
	}
	leadSession := d.sessionID(lead.ID)

	// Both workers run their first turn; hold them before they report,
	// and kill the daemon there.
	model.gate.waitHeld(d, 2, 120*time.Second)
	for _, w := range []string{"w1", "w2"} {
		if b, err := os.ReadFile(filepath.Join(repo, w+".txt")); err != nil || len(b) == 0 {
			t.Fatalf("%s's Write did not reach the repository before the kill: %q, %v", w, b, err)
		}
	}
	d.kill()
	model.gate.open()
	before := len(api.Requests())
	d.start()

	// The team finishes: USER gets the summary.
	summary := d.waitInbox("summary:", 180*time.Second)
	if !strings.Contains(summary, "ONE") || !strings.Contains(summary, "TWO") {
		t.Errorf("summary %q", summary)
	}

	// The work is in the repository, made by the CLI's own tools in the
	// sandbox; nothing outside it.
	for w, word := range map[string]string{"w1": "one", "w2": "two"} {
		if b, err := os.ReadFile(filepath.Join(repo, w+".txt")); err != nil || string(b) != word+"\n" {
			t.Errorf("%s.txt: %q, %v", w, b, err)
		}
	}
	if _, err := os.Stat("/workspace"); err == nil {
		t.Errorf("/workspace exists on the host")
	}
	// No worker was spawned twice.
	agents := d.agents()
	var workers []string
	for path := range agents {
		if strings.HasPrefix(path, "lead/") {
			workers = append(workers, path)
		}
	}
	if len(workers) != 2 {
		t.Errorf("workers %q, want lead/w1 and lead/w2 once each", workers)
	}
	for _, w := range []string{"lead/w1", "lead/w2"} {
		a := agents[w]
		if a.AgentState != fsstore.AgentTerminated {
			t.Errorf("%s is %s, want TERMINATED after complete", w, a.AgentState)
		}
		var insp wire.InspectResult
		mustCall(d, wire.AgentInspect, wire.RefParams{Ref: w}, &insp)
		if insp.Session.Permissions == nil || insp.Session.Permissions.Mode != fsstore.ModeFull || insp.Session.Workspace != "USER/team" {
			t.Errorf("%s: workspace %q permissions %+v, want the lead's sandbox with full permission", w, insp.Session.Workspace, insp.Session.Permissions)
		}
	}
	// The resumed sessions carry their history: the lead's session is
	// the same, and its requests after the restart hold its first turn;
	// a worker's hold the tool results from before the kill.
	if got := d.sessionID(lead.ID); got != leadSession {
		t.Errorf("the lead's session changed from %s to %s", leadSession, got)
	}
	var leadAfter, workerAfter bool
	for _, r := range api.Requests()[before:] {
		conv := r.Conversation()
		if strings.Contains(string(r.System), "ROLE=lead") && strings.Contains(conv, "Please build the team.") {
			leadAfter = true
		}
		if roleRE.MatchString(string(r.System)) && strings.Count(conv, "ROLE=worker") >= 2 {
			workerAfter = true // the prompt again, after the first turn's history
		}
	}
	if !leadAfter || !workerAfter {
		t.Errorf("resumed requests with their history: lead %v, worker %v", leadAfter, workerAfter)
	}
	t.Logf("%d API requests (%d after the restart); USER got %q", len(api.Requests()), len(api.Requests())-before, summary)

	// Outside a sandbox, in the CLI's safe mode with no approver, a write
	// outside the agent's directory is refused by the CLI; the turn goes
	// on and the refusal is recorded. (With an approver, the default, it
	// would be asked: approval_e2e_test.go.)
	dir := t.TempDir()
	var loner wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "loner", Provider: "claude", WorkDir: dir,
		Instructions: "ROLE=loner.", Permissions: &fsstore.Permissions{Mode: fsstore.ModeDefault, Approver: fsstore.ApproverDeny}}, &loner)
	res := d.send("loner", "write outside")
	if !strings.Contains(res.Text, "could not write there") {
		t.Errorf("the loner's turn: %q", res.Text)
	}
	if _, err := os.Stat(filepath.Join(outside, "planted.txt")); err == nil {
		t.Error("the CLI wrote outside the agent's directory")
	}
	events, err := os.ReadFile(layout.Agent(loner.ID).Events())
	if err != nil || !strings.Contains(string(events), `"type":"tool_denied"`) || !strings.Contains(string(events), `"tool":"Write"`) {
		t.Errorf("no tool_denied event for the refused Write: %v\n%s", err, events)
	}
}
