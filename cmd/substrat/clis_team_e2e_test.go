package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider/fakeapi"
	wire "github.com/substrat/substrat/supervisor/api"
)

// teamScript is the model of a lead and a worker on a CLI that is not
// Claude's: the lead spawns the worker over MCP; the worker writes a file
// with the CLI's own shell tool and completes; told, the lead says the
// team is done. The worker's first request can be held, so that the
// daemon is killed while the worker is at work; or its first shell command
// can hang (cut), so that the daemon is killed while the command runs.
type teamScript struct {
	mu     sync.Mutex
	hold   chan struct{} // closed to let the held request go
	held   int
	word   string
	cut    bool // the first shell command hangs after touching started
	shells int
}

// started is the file the hanging shell command touches in the workspace.
const started = "shell-started"

// step says what the model does next: "spawn", "shell", "complete" or a
// text, from the conversation so far (conv) and its tool outputs.
//
// A call the CLI reports as cut short did not run, and the worker makes
// it again, as a model would: Codex answers "aborted" for a call in its
// thread that has no output. The killed daemon's CLI can outlive it long
// enough to receive the held answer and record its shell call (its
// sandbox dies a few scheduler hops after the daemon: the daemon, then
// bwrap by its parent-death signal, then the namespace's init, then
// everything in it), and the resumed thread then carries the call with
// "aborted" as its output. Counting that as the shell's output made the
// worker complete without ever writing the file.
func (m *teamScript) step(conv string, outputs []string) (string, string) {
	lead := strings.Contains(conv, "build the team")
	ran := 0
	for _, o := range outputs {
		if o != `"aborted"` {
			ran++
		}
	}
	switch {
	case lead && strings.Contains(conv, "w1 completed"):
		return "text", "team done"
	case lead && ran == 0:
		return "spawn", ""
	case lead:
		return "text", "spawned w1"
	case ran == 0:
		m.mu.Lock()
		ch := m.hold
		if ch != nil {
			m.held++
		}
		m.mu.Unlock()
		if ch != nil {
			select {
			case <-ch:
			case <-time.After(60 * time.Second):
			}
		}
		return "shell", ""
	case ran == 1:
		return "complete", ""
	}
	return "text", "done"
}

// shell is the worker's next shell command: the first one hangs when the
// daemon is to be killed while it runs.
func (m *teamScript) shell() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.shells++
	cmd := fmt.Sprintf("echo %s > /workspace/out.txt", m.word)
	if m.cut && m.shells == 1 {
		return "touch /workspace/" + started + " && sleep 120 && " + cmd
	}
	return cmd
}

