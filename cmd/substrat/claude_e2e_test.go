package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	wire "github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/claude"
	"github.com/substrat/substrat/provider/fakeapi"
	"github.com/substrat/substrat/provider/providertest"
	"github.com/substrat/substrat/supervisor"
)

// claudeCLI returns the Claude Code CLI that `make tools` installs. Its
// absence fails the test: the claude provider must be tested for real.
func claudeCLI(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
	bin := filepath.Join(dir, ".tools", "npm", "node_modules", ".bin", "claude")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the Claude Code CLI is missing (%v): run make tools (scripts/install-tools.sh installs it)", err)
	}
	return bin
}

// The scripted model of the end-to-end test.
const (
	e2eSpawnID  = "toolu_e2e_spawn_1"
	e2eSecret   = "PAPAYA"
	e2eRemember = "remember the word " + e2eSecret
	e2eAsk      = "what was the word?"
)

func e2eReply(req fakeapi.ClaudeRequest) fakeapi.ClaudeOut {
	last := req.Last()
	for _, b := range last.Blocks() {
		if b.Type == "tool_result" {
			return fakeapi.ClaudeOut{Text: "spawn result: " + fakeapi.ResultText(b)}
		}
	}
	text := last.Text()
	switch {
	case strings.Contains(text, "SPAWN"):
		return fakeapi.ClaudeOut{Text: "Spawning a helper.", ToolUse: &fakeapi.Call{ID: e2eSpawnID, Name: "mcp__substrat__spawn_agent",
			Args: `{"name":"helper","instructions":"Help the boss."}`}}
	case strings.Contains(text, e2eAsk):
		if strings.Contains(req.Conversation(), e2eRemember) {
			return fakeapi.ClaudeOut{Text: "The word was " + e2eSecret + "."}
		}
		return fakeapi.ClaudeOut{Text: "I was never told a word."}
	}
	return fakeapi.ClaudeOut{Text: "Noted."}
}

// claudeEnv is the environment of a daemon whose claude agents run the
// pinned CLI cli against the fake API at url.
func claudeEnv(cli, url string) []string {
	return []string{"PATH=" + filepath.Dir(cli) + string(os.PathListSeparator) + os.Getenv("PATH"),
		"ANTHROPIC_BASE_URL=" + url, "ANTHROPIC_API_KEY=sk-ant-fake", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}
}

// startE2E starts the fake API and a daemon that runs the real Claude Code
// CLI against it; both stop when the test ends.
func startE2E(t *testing.T) (*e2eDaemon, *fakeapi.Claude) {
	cli := claudeCLI(t)
	api := fakeapi.NewClaude(e2eReply)
	t.Cleanup(api.Close)
	d := runDaemon(t, claudeEnv(cli, api.URL)...)
	return d, api
}

