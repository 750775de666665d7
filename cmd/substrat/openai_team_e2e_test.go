package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider/fakeapi"
	wire "github.com/substrat/substrat/supervisor/api"
)

// openaiTeam plays the model behind a team of --provider openai agents:
// the lead spawns two workers; a worker writes a draft with the shell
// tool, fixes it with edit_file, runs a command on it with shell, and
// reports with complete (held there until the gate opens); the lead sends
// USER a summary once both reported.
type openaiTeam struct {
	gate *holdGate // workers wait before they complete
}

func (m *openaiTeam) reply(req fakeapi.OpenAIRequest) fakeapi.OpenAIOut {
	sys, last := req.System(), req.Last()
	n := len(req.Messages)
	call := func(prefix, name string, args any) fakeapi.OpenAIOut {
		b, _ := json.Marshal(args)
		return fakeapi.OpenAIOut{Calls: []fakeapi.Call{{ID: fmt.Sprintf("%s_%d", prefix, n), Name: name, Args: string(b)}}}
	}
	after := func(prefix string) bool { return last.Role == "tool" && strings.HasPrefix(last.ToolCallID, prefix+"_") }
	if w := roleRE.FindStringSubmatch(sys); w != nil {
		name, word := w[1], w[2]
		file := "repo/" + name + ".txt"
		switch {
		case last.Role == "user":
			return call("draft", "shell", map[string]string{"command": "echo draft > " + file + " && pwd"})
		case after("draft"):
			return call("edit", "edit_file", map[string]string{"path": file, "old_string": "draft", "new_string": word})
		case after("edit"):
			return call("run", "shell", map[string]string{"command": "tr a-z A-Z < " + file})
		case after("run"):
			m.gate.wait(name)
			out := strings.TrimSpace(strings.Split(last.Text(), "[exit status")[0])
			return call("complete", "complete", map[string]string{"result": out})
		}
		return fakeapi.OpenAIOut{Text: "done"}
	}
	conv := req.Conversation()
	switch {
	case after("spawn1"):
		return call("spawn2", "spawn_agent", map[string]string{"name": "w2", "instructions": "ROLE=worker name=w2 word=two"})
	case after("spawn2"):
		return fakeapi.OpenAIOut{Text: "Spawned w1 and w2."}
	case after("report"):
		return fakeapi.OpenAIOut{Text: "Reported."}
	case strings.Contains(last.Text(), "build the team"):
		return call("spawn1", "spawn_agent", map[string]string{"name": "w1", "instructions": "ROLE=worker name=w1 word=one"})
	case strings.Contains(conv, "ONE") && strings.Contains(conv, "TWO") && !strings.Contains(conv, "report_"):
		return call("report", "send_message", map[string]string{"recipient": "USER", "text": "summary: ONE and TWO"})
	}
	return fakeapi.OpenAIOut{Text: "Waiting."}
}

// TestOpenAITeamE2E is the team of TestClaudeTeamE2E on --provider openai
// against a loopback chat-completions fake: the workers do their work with
// the daemon's shell and edit_file tools in the lead's sandbox, the daemon
// is killed with SIGKILL before they report, and the team finishes after
// a restart.
func TestOpenAITeamE2E(t *testing.T) {
	model := &openaiTeam{gate: newHoldGate()}
	api := fakeapi.NewOpenAI(model.reply)
	t.Cleanup(api.Close)
	defer func() {
		if t.Failed() {
			for i, r := range api.Requests() {
				t.Logf("request %d: %.120s | last %s %q %q", i, r.System(), r.Last().Role, r.Last().ToolCallID, r.Last().Text())
			}
		}
	}()
	d := runDaemon(t, "OPENAI_BASE_URL="+api.URL, "OPENAI_API_KEY=sk-fake", "OPENAI_MODEL=fake-model")

	repo := t.TempDir()
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "team"}, nil)
	mustCall(d, wire.WorkspaceLink, wire.LinkParams{Workspace: "team", Source: repo, Target: "repo", Mode: "rw"}, nil)
	var lead wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "lead", Provider: "openai", Workspace: "team", Instructions: "ROLE=lead"}, &lead)
	if res := d.send("lead", "Please build the team."); res.Text != "Spawned w1 and w2." {
		t.Fatalf("the lead's first turn: %q", res.Text)
	}
	// The work tools reached the model, and only where they may.
	var offered []string
	for _, r := range api.Requests() {
		if r.System() == "ROLE=lead" {
			offered = r.ToolNames()
		}
	}
	for _, want := range []string{"shell", "read_file", "write_file", "edit_file", "spawn_agent"} {
		if !strings.Contains(strings.Join(offered, " "), want) {
			t.Errorf("the lead was offered %q, not %s", offered, want)
		}
	}
	model.gate.waitHeld(d, 2, 60*time.Second)
	d.kill()
	model.gate.open()
	before := len(api.Requests())
	d.start()

	summary := d.waitInbox("summary:", 60*time.Second)
	for w, word := range map[string]string{"w1": "one", "w2": "two"} {
		if b, err := os.ReadFile(filepath.Join(repo, w+".txt")); err != nil || string(b) != word+"\n" {
			t.Errorf("%s.txt: %q, %v", w, b, err)
		}
	}
	agents := d.agents()
	if len(agents) != 3 {
		t.Errorf("agents %d, want the lead and two workers, none twice", len(agents))
	}
	events, _ := os.ReadFile(fsstore.Layout{Home: d.home}.Agent(agents["lead/w1"].ID).Events())
	for _, tool := range []string{`"tool":"shell"`, `"tool":"edit_file"`} {
		if !strings.Contains(string(events), tool) {
			t.Errorf("w1's log has no work event of %s", tool)
		}
	}
	resumed := false
	for _, r := range api.Requests()[before:] {
		if r.System() == "ROLE=lead" && strings.Contains(r.Conversation(), "Please build the team.") {
			resumed = true
		}
	}
	if !resumed {
		t.Error("the lead's conversation after the restart lacks its first turn")
	}
	t.Logf("%d requests (%d after the restart); USER got %q", len(api.Requests()), len(api.Requests())-before, summary)
}
