package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/substrat/substrat/provider/fakeapi"

	wire "github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
)

// TestAgentShellClaudeE2E: agent shell runs the real Claude Code CLI with
// --resume of the agent's own session, in the agent's bwrap sandbox, with
// the HOME its turns use: the resumed session remembers what an earlier
// turn was told. The agent is gated while the person works (a durable
// gate event), and runs again afterwards.
func TestAgentShellClaudeE2E(t *testing.T) {
	needBwrap(t)
	d, _ := startE2E(t)
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab", Network: true}, nil)
	var boss wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "boss", Provider: "claude", Workspace: "lab"}, &boss)
	if res := d.send("boss", e2eRemember); res.Text != "Noted." {
		t.Fatalf("reply %q, want Noted.", res.Text)
	}
	session := d.sessionID(boss.ID)
	layout := fsstore.Layout{Home: d.home}

	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("substrat", append([]string{"--home", d.home}, args...)...)
		cmd.Env = d.env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("substrat %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out.String(), errb.String())
		}
		return out.String()
	}
	dry := run("agent", "shell", "boss", "--dry-run")
	for _, want := range []string{"'--resume' '" + session + "'", "rw /workspace <- ", layout.ProviderDir("claude")} {
		if !strings.Contains(dry, want) {
			t.Errorf("the dry run does not show %q:\n%s", want, dry)
		}
	}
	for _, not := range []string{"'-p'", "--output-format", "--mcp-config", "ANTHROPIC_API_KEY", "sk-ant-fake"} {
		if strings.Contains(dry, not) {
			t.Errorf("the dry run shows %q:\n%s", not, dry)
		}
	}

	// The person's own prompt, in print mode so that a test can read it:
	// the same conversation, in the same sandbox and HOME.
	if out := run("agent", "shell", "boss", "--", "-p", e2eAsk); !strings.Contains(out, "The word was "+e2eSecret+".") {
		t.Errorf("the resumed session does not remember: %q", out)
	}

	var gates []string
	log, err := os.ReadFile(layout.Agent(boss.ID).Events())
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.Lines(log) {
		e, err := fsstore.DecodeEvent(bytes.TrimSuffix(line, []byte("\n")))
		if err != nil {
			t.Fatal(err)
		}
		var g fsstore.GateChange
		if e.Type == fsstore.EvGate && e.Decode(&g) == nil {
			gates = append(gates, g.Reason)
		}
	}
	want := []string{"gated " + "while the user works in its provider session (agent shell)", "ungated after agent shell"}
	if len(gates) < 4 || gates[0] != want[0] || gates[len(gates)-1] != want[1] {
		t.Errorf("the gate events of two shells: %q, want each %q", gates, want)
	}
	var insp wire.InspectResult
	mustCall(d, wire.AgentInspect, wire.RefParams{Ref: "boss"}, &insp)
	if insp.Session.Gated {
		t.Errorf("boss is still gated after agent shell")
	}
	if res := d.send("boss", "hello again"); res.Text != "Noted." {
		t.Errorf("a turn after agent shell: %q", res.Text)
	}
}

// TestAgentShellCodexGeminiE2E: agent shell resumes the real Gemini CLI's
// session in the agent's sandbox (a prompt in headless mode reads the
// earlier exchange), and builds `codex resume ID` without exec's flags
// (the Codex TUI needs a terminal: its command line is checked).
func TestAgentShellCodexGeminiE2E(t *testing.T) {
	remembered := func(conv string) string {
		if strings.Contains(conv, "what did I say") && strings.Contains(conv, "remember MANGO") {
			return "you said MANGO"
		}
		return "noted"
	}
	d := runCodexGeminiDaemon(t, remembered)
	ids := map[string]string{}
	for _, p := range []string{"codex", "gemini"} {
		mustCall(d, wire.AgentCreate, wire.CreateParams{Name: p, Provider: p, Model: "fake-model", Workspace: "box"}, nil)
		if res := d.send(p, "remember MANGO"); res.Text != "noted" {
			t.Fatalf("%s: first turn %q", p, res.Text)
		}
		ids[p] = d.sessionID(d.agents()[p].ID)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("substrat", append([]string{"--home", d.home}, args...)...)
		cmd.Env = d.env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("substrat %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := run("agent", "shell", "gemini", "--", "-p", "what did I say?"); !strings.Contains(out, "you said MANGO") {
		t.Errorf("the resumed Gemini session does not remember: %q", out)
	}
	dry := run("agent", "shell", "codex", "--dry-run")
	if !strings.Contains(dry, "' 'resume' '"+ids["codex"]+"' ") || strings.Contains(dry, "'exec'") || strings.Contains(dry, "'--json'") {
		t.Errorf("codex's command line:\n%s", dry)
	}
	if !strings.Contains(dry, "rw /workspace <- ") {
		t.Errorf("codex's command does not run in the sandbox:\n%s", dry)
	}
}

// TestAgentShellAcrossKillE2E: while a person works in an agent's claude
// session, the daemon is killed with SIGKILL and restarted. The agent
// stays gated (the gate is an event in its log): a message sent then
// waits. When the person leaves, the new daemon ungates it, and the
// message gets its turn.
func TestAgentShellAcrossKillE2E(t *testing.T) {
	needBwrap(t)
	hold := make(chan struct{})
	var asked atomic.Bool
	api := fakeapi.NewClaude(func(req fakeapi.ClaudeRequest) fakeapi.ClaudeOut {
		if strings.Contains(req.Last().Text(), "HOLD") {
			asked.Store(true)
			<-hold
			return fakeapi.ClaudeOut{Text: "released"}
		}
		return e2eReply(req)
	})
	t.Cleanup(api.Close)
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release) // before the server closes (cleanups run last first)
	d := runDaemon(t, claudeEnv(claudeCLI(t), api.URL)...)
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab", Network: true}, nil)
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "boss", Provider: "claude", Workspace: "lab"}, nil)
	d.send("boss", e2eRemember)

	cmd := exec.Command("substrat", "--home", d.home, "agent", "shell", "boss", "--", "-p", "HOLD")
	cmd.Env = d.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	for deadline := time.Now().Add(2 * time.Minute); !asked.Load(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the shell's CLI never asked the API; stderr: %s", errb.String())
		}
	}
	gated := func() bool {
		var insp wire.InspectResult
		mustCall(d, wire.AgentInspect, wire.RefParams{Ref: "boss"}, &insp)
		return insp.Session.Gated
	}
	if !gated() {
		t.Fatal("boss is not gated while the person works in its session")
	}
	d.kill()
	d.start()
	if !gated() {
		t.Fatal("boss is not gated after the daemon's kill -9 and restart")
	}
	var res wire.SendResult
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "boss", Text: e2eAsk, Wait: true}, &res)
	if res.Held == "" {
		t.Fatalf("a message to boss during the shell started a turn: %+v", res)
	}
	release()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("agent shell: %v; stderr: %s", err, errb.String())
	}
	if !strings.Contains(out.String(), "released") {
		t.Errorf("the shell's output: %q", out.String())
	}
	if gated() {
		t.Errorf("boss is still gated after the shell ended; stderr: %s", errb.String())
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if a := d.agents()["boss"]; a.Counters.Turns >= 2 && a.AgentState == "IDLE" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the message held during the shell never got its turn: %+v", d.agents()["boss"])
		}
	}
}