// TestClaudeE2E runs the real Claude Code CLI under a real daemon, against
// a loopback fake of the Anthropic API: (a) a plain reply, (b) a reply that
// spawns a child through substrat's MCP server, (c) after a SIGKILL of the
// daemon and a restart, a turn that resumes the same Claude session.
func TestClaudeE2E(t *testing.T) {
	d, api := startE2E(t)
	home := d.home

	var boss wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "boss", Provider: "claude", Instructions: "You are the boss of a test team."}, &boss)

	// (a) A plain reply.
	if res := d.send("boss", e2eRemember); res.Text != "Noted." {
		t.Fatalf("(a) reply %q, want Noted.", res.Text)
	}
	reqs := api.Requests()
	if len(reqs) == 0 {
		t.Fatal("(a) the fake API got no request")
	}
	first := reqs[len(reqs)-1]
	if !strings.Contains(string(first.System), "You are the boss of a test team.") {
		t.Errorf("(a) the instructions are not in the system prompt: %.300s", first.System)
	}
	var tools []string
	for _, n := range first.ToolNames() {
		if strings.HasPrefix(n, "mcp__substrat__") {
			tools = append(tools, n)
		}
	}
	// All but the permission-prompt tool, which the CLI keeps for itself.
	if len(tools) != len(supervisor.Tools())-1 || slices.Contains(tools, "mcp__substrat__"+supervisor.ApprovalTool) {
		t.Errorf("(a) the model was offered substrat tools %q, want all %d of them but %s", tools, len(supervisor.Tools())-1, supervisor.ApprovalTool)
	}
	claudeSession := d.sessionID(boss.ID)
	if claudeSession == "" {
		t.Fatal("(a) the Claude session id was not saved")
	}
	info := d.agents()["boss"]
	if c := info.Counters; c.Turns != 1 || c.InputTokens <= 0 || c.OutputTokens <= 0 || c.CostUSD <= 0 {
		t.Errorf("(a) counters %+v, want a turn with tokens and cost", c)
	}

	// (b) A reply that spawns a child through the MCP server.
	if res := d.send("boss", "please SPAWN a helper"); !strings.Contains(res.Text, "spawn result:") {
		t.Fatalf("(b) reply %q, want the spawn result", res.Text)
	}
	var spawnResult *fakeapi.Block
	for _, r := range api.Requests() {
		for _, b := range r.Last().Blocks() {
			if b.Type == "tool_result" && b.ToolUseID == e2eSpawnID {
				spawnResult = &b
			}
		}
	}
	if spawnResult == nil || spawnResult.IsError {
		t.Fatalf("(b) the spawn_agent result reached the model as %+v", spawnResult)
	}
	helper, ok := d.agents()["boss/helper"]
	if !ok || helper.ParentID != boss.ID || helper.Provider != "claude" {
		t.Fatalf("(b) the child is not in the tree: %+v", d.agents())
	}
	events, err := os.ReadFile(fsstore.Layout{Home: home}.Agent(boss.ID).Events())
	// The spawn is keyed by the call (its turn, tool and arguments), not
	// the tool-use id, which a turn run again does not keep: an effect
	// event records it before the child exists (sim/effects_test.go).
	if err != nil || !strings.Contains(string(events), `"type":"effect"`) || !strings.Contains(string(events), `"spawn_key":"`) ||
		!strings.Contains(string(events), `/spawn_agent:`) {
		t.Errorf("(b) the spawn is not journaled as an effect keyed by its call (%v)", err)
	}
	// The child runs its first turn (its instructions) on its own claude
	// session; wait for it, so that the kill below hits an idle tree.
	d.waitFirstTurn("boss/helper")

	// (c) SIGKILL, restart, and resume the same Claude session.
	d.kill()
	before := len(api.Requests())
	d.start()
	if res := d.send("boss", e2eAsk); !strings.Contains(res.Text, e2eSecret) {
		t.Errorf("(c) reply %q: the resumed session did not remember", res.Text)
	}
	var asked *fakeapi.ClaudeRequest
	for _, r := range api.Requests()[before:] {
		if strings.Contains(r.Last().Text(), e2eAsk) {
			asked = &r
		}
	}
	if asked == nil {
		t.Fatal("(c) the question never reached the API")
	}
	conv := asked.Conversation()
	for _, want := range []string{e2eRemember, "please SPAWN a helper", "spawn result:"} {
		if !strings.Contains(conv, want) {
			t.Errorf("(c) the resumed request lacks %q; it has:\n%.3000s", want, conv)
		}
	}
	if got := d.sessionID(boss.ID); got != claudeSession {
		t.Errorf("(c) the Claude session id changed from %s to %s", claudeSession, got)
	}
}

// routed is a provider whose sessions route the fake daemon's tool calls
// for their agent to each turn's tools, as the daemon does.
type routed struct {
	provider.Provider
	d *fakeDaemon
}

