package cursor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/internal/clitest"
	"github.com/substrat/substrat/provider/internal/retry"
	"github.com/substrat/substrat/provider/providertest"
	"github.com/substrat/substrat/supervisor/rpc/rpctest"
)

// The test binary doubles as a fake cursor-agent (see runFakeCursor).
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "cursor-agent" {
		os.Exit(runFakeCursor())
	}
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	os.Exit(m.Run())
}

// runFakeCursor mimics `cursor-agent --print --output-format stream-json`
// as its documentation describes it: a system/init line with the chat id
// (session_id), the user's prompt echoed, assistant messages, tool_call
// started/completed pairs and a result line with usage. Chats live in
// $FAKE_CURSOR_CHATS/<id> (one prompt a line); --resume needs an existing
// one, and a run without it starts a new one. It reads the MCP server from
// .cursor/mcp.json in its working directory, as the real CLI does. The
// prompt says what to do:
//
//	CALL name {args}  call the substrat MCP tool through the daemon
//	HISTORY           answer the chat's earlier prompts, joined by "|"
//	ENV               answer a JSON report of args, cwd and the rule file
//	GARBAGE           print a line that is not JSON, then hang
//	OVERLOAD n        fail with a 529 the first n times
//	anything else     answer "echo: <prompt>"
func runFakeCursor() int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "cursor-agent: "+format+"\n", args...)
		return 1
	}
	args := os.Args[1:]
	var prompt, resume string
	bools := map[string]bool{}
	format := ""
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "--print", "-p", "--approve-mcps", "--trust", "--force", "--mode=plan":
			bools[a] = true
		case "--output-format", "--resume", "--model":
			if i+1 >= len(args) {
				return fail("%s needs a value", a)
			}
			if a == "--output-format" {
				format = args[i+1]
			}
			if a == "--resume" {
				resume = args[i+1]
			}
			i++
		default:
			if strings.HasPrefix(a, "-") {
				return fail("unknown option %q", a)
			}
			if prompt != "" {
				return fail("two prompts: %q and %q", prompt, a)
			}
			prompt = a
		}
	}
	if !bools["--print"] || format != "stream-json" || !bools["--approve-mcps"] || !bools["--trust"] {
		return fail("want --print --output-format stream-json --approve-mcps --trust, got %q", args)
	}
	chats := os.Getenv("FAKE_CURSOR_CHATS")
	if chats == "" { // sandboxed: only the CLI's own variables get in
		chats = filepath.Join(os.Getenv("HOME"), "chats")
	}
	os.MkdirAll(chats, 0o700)
	id := resume
	var history []string
	if id == "" {
		b := make([]byte, 8)
		rand.Read(b)
		id = "chat-" + hex.EncodeToString(b)
	} else {
		data, err := os.ReadFile(filepath.Join(chats, id))
		if err != nil {
			return fail("chat %s not found", id)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var p string
			json.Unmarshal([]byte(l), &p)
			history = append(history, p)
		}
	}
	f, _ := os.OpenFile(filepath.Join(chats, id), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	asked := prompt // the history keeps what was asked, without the instructions
	if rest, ok := strings.CutPrefix(strings.TrimSpace(prompt), "<instructions>\n"); ok {
		_, asked, _ = strings.Cut(rest, "\n</instructions>\n\n")
	}
	line, _ := json.Marshal(asked)
	f.Write(append(line, '\n'))
	f.Close()

	cwd, _ := os.Getwd()
	out := json.NewEncoder(os.Stdout)
	out.Encode(map[string]any{"type": "system", "subtype": "init", "apiKeySource": "env", "cwd": cwd, "session_id": id,
		"model": "fake", "permissionMode": "default"})
	out.Encode(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": []map[string]string{{"type": "text", "text": prompt}}}, "session_id": id})
	assistant := func(text string) {
		out.Encode(map[string]any{"type": "assistant", "message": map[string]any{"role": "assistant", "content": []map[string]string{{"type": "text", "text": text}}}, "session_id": id})
	}
	result := func(text string) int {
		out.Encode(map[string]any{"type": "result", "subtype": "success", "duration_ms": 12, "duration_api_ms": 12, "is_error": false,
			"result": text, "session_id": id, "request_id": "req-1",
			"usage": map[string]int{"inputTokens": 9, "outputTokens": 4, "cacheReadTokens": 2}})
		return 0
	}
	p := strings.TrimSpace(prompt)
	var instructions string // a sandboxed session's, leading the prompt
	if rest, ok := strings.CutPrefix(p, "<instructions>\n"); ok {
		instructions, p, _ = strings.Cut(rest, "\n</instructions>\n\n")
	}
	// A framed prompt (the daemon's): the command is the last CALL line.
	if i := strings.LastIndex(p, "\nCALL "); i >= 0 && strings.HasPrefix(p, "[") {
		p, _, _ = strings.Cut(p[i+1:], "\n")
	}
	switch word, rest, _ := strings.Cut(p, " "); word {
	case "CALL":
		name, argsJSON, _ := strings.Cut(rest, " ")
		callID := fmt.Sprintf("call_%d", len(history))
		out.Encode(map[string]any{"type": "tool_call", "subtype": "started", "call_id": callID, "session_id": id,
			"tool_call": map[string]any{"mcpToolCall": map[string]any{"args": map[string]any{"name": "substrat-" + name, "toolName": name,
				"providerIdentifier": "substrat", "args": json.RawMessage(argsJSON)}}}})
		// The project's MCP config, else the user's (in $HOME), as the
		// real CLI reads them.
		mcpPath := filepath.Join(cwd, ".cursor", "mcp.json")
		if _, err := os.Stat(mcpPath); err != nil {
			mcpPath = filepath.Join(os.Getenv("HOME"), ".cursor", "mcp.json")
		}
		agent, socket, err := rpctest.MCPArgs(mcpPath)
		if err != nil {
			return fail("mcp.json: %v", err)
		}
		res, err := rpctest.CallTool(context.Background(), socket, agent, provider.ToolCall{ID: callID, Name: name, Args: json.RawMessage(argsJSON)})
		if err != nil {
			return fail("tool call: %v", err)
		}
		out.Encode(map[string]any{"type": "tool_call", "subtype": "completed", "call_id": callID, "session_id": id,
			"tool_call": map[string]any{"mcpToolCall": map[string]any{"args": map[string]any{"toolName": name},
				"result": map[string]any{"success": map[string]any{"content": []map[string]any{{"text": map[string]string{"text": res.Text}}}, "isError": res.IsError}}}}})
		text := "tool said: " + res.Text
		assistant(text)
		return result(text)
	case "HISTORY":
		text := strings.Join(history, "|")
		assistant(text)
		return result(text)
	case "ENV":
		rule, _ := os.ReadFile(filepath.Join(cwd, ".cursor", "rules", "substrat.mdc"))
		b, _ := json.Marshal(map[string]any{"args": args, "cwd": cwd, "rule": string(rule), "agent": os.Getenv("SUBSTRAT_AGENT_ID"),
			"home": os.Getenv("HOME"), "instructions": instructions})
		return result(string(b))
	case "GARBAGE":
		fmt.Println("<html>not json</html>")
		time.Sleep(time.Hour)
		return 0
	case "OVERLOAD":
		var n int
		fmt.Sscan(rest, &n)
		counter := filepath.Join(chats, "overload-count")
		data, _ := os.ReadFile(counter)
		var seen int
		fmt.Sscan(string(data), &seen)
		os.WriteFile(counter, []byte(fmt.Sprint(seen+1)), 0o600)
		if seen < n {
			out.Encode(map[string]any{"type": "result", "subtype": "error", "is_error": true, "session_id": id,
				"result": "API Error: 529 Overloaded"})
			return 1
		}
		return result(fmt.Sprintf("fine after %d failures", seen))
	default:
		text := "echo: " + p
		assistant(text)
		return result(text)
	}
}

type env struct {
	d     *rpctest.Daemon
	cli   string
	chats string
}

func newEnv(t *testing.T) *env {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// As the installer lays it out: bin/cursor-agent links to the CLI in
	// its versioned package directory.
	dir := t.TempDir()
	pkg := filepath.Join(dir, "versions", "1", "cursor-agent")
	if err := os.MkdirAll(filepath.Dir(pkg), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(exe, pkg); err != nil {
		data, err := os.ReadFile(exe)
		if err == nil {
			err = os.WriteFile(pkg, data, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	cli := filepath.Join(dir, "bin", "cursor-agent")
	if err := os.Mkdir(filepath.Dir(cli), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../versions/1/cursor-agent", cli); err != nil {
		t.Fatal(err)
	}
	return &env{d: rpctest.Start(t), cli: cli, chats: t.TempDir()}
}

func (e *env) provider() provider.Provider {
	return e.d.Wrap(New(Options{Command: e.cli, Home: e.d.Home, Substrat: "/opt/substrat", Env: []string{"FAKE_CURSOR_CHATS=" + e.chats},
		Retry: retry.Policy{Tries: 3, Base: 5 * time.Millisecond}}))
}

func (e *env) create(t *testing.T) (provider.Session, provider.Config, *[]string) {
	t.Helper()
	return clitest.Start(t, e.provider(), e.d.Config(t))
}

func send(t *testing.T, s provider.Session, prompt string) provider.TurnResult {
	t.Helper()
	res, err := s.Send(context.Background(), provider.Turn{Prompt: prompt})
	if err != nil {
		t.Fatalf("Send(%q): %v", prompt, err)
	}
	return res
}

func TestConformance(t *testing.T) {
	e := newEnv(t)
	providertest.Run(t, providertest.Harness{
		New:        func(t *testing.T) provider.Provider { return e.provider() },
		Config:     func(t *testing.T) provider.Config { return e.d.Config(t) },
		ToolPrompt: func(name, args string) string { return "CALL " + name + " " + args },
		Timeout:    30 * time.Second,
	})
}

func TestChatIDAndResume(t *testing.T) {
	e := newEnv(t)
	s, cfg, ids := e.create(t)
	if len(*ids) != 0 {
		t.Fatalf("ids %q before the first turn: cursor-agent picks the chat id", *ids)
	}
	var got struct {
		Args         []string `json:"args"`
		Cwd          string   `json:"cwd"`
		Rule         string   `json:"rule"`
		Agent        string   `json:"agent"`
		Home         string   `json:"home"`
		Instructions string   `json:"instructions"`
	}
	res := send(t, s, "ENV")
	if err := json.Unmarshal([]byte(res.Text), &got); err != nil {
		t.Fatal(err)
	}
	if len(*ids) != 1 || !strings.HasPrefix((*ids)[0], "chat-") {
		t.Fatalf("ids %q after the first turn, want the chat id of its init line", *ids)
	}
	chat := (*ids)[0]
	withInstructions := "<instructions>\nBe a test agent.\n</instructions>\n\nENV"
	if want := []string{"--print", "--output-format", "stream-json", "--approve-mcps", "--trust", withInstructions}; !slices.Equal(got.Args, want) {
		t.Errorf("first turn args %q, want %q", got.Args, want)
	}
	// It runs in the agent's working directory with a HOME of its own,
	// the instructions lead the prompt, and nothing is written into the
	// working directory.
	ahome := filepath.Join(e.d.Home, "providers", "cursor-agent", "homes", cfg.AgentID)
	if got.Cwd != cfg.WorkDir || got.Agent != cfg.AgentID || got.Rule != "" || got.Home != ahome || !strings.Contains(got.Instructions, "Be a test agent.") {
		t.Errorf("cwd %q agent %q rule %q home %q instructions %q", got.Cwd, got.Agent, got.Rule, got.Home, got.Instructions)
	}
	if _, err := os.Stat(filepath.Join(cfg.WorkDir, ".cursor")); err == nil {
		t.Error("the session wrote .cursor into the working directory")
	}
	agent, socket, err := rpctest.MCPArgs(filepath.Join(ahome, ".cursor", "mcp.json"))
	if err != nil || agent != cfg.AgentID || socket != filepath.Join(e.d.Home, "daemon.sock") {
		t.Errorf("$HOME/.cursor/mcp.json: agent %q socket %q, %v", agent, socket, err)
	}
	// The second turn resumes the same chat.
	res = send(t, s, "ENV")
	json.Unmarshal([]byte(res.Text), &got)
	if want := []string{"--print", "--output-format", "stream-json", "--approve-mcps", "--trust", "--resume", chat, withInstructions}; !slices.Equal(got.Args, want) {
		t.Errorf("second turn args %q, want %q", got.Args, want)
	}
	if res := send(t, s, "HISTORY"); res.Text != "ENV|ENV" {
		t.Errorf("history %q", res.Text)
	}
	// After a crash, Restore(nil) resumes the same chat.
	r, err := e.provider().Restore(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if res := send(t, r, "HISTORY"); res.Text != "ENV|ENV|HISTORY" {
		t.Errorf("history after Restore(nil) %q", res.Text)
	}
	if len(*ids) != 1 {
		t.Errorf("ids %q, want one chat", *ids)
	}
}

func TestToolCallAndUsage(t *testing.T) {
	e := newEnv(t)
	s, cfg, _ := e.create(t)
	var chunks []provider.Chunk
	tools := provider.ToolHandlerFunc(func(ctx context.Context, c provider.ToolCall) provider.ToolResult {
		return provider.ToolResult{Text: "done " + string(c.Args)}
	})
	res, err := s.Send(context.Background(), provider.Turn{Prompt: `CALL send_message {"text":"x"}`, Tools: tools,
		Output: func(c provider.Chunk) { chunks = append(chunks, c) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != `tool said: done {"text":"x"}` || res.Usage != (provider.Usage{InputTokens: 11, OutputTokens: 4}) {
		t.Errorf("result %+v", res)
	}
	if calls := e.d.Calls(); len(calls) != 1 || calls[0].Agent != cfg.AgentID {
		t.Errorf("calls %+v", calls)
	}
	var kinds []string
	for _, c := range chunks {
		kinds = append(kinds, c.Kind)
	}
	if !slices.Equal(kinds, []string{"tool_call", "tool_result", "text"}) || chunks[0].Text != `send_message {"text":"x"}` {
		t.Errorf("chunks %+v", chunks)
	}
}

func TestGarbageAndRetry(t *testing.T) {
	e := newEnv(t)
	s, _, _ := e.create(t)
	_, err := s.Send(context.Background(), provider.Turn{Prompt: "GARBAGE"})
	if !errors.Is(err, provider.ErrProtocol) || !strings.Contains(err.Error(), "<html>") {
		t.Fatalf("Send: %v, want ErrProtocol", err)
	}
	if res := send(t, s, "OVERLOAD 1"); res.Text != "fine after 1 failures" {
		t.Errorf("text %q", res.Text)
	}
}

func TestPromptLikeAFlag(t *testing.T) {
	e := newEnv(t)
	s, _, _ := e.create(t)
	if res := send(t, s, "--help me"); res.Text != "echo: --help me" {
		t.Errorf("text %q", res.Text)
	}
}

// TestSandboxed checks a sandboxed session: the CLI is run by its real
// path with its package directory, the substrat binary and its own HOME
// asked of the sandbox, and the network; the MCP config, in that HOME,
// points at the agent's tool socket; the instructions lead the prompt,
// since the rule file in the agent directory is not in the sandbox. The
// hook runs the command as is, so the fake CLI really uses that config.
func TestSandboxed(t *testing.T) {
	e := newEnv(t)
	cfg := e.d.Config(t)
	cfg.ToolSocket = filepath.Join(e.d.Home, "daemon.sock") // the test daemon serves any agent
	t.Setenv("CURSOR_API_KEY", "cur-key")
	t.Setenv("ANTHROPIC_API_KEY", "not-for-cursor")
	var (
		needs provider.SandboxNeeds
		env   []string
		prog  string
	)
	cfg.Sandbox = func(ctx context.Context, cmd provider.Process, n provider.SandboxNeeds) (provider.Process, error) {
		needs, env, prog = n, cmd.Env, cmd.Path
		return cmd, nil
	}
	s, err := e.provider().Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	res := send(t, s, "ENV")
	var got struct {
		Home         string `json:"home"`
		Rule         string `json:"rule"`
		Instructions string `json:"instructions"`
	}
	if err := json.Unmarshal([]byte(res.Text), &got); err != nil {
		t.Fatalf("ENV: %q: %v", res.Text, err)
	}
	if got.Instructions != "Be a test agent." || got.Rule != "" {
		t.Errorf("sandboxed instructions %q, rule file %q", got.Instructions, got.Rule)
	}
	ahome := filepath.Join(e.d.Home, "providers", "cursor-agent", "homes", cfg.AgentID)
	real, _ := filepath.EvalSymlinks(e.cli)
	if prog != real {
		t.Errorf("ran %s, want the CLI's real path %s", prog, real)
	}
	if want := []string{filepath.Dir(real), "/opt/substrat"}; !slices.Equal(needs.ReadOnly, want) ||
		!slices.Equal(needs.ReadWrite, []string{ahome}) || !needs.Network || !needs.ToolSocket {
		t.Errorf("needs %+v", needs)
	}
	// The CLI's HOME is the agent's; what Options.Env sets gets in whole;
	// the daemon's other secrets stay out.
	if got.Home != ahome || !slices.Contains(env, "HOME="+ahome) || !slices.Contains(env, "FAKE_CURSOR_CHATS="+e.chats) ||
		!slices.Contains(env, "CURSOR_API_KEY=cur-key") || slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "ANTHROPIC_") }) {
		t.Errorf("sandboxed env %q", env)
	}
	if _, err := os.Stat(filepath.Join(cfg.WorkDir, ".cursor")); err == nil {
		t.Error("a sandboxed session wrote .cursor into the working directory")
	}
	agent, socket, err := rpctest.MCPArgs(filepath.Join(ahome, ".cursor", "mcp.json"))
	if err != nil || agent != cfg.AgentID || socket != cfg.ToolSocket {
		t.Fatalf("the MCP config in the CLI's HOME: agent %q socket %q, %v", agent, socket, err)
	}
	// A tool call goes through that config.
	if res := send(t, s, "CALL list_children {}"); !strings.HasPrefix(res.Text, "tool said: ") {
		t.Errorf("tool call: %q", res.Text)
	}
	// The HOME is the sandbox's to write. A turn that plants a symlink
	// there does not make the daemon write through it.
	elsewhere := t.TempDir()
	dot := filepath.Join(ahome, ".cursor")
	if err := os.RemoveAll(dot); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, dot); err != nil {
		t.Fatal(err)
	}
	s2, err := e.provider().Restore(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Stop()
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("the daemon wrote through a symlink the sandbox planted: %v", entries)
	}
	if fi, err := os.Lstat(dot); err != nil || !fi.IsDir() {
		t.Errorf("$HOME/.cursor after a restore: %v, %v", fi, err)
	}
	if _, _, err := rpctest.MCPArgs(filepath.Join(dot, "mcp.json")); err != nil {
		t.Errorf("the MCP config after a restore: %v", err)
	}
}

// Only a line that is not JSON fails a turn; unknown types and odd shapes
// are skipped without losing the rest of the line.
func TestParseTolerant(t *testing.T) {
	for _, bad := range []string{`not json`, `{"type":`} {
		if _, err := parse([]byte(bad)); err == nil {
			t.Errorf("parse(%q) succeeded", bad)
		}
	}
	for _, odd := range []string{`{"no":"type"}`, `[1]`, `{"type":"thinking","subtype":"delta","text":"x"}`,
		`{"type":"assistant","message":"a string"}`, `{"type":"tool_call","subtype":"started","tool_call":"x"}`} {
		l, err := parse([]byte(odd))
		if err != nil || l.Final != nil {
			t.Errorf("parse(%q) = %+v, %v; want it skipped", odd, l, err)
		}
	}
	l, err := parse([]byte(`{"type":"result","subtype":"success","result":"done","session_id":"c1","usage":"odd"}`))
	if err != nil || l.Final == nil || l.Final.Text != "done" || l.SessionID != "c1" {
		t.Errorf("a result with odd usage: %+v, %v", l, err)
	}
}

// The permission mode maps onto the CLI's flags.
func TestPermissionModes(t *testing.T) {
	e := newEnv(t)
	for mode, want := range map[string][]string{
		"":                       nil,
		provider.ModeDefault:     nil,
		provider.ModeFull:        {"--force"},
		provider.ModePlan:        {"--mode=plan"},
		provider.ModeDontAsk:     nil,
		provider.ModeAcceptEdits: nil,
	} {
		cfg := e.d.Config(t)
		cfg.Permissions = provider.Permissions{Mode: mode}
		s, err := e.provider().Create(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Args []string `json:"args"`
		}
		json.Unmarshal([]byte(send(t, s, "ENV").Text), &got)
		s.Stop()
		extra := got.Args[5 : len(got.Args)-1]
		if !slices.Equal(extra, want) {
			t.Errorf("mode %q: flags %q, want %q", mode, extra, want)
		}
	}
}