// atWork reports whether the worker is at work: its request held, or its
// hanging shell command started in the workspace at root.
func (m *teamScript) atWork(root string) bool {
	if m.cut {
		_, err := os.Stat(filepath.Join(root, started))
		return err == nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.held > 0
}

const workerInstructions = "ROLE=worker. Write the file, then complete."

// TestCLITeamsE2E: for the Codex and the Gemini CLI, a lead (in a bwrap
// sandbox, full permission) spawns a worker over MCP; the worker writes a
// file with the CLI's own shell tool and completes. The daemon is killed
// with SIGKILL while the worker is at work (waiting for its model; or, in
// the -cut cases, running a shell command that hangs); after the restart
// the team finishes, with the sessions resumed, and the worker was
// spawned once.
func TestCLITeamsE2E(t *testing.T) {
	for _, p := range []string{"codex", "gemini"} {
		t.Run(p, func(t *testing.T) { cliTeam(t, p, false) })
		t.Run(p+"-cut", func(t *testing.T) { cliTeam(t, p, true) })
	}
}

func cliTeam(t *testing.T, name string, cut bool) {
	m := &teamScript{word: "from-" + name, cut: cut}
	if !cut {
		m.hold = make(chan struct{})
	}
	spawnArgs := fmt.Sprintf(`{"name":"w1","instructions":%q}`, workerInstructions)
	var env []string
	switch name {
	case "codex":
		api := fakeapi.NewCodex(func(r fakeapi.CodexRequest) fakeapi.CodexOut {
			what, text := m.step(r.Raw, r.Outputs())
			switch what {
			case "spawn":
				return fakeapi.CodexOut{Call: &fakeapi.Call{ID: "call_spawn_w1", Namespace: "mcp__substrat", Name: "spawn_agent", Args: spawnArgs}}
			case "shell":
				return fakeapi.CodexOut{Call: &fakeapi.Call{ID: fmt.Sprintf("call_shell_%d", len(r.Input)), Name: "exec_command", Args: fmt.Sprintf(`{"cmd":%q}`, m.shell())}}
			case "complete":
				return fakeapi.CodexOut{Call: &fakeapi.Call{ID: "call_complete_w1", Namespace: "mcp__substrat", Name: "complete", Args: `{"result":"wrote out.txt"}`}}
			}
			return fakeapi.CodexOut{Text: text}
		})
		t.Cleanup(api.Close)
		env = []string{"OPENAI_BASE_URL=" + api.URL, "OPENAI_API_KEY=sk-fake-codex"}
	case "gemini":
		api := fakeapi.NewGemini(func(r fakeapi.GeminiRequest) fakeapi.GeminiOut {
			what, text := m.step(r.Raw, r.Responses)
			switch what {
			case "spawn":
				return fakeapi.GeminiOut{Call: &fakeapi.Call{Name: "mcp_substrat_spawn_agent", Args: spawnArgs}}
			case "shell":
				return fakeapi.GeminiOut{Call: &fakeapi.Call{Name: "run_shell_command", Args: fmt.Sprintf(`{"command":%q}`, m.shell())}}
			case "complete":
				return fakeapi.GeminiOut{Call: &fakeapi.Call{Name: "mcp_substrat_complete", Args: `{"result":"wrote out.txt"}`}}
			}
			return fakeapi.GeminiOut{Text: text}
		})
		t.Cleanup(api.Close)
		env = []string{"GEMINI_API_KEY=fake-gemini", "GOOGLE_GEMINI_BASE_URL=" + api.URL}
	}
	d := runDaemon(t, append(env, "PATH="+filepath.Dir(toolsBin(t, name))+string(os.PathListSeparator)+os.Getenv("PATH"))...)
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "team", Network: true}, nil)
	var lead wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "lead", Provider: name, Model: "fake-model", Workspace: "team"}, &lead)
	if res := d.send("lead", "build the team"); res.Text != "spawned w1" {
		t.Fatalf("the lead's first turn: %q", res.Text)
	}
	root := fsstore.Layout{Home: d.home}.WorkspaceRoot("USER", "team")
	deadline := time.Now().Add(60 * time.Second)
	for !m.atWork(root) {
		if time.Now().After(deadline) {
			t.Fatal("the worker never got to work")
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.kill() // while the worker is at work
	m.mu.Lock()
	if m.hold != nil {
		close(m.hold)
		m.hold = nil
	}
	m.mu.Unlock()
	d.start()

	deadline = time.Now().Add(120 * time.Second)
	for {
		data, _ := os.ReadFile(filepath.Join(root, "out.txt"))
		agents := d.agents()
		done := agents["lead/w1"].AgentState == fsstore.AgentTerminated && strings.TrimSpace(string(data)) == m.word
		if done && agents["lead"].Counters.Turns >= 2 && agents["lead"].Pending == 0 && agents["lead"].AgentState == fsstore.AgentIdle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the team did not finish after the restart: out.txt %q, agents %+v; daemon output in %s", data, agents, filepath.Join(d.home, "e2e-daemon.out"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	var list []wire.AgentInfo
	mustCall(d, wire.AgentList, wire.ListParams{}, &list)
	if len(list) != 2 {
		t.Errorf("%d agents, want the lead and one worker: %+v", len(list), list)
	}
	for _, ref := range []string{"lead", "lead/w1"} {
		if d.sessionID(d.agents()[ref].ID) == "" {
			t.Errorf("%s has no CLI session saved", ref)
		}
	}
}