func (r *routed) Create(ctx context.Context, cfg provider.Config) (provider.Session, error) {
	s, err := r.Provider.Create(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &routedSession{Session: s, d: r.d, agent: cfg.AgentID}, nil
}

func (r *routed) Restore(ctx context.Context, cfg provider.Config, state []byte) (provider.Session, error) {
	s, err := r.Provider.Restore(ctx, cfg, state)
	if err != nil {
		return nil, err
	}
	return &routedSession{Session: s, d: r.d, agent: cfg.AgentID}, nil
}

type routedSession struct {
	provider.Session
	d     *fakeDaemon
	agent string
}

func (s *routedSession) Send(ctx context.Context, turn provider.Turn) (provider.TurnResult, error) {
	s.d.mu.Lock()
	s.d.handlers[s.agent] = turn.Tools
	s.d.mu.Unlock()
	defer func() {
		s.d.mu.Lock()
		delete(s.d.handlers, s.agent)
		s.d.mu.Unlock()
	}()
	return s.Session.Send(ctx, turn)
}

// conformanceReply plays the model of the conformance suite: "CALL name
// args" calls mcp__substrat__name, a tool result is answered "tool said:
// <result>", anything else "echo: <text>".
func conformanceReply(req fakeapi.ClaudeRequest) fakeapi.ClaudeOut {
	last := req.Last()
	for _, b := range last.Blocks() {
		if b.Type == "tool_result" {
			return fakeapi.ClaudeOut{Text: "tool said: " + fakeapi.ResultText(b)}
		}
	}
	text := last.Text()
	if i := strings.Index(text, "CALL "); i >= 0 {
		line := text[i+len("CALL "):]
		if j := strings.LastIndex(text, "\nCALL "); j >= 0 {
			// A framed prompt (the daemon's): the command is the last CALL line.
			line, _, _ = strings.Cut(text[j+len("\nCALL "):], "\n")
		}
		name, args, _ := strings.Cut(strings.TrimSpace(line), " ")
		return fakeapi.ClaudeOut{ToolUse: &fakeapi.Call{ID: fmt.Sprintf("toolu_conf_%d", len(req.Messages)), Name: "mcp__substrat__" + name, Args: strings.TrimSpace(args)}}
	}
	return fakeapi.ClaudeOut{Text: "echo: " + text}
}

// TestClaudeConformance runs the provider conformance suite against the
// claude provider driving the real CLI, the fake API and `substrat mcp`.
func TestClaudeConformance(t *testing.T) {
	cli := claudeCLI(t)
	// Cleanups, not defers: the parallel cases run after this returns.
	api := fakeapi.NewClaude(conformanceReply)
	t.Cleanup(api.Close)
	t.Cleanup(func() {
		if t.Failed() {
			for _, r := range api.Requests() {
				for _, m := range r.Messages {
					t.Logf("API request message %s: %.200s", m.Role, m.Content)
				}
			}
		}
	})
	home := shortHome(t)
	if err := os.MkdirAll(fsstore.Layout{Home: home}.AgentsDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	d := startFakeDaemon(t, home)
	d.extra = []wire.ToolSpec{{Name: "providertest_probe", Description: "The conformance suite's probe.",
		InputSchema: json.RawMessage(`{"type":"object"}`)}}
	substrat := lookPath(t, "substrat")
	env := []string{"ANTHROPIC_BASE_URL=" + api.URL, "ANTHROPIC_API_KEY=sk-ant-conformance-fake"}
	var seq atomic.Int64
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T) provider.Provider {
			return &routed{Provider: claude.New(claude.Options{Command: cli, Home: home, Substrat: substrat, Env: env}), d: d}
		},
		Config: func(t *testing.T) provider.Config {
			id := fmt.Sprintf("0199aaaa-0000-7000-8000-%012d", seq.Add(1))
			dir := fsstore.Layout{Home: home}.AgentDir(id)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			return provider.Config{AgentID: id, Name: "conf" + id[len(id)-3:], WorkDir: dir}
		},
		ToolPrompt: func(name, args string) string { return "CALL " + name + " " + args },
		Timeout:    60 * time.Second,
	})
}

// TestClaudeE2ESandbox runs the real Claude Code CLI inside an agent's
// bwrap sandbox, under a real daemon, against the loopback fake API. The
// CLI sees the workspace as its working directory and keeps its state in
// the agent's own HOME; its MCP server reaches the agent tools through the
// agent's tool socket, since daemon.sock is not in the sandbox; a child it
// spawns inherits the workspace and runs sandboxed too. In a workspace
// without network the turn fails, saying why, and nothing runs outside.
func TestClaudeE2ESandbox(t *testing.T) {
	needBwrap(t)
	d, api := startE2E(t)
	layout := fsstore.Layout{Home: d.home}

	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab", Network: true}, nil)
	var boss wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "boss", Provider: "claude", Workspace: "lab",
		Instructions: "You are the boss of a sandboxed team."}, &boss)

	if res := d.send("boss", e2eRemember); res.Text != "Noted." {
		t.Fatalf("reply %q, want Noted.", res.Text)
	}
	reqs := api.Requests()
	first := reqs[len(reqs)-1]
	raw, _ := json.Marshal(first)
	sys := string(raw)
	if !strings.Contains(sys, "Primary working directory: /workspace") {
		t.Errorf("the CLI did not run in the sandbox's /workspace; its request: %s", sys)
	}
	if strings.Contains(sys, layout.AgentDir(boss.ID)) {
		t.Errorf("the sandboxed CLI saw the agent directory on the host: %s", sys)
	}
	if !strings.Contains(sys, filepath.Join(layout.ProviderDir("claude"), "homes", boss.ID, ".claude", "projects", "-workspace")) {
		t.Errorf("the CLI's HOME is not the agent's own: %s", sys)
	}
	session := d.sessionID(boss.ID)
	transcript := filepath.Join(layout.ProviderDir("claude"), "homes", boss.ID, ".claude", "projects", "-workspace", session+".jsonl")
	if _, err := os.Stat(transcript); err != nil {
		t.Errorf("the CLI's transcript is not in the agent's own HOME: %v", err)
	}
	if fi, err := os.Stat(layout.ToolSocket(boss.ID)); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("the agent's tool socket: %v", err)
	}

	// The agent tools work through the tool socket.
	if res := d.send("boss", "please SPAWN a helper"); !strings.Contains(res.Text, "spawn result:") {
		t.Fatalf("reply %q, want the spawn result", res.Text)
	}
	helper, ok := d.agents()["boss/helper"]
	if !ok || helper.ParentID != boss.ID {
		t.Fatalf("the child is not in the tree: %+v", d.agents())
	}
	var insp wire.InspectResult
	mustCall(d, wire.AgentInspect, wire.RefParams{Ref: "boss/helper"}, &insp)
	if insp.Session.Workspace != "USER/lab" {
		t.Errorf("the child's workspace is %q, want the parent's USER/lab", insp.Session.Workspace)
	}
	d.waitFirstTurn("boss/helper")
	if _, err := os.Stat(filepath.Join(layout.ProviderDir("claude"), "homes", helper.ID, ".claude")); err != nil {
		t.Errorf("the child's CLI did not run in its own HOME: %v", err)
	}

	// Without network the CLI cannot reach its API: the turn fails and
	// says so, rather than run outside the sandbox.
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "offline"}, nil)
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "hermit", Provider: "claude", Workspace: "offline"}, nil)
	before := len(api.Requests())
	var res wire.SendResult
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "hermit", Text: "hello", Wait: true}, &res)
	if !strings.Contains(res.Failed, "no network access") {
		t.Errorf("a claude turn in a workspace without network: failed %q, reply %q", res.Failed, res.Text)
	}
	if n := len(api.Requests()); n != before {
		t.Errorf("the API got %d requests from an agent without network", n-before)
	}
}
