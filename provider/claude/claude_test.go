package claude

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/internal/clitest"
	"github.com/substrat/substrat/provider/internal/retry"
	"github.com/substrat/substrat/provider/providertest"
	"github.com/substrat/substrat/supervisor/rpc/rpctest"
)

func TestMain(m *testing.M) {
	if isFakeClaude() {
		os.Exit(runFakeClaude())
	}
	// A race-enabled binary sleeps a second at exit by default; the fake
	// CLI inherits this.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	os.Exit(m.Run())
}

// fakeCLI returns the path of the fake claude: the test binary under that
// name, in a package directory, reached through a symlink as npm installs
// the real one (bin/claude -> ../pkg/claude).
func fakeCLI(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pkg := filepath.Join(dir, "pkg", "claude")
	if err := os.Mkdir(filepath.Dir(pkg), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(exe, pkg); err != nil {
		data, err := os.ReadFile(exe)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(pkg, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "bin", "claude")
	if err := os.Mkdir(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../pkg/claude", path); err != nil {
		t.Fatal(err)
	}
	return path
}

var fastRetry = retry.Policy{Tries: 3, Base: 5 * time.Millisecond}

type env struct {
	d   *rpctest.Daemon
	cli string
}

func newEnv(t *testing.T) *env {
	return &env{d: rpctest.Start(t), cli: fakeCLI(t)}
}

func (e *env) provider() provider.Provider {
	return e.d.Wrap(New(Options{Command: e.cli, Home: e.d.Home, Substrat: "/usr/local/bin/substrat", Retry: fastRetry}))
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

func TestCommandLine(t *testing.T) {
	e := newEnv(t)
	s, cfg, ids := e.create(t)
	if len(*ids) != 1 {
		t.Fatalf("SessionID called %d times by Create, want once", len(*ids))
	}
	id := (*ids)[0]
	if _, err := uuid.Parse(id); err != nil {
		t.Errorf("session id %q is not a UUID", id)
	}
	var got struct {
		Args []string          `json:"args"`
		Cwd  string            `json:"cwd"`
		Env  map[string]string `json:"env"`
	}
	for turn, flag := range []string{"--session-id", "--resume"} {
		res := send(t, s, "ENV")
		if err := json.Unmarshal([]byte(res.Text), &got); err != nil {
			t.Fatalf("%v: %s", err, res.Text)
		}
		mcp := filepath.Join(cfg.WorkDir, "mcp.json")
		want := []string{"-p", "--output-format", "stream-json", "--verbose", "--mcp-config", mcp, "--strict-mcp-config",
			"--permission-mode", "default", "--allowedTools", "mcp__substrat__*", "--disallowedTools", strings.Join(ownAgentTools, ","), "--permission-prompt-tool", "mcp__substrat__request_approval",
			"--append-system-prompt", "Be a test agent.", flag, id}
		if !slices.Equal(got.Args, want) {
			t.Errorf("turn %d args\n%q, want\n%q", turn+1, got.Args, want)
		}
	}
	if got.Cwd != cfg.WorkDir {
		t.Errorf("cwd %q, want %q", got.Cwd, cfg.WorkDir)
	}
	wantHome := filepath.Join(e.d.Home, "providers", "claude", "home")
	if got.Env["HOME"] != wantHome || got.Env["ENABLE_TOOL_SEARCH"] != "false" ||
		got.Env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] != "1" || got.Env["SUBSTRAT_AGENT_ID"] != cfg.AgentID ||
		got.Env["CLAUDE_CODE_DISABLE_BACKGROUND_TASKS"] != "1" || got.Env["CLAUDE_CODE_DISABLE_CRON"] != "1" || got.Env["CLAUDE_CODE_DISABLE_WORKFLOWS"] != "1" {
		t.Errorf("env %v", got.Env)
	}
	data, err := os.ReadFile(filepath.Join(cfg.WorkDir, "mcp.json"))
	if err != nil {
		t.Fatal(err)
	}
	var mc struct {
		MCPServers map[string]struct {
			Type    string   `json:"type"`
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal(data, &mc); err != nil {
		t.Fatal(err)
	}
	srv := mc.MCPServers["substrat"]
	if srv.Command != "/usr/local/bin/substrat" || !slices.Equal(srv.Args, []string{"mcp", "--agent", cfg.AgentID, "--home", e.d.Home}) || srv.Type != "stdio" {
		t.Errorf("mcp.json %s", data)
	}
}

func TestUsageAndChunks(t *testing.T) {
	e := newEnv(t)
	s, _, _ := e.create(t)
	var chunks []provider.Chunk
	res, err := s.Send(context.Background(), provider.Turn{Prompt: "hi there", Output: func(c provider.Chunk) { chunks = append(chunks, c) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "echo: hi there" || res.Usage != (provider.Usage{InputTokens: 11, OutputTokens: 5, CostUSD: 0.25}) {
		t.Errorf("result %+v", res)
	}
	if len(chunks) != 2 || chunks[0].Text+chunks[1].Text != "echo: hi there" {
		t.Errorf("chunks %+v", chunks)
	}
}

func TestToolCallThroughDaemon(t *testing.T) {
	e := newEnv(t)
	s, cfg, _ := e.create(t)
	var chunks []provider.Chunk
	tools := provider.ToolHandlerFunc(func(ctx context.Context, c provider.ToolCall) provider.ToolResult {
		return provider.ToolResult{Text: "sent to " + c.Name}
	})
	res, err := s.Send(context.Background(), provider.Turn{Prompt: `CALL send_message {"recipient":"USER","text":"x"}`, Tools: tools,
		Output: func(c provider.Chunk) { chunks = append(chunks, c) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "tool said: sent to send_message" {
		t.Errorf("text %q", res.Text)
	}
	calls := e.d.Calls()
	if len(calls) != 1 || calls[0].Agent != cfg.AgentID || calls[0].Call.ID != "toolu_fake_0" {
		t.Errorf("daemon calls %+v", calls)
	}
	var kinds []string
	for _, c := range chunks {
		kinds = append(kinds, c.Kind)
	}
	if !slices.Equal(kinds, []string{"tool_call", "tool_result", "text"}) || chunks[0].Text != `send_message {"recipient":"USER","text":"x"}` {
		t.Errorf("chunks %+v", chunks)
	}
}

func TestResumeAfterCrash(t *testing.T) {
	e := newEnv(t)
	s, cfg, ids := e.create(t)
	send(t, s, "remember PAPAYA")
	// A crash: no Suspend; the daemon restores with nil.
	cfg.SessionID = func(id string) error { *ids = append(*ids, id); return nil }
	r, err := e.provider().Restore(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if res := send(t, r, "HISTORY"); res.Text != "remember PAPAYA" {
		t.Errorf("history after Restore(nil) = %q, want the earlier prompt", res.Text)
	}
	if len(*ids) != 1 {
		t.Errorf("session ids reported %q, want the one of Create only", *ids)
	}
	// And after a clean suspend.
	blob, err := r.Suspend(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(blob), (*ids)[0]) {
		t.Errorf("blob %s lacks the session id", blob)
	}
	r2, err := e.provider().Restore(context.Background(), cfg, blob)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Stop()
	if res := send(t, r2, "HISTORY"); res.Text != "remember PAPAYA|HISTORY" {
		t.Errorf("history after Restore(blob) = %q", res.Text)
	}
}

func TestCreateStartsAfresh(t *testing.T) {
	e := newEnv(t)
	s, cfg, ids := e.create(t)
	send(t, s, "old conversation")
	// A session reset: Create again for the same agent.
	s2, err := e.provider().Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Stop()
	if res := send(t, s2, "HISTORY"); res.Text != "" {
		t.Errorf("a new session sees %q", res.Text)
	}
	r, err := e.provider().Restore(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if res := send(t, r, "HISTORY"); res.Text != "HISTORY" {
		t.Errorf("Restore(nil) after a reset resumed %q, want the new session", res.Text)
	}
	_ = ids
}

func TestGarbage(t *testing.T) {
	e := newEnv(t)
	s, _, _ := e.create(t)
	start := time.Now()
	_, err := s.Send(context.Background(), provider.Turn{Prompt: "GARBAGE"})
	if !errors.Is(err, provider.ErrProtocol) || !strings.Contains(err.Error(), "Traceback") {
		t.Fatalf("Send: %v, want ErrProtocol quoting the line", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %v", took)
	}
	send(t, s, "still works")
}

func TestTimeoutKillsGroup(t *testing.T) {
	e := newEnv(t)
	s, _, _ := e.create(t)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var arg string
	start := time.Now()
	_, err := s.Send(ctx, provider.Turn{Prompt: "HANG", Output: func(c provider.Chunk) {
		if a, ok := strings.CutPrefix(c.Text, "sleeps "); ok {
			arg = a
		}
	}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send: %v, want DeadlineExceeded", err)
	}
	t.Logf("Send returned after %v", time.Since(start))
	if arg == "" {
		t.Fatal("the fake CLI never said what it started")
	}
	deadline := time.Now().Add(5 * time.Second)
	for sleeping(arg) {
		if time.Now().After(deadline) {
			t.Fatalf("sleep %s outlived the turn", arg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sleeping reports whether a process "sleep arg" runs.
func sleeping(arg string) bool {
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range dirs {
		if b, err := os.ReadFile(d); err == nil && string(b) == "sleep\x00"+arg+"\x00" {
			return true
		}
	}
	return false
}

// TestTurnEndsAtResult: a turn ends with the CLI's result line, while the
// CLI takes its time to exit; the next turn, and Stop, wait for that exit,
// so the next turn finds the session as the CLI left it.
func TestTurnEndsAtResult(t *testing.T) {
	e := newEnv(t)
	s, _, _ := e.create(t)
	const linger = 1500 * time.Millisecond
	start := time.Now()
	if res := send(t, s, fmt.Sprintf("LINGER %d", linger.Milliseconds())); res.Text != "lingering" {
		t.Fatalf("LINGER answered %q", res.Text)
	}
	if took := time.Since(start); took >= linger {
		t.Errorf("the turn took %v: it waited for the CLI to exit (%v after its result)", took, linger)
	}
	if res := send(t, s, "HISTORY"); !strings.HasSuffix(res.Text, "|exited") {
		t.Errorf("the next turn started before the last one's CLI exited: history %q", res.Text)
	}
	send(t, s, fmt.Sprintf("LINGER %d", linger.Milliseconds()))
	start = time.Now()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < linger/2 {
		t.Errorf("Stop returned after %v, before the CLI exited", took)
	}
}

func TestOverloadRetried(t *testing.T) {
	e := newEnv(t)
	s, _, _ := e.create(t)
	if res := send(t, s, "OVERLOAD 2"); res.Text != "fine after 2 failures" {
		t.Errorf("text %q", res.Text)
	}
	e2 := newEnv(t)
	s2, _, _ := e2.create(t)
	_, err := s2.Send(context.Background(), provider.Turn{Prompt: "OVERLOAD 5"})
	if !errors.Is(err, provider.ErrRetryable) || !strings.Contains(err.Error(), "overloaded") || !strings.Contains(err.Error(), "3 times") {
		t.Errorf("Send: %v, want ErrRetryable after 3 tries", err)
	}
}

func TestNoResult(t *testing.T) {
	e := newEnv(t)
	s, _, _ := e.create(t)
	_, err := s.Send(context.Background(), provider.Turn{Prompt: "NORESULT"})
	if err == nil || !strings.Contains(err.Error(), "without a result") || !strings.Contains(err.Error(), "something went wrong") {
		t.Fatalf("Send: %v", err)
	}
}

func TestMissingCLI(t *testing.T) {
	d := rpctest.Start(t)
	p := New(Options{Command: "substrat-no-such-claude", Home: d.Home})
	s, err := p.Create(context.Background(), d.Config(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if _, err := s.Send(context.Background(), provider.Turn{Prompt: "hi"}); err == nil || !strings.Contains(err.Error(), "not installed") {
		t.Errorf("Send: %v", err)
	}
}

func TestHomeFromWorkDir(t *testing.T) {
	d := rpctest.Start(t)
	cfg := d.Config(t)
	s, err := New(Options{Command: fakeCLI(t), Substrat: "/x/substrat"}).Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	data, err := os.ReadFile(filepath.Join(cfg.WorkDir, "mcp.json"))
	if err != nil || !strings.Contains(string(data), `"`+d.Home+`"`) {
		t.Errorf("mcp.json %s (%v) does not name the home %s", data, err, d.Home)
	}
	cfg.WorkDir = t.TempDir()
	if _, err := New(Options{}).Create(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "Substrat home") {
		t.Errorf("Create with an unrelated work dir: %v", err)
	}
}

// TestParseRealLines reads lines as the real CLI (2.1.328) prints them.
func TestParseRealLines(t *testing.T) {
	init := `{"type":"system","subtype":"init","cwd":"/w","session_id":"0199aaaa-0000-4000-8000-000000000001","tools":["Task"],"mcp_servers":[{"name":"substrat","status":"connected"}],"model":"claude-opus-5-5","permissionMode":"default"}`
	l, err := parse([]byte(init))
	if err != nil || l.SessionID != "0199aaaa-0000-4000-8000-000000000001" || l.Final != nil {
		t.Errorf("init: %+v, %v", l, err)
	}
	failed := strings.Replace(init, `"connected"`, `"failed"`, 1)
	if l, err := parse([]byte(failed)); err != nil || l.Final == nil || l.Final.Err == nil {
		t.Errorf("a failed MCP server: %+v, %v", l, err)
	}
	res := `{"type":"result","subtype":"success","is_error":false,"duration_api_ms":22,"stop_reason":"end_turn","session_id":"s","total_cost_usd":0.0008,"usage":{"input_tokens":100,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":20,"output_tokens_details":{"thinking_tokens":0},"server_tool_use":{"web_search_requests":0},"service_tier":"standard","iterations":[],"fallback_credit":null},"result":"hi"}`
	l, err = parse([]byte(res))
	if err != nil || l.Final == nil || l.Final.Text != "hi" || l.Final.Usage != (provider.Usage{InputTokens: 100, OutputTokens: 20, CostUSD: 0.0008}) {
		t.Errorf("result: %+v, %v", l.Final, err)
	}
	// Only what is not JSON at all is unreadable.
	for _, bad := range []string{`not json`, `{"type":`, `{"type":"result"} trailing`} {
		if _, err := parse([]byte(bad)); err == nil {
			t.Errorf("parse(%q) succeeded", bad)
		}
	}
	// JSON of a type or shape the adapter does not know is skipped, and a
	// field of an unexpected shape does not lose the others.
	for _, odd := range []string{`{"no":"type"}`, `[1]`, `"text"`, `{"type":"rate_limit_event","x":1}`,
		`{"type":"assistant","message":"a string"}`, `{"type":"user","message":{"content":"not blocks"}}`,
		`{"type":"system","subtype":"hook_started","hook_name":"x"}`, `{"type":"system","subtype":"compact_boundary","compact_metadata":{}}`,
		`{"type":7}`} {
		if l, err := parse([]byte(odd)); err != nil || l.Final != nil || len(l.Chunks) != 0 {
			t.Errorf("parse(%q) = %+v, %v; want it skipped", odd, l, err)
		}
	}
	// Claude Code compacted its context: reported, the turn goes on.
	if l, err := parse([]byte(`{"type":"system","subtype":"compact_boundary","session_id":"s","compact_metadata":{"trigger":"auto","pre_tokens":155012}}`)); err != nil ||
		len(l.Compactions) != 1 || l.Compactions[0].TokensBefore != 155012 || l.Compactions[0].Reason != provider.CompactThreshold || l.Final != nil {
		t.Errorf("compact_boundary: %+v, %v", l, err)
	}
	if l, _ := parse([]byte(`{"type":"system","subtype":"compact_boundary","compact_metadata":{"trigger":"manual","pre_tokens":"odd"}}`)); len(l.Compactions) != 1 || l.Compactions[0].Reason != "manual" {
		t.Errorf("manual compact_boundary: %+v", l)
	}
	if l, err := parse([]byte(`{"type":"result","subtype":"success","result":"ok","usage":"odd","total_cost_usd":"x"}`)); err != nil || l.Final == nil || l.Final.Text != "ok" {
		t.Errorf("a result with odd usage: %+v, %v", l, err)
	}
	// A tool the CLI refused: a denial chunk, and the turn goes on. The
	// line as the pinned CLI prints it (message is a string here).
	denied := `{"type":"system","subtype":"permission_denied","tool_name":"Write","tool_use_id":"toolu_w1","decision_reason_type":"workingDir","decision_reason":"Path is outside allowed working directories","message":"Claude requested permissions to write to /x/y.txt, but you haven't granted it yet.","uuid":"u","session_id":"s"}`
	l, err = parse([]byte(denied))
	if err != nil || l.Final != nil || len(l.Chunks) != 1 || l.Chunks[0].Kind != provider.ChunkDenied || l.Chunks[0].Tool != "Write" ||
		l.Chunks[0].Text != "Claude requested permissions to write to /x/y.txt, but you haven't granted it yet. (Path is outside allowed working directories)" {
		t.Errorf("permission_denied: %+v, %v", l, err)
	}
}

func TestTrackAndSandboxHooks(t *testing.T) {
	e := newEnv(t)
	cfg := e.d.Config(t)
	var tracked, done []int
	cfg.Track = func(pid int) func() {
		tracked = append(tracked, pid)
		return func() { done = append(done, pid) }
	}
	var (
		wrappedEnv []string
		wrappedCmd string
		needs      provider.SandboxNeeds
	)
	cfg.Sandbox = func(ctx context.Context, cmd provider.Process, n provider.SandboxNeeds) (provider.Process, error) {
		wrappedEnv, wrappedCmd, needs = cmd.Env, cmd.Path, n
		return cmd, nil
	}
	cfg.ToolSocket = filepath.Join(e.d.Home, "run", cfg.AgentID+".sock")
	t.Setenv("SUBSTRAT_TEST_SECRET", "do-not-leak")
	t.Setenv("CURSOR_API_KEY", "not-for-claude")
	s, err := e.provider().Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	send(t, s, "hello")
	// The process may still be exiting when Send returns; Stop waits for
	// it, and so for the hook's done.
	s.Stop()
	if len(tracked) != 1 || !slices.Equal(tracked, done) {
		t.Errorf("tracked %v, done %v", tracked, done)
	}
	if len(wrappedEnv) == 0 || slices.ContainsFunc(wrappedEnv, func(kv string) bool {
		return strings.HasPrefix(kv, "SUBSTRAT_TEST_SECRET=") || strings.HasPrefix(kv, "CURSOR_API_KEY=")
	}) ||
		!slices.Contains(wrappedEnv, "ENABLE_TOOL_SEARCH=false") {
		t.Errorf("sandboxed env %q", wrappedEnv)
	}
	// The sandbox is asked for the CLI's package (by its real path, not
	// the symlink on PATH), the substrat binary, mcp.json and the agent's
	// own HOME, and the network; mcp.json points at the agent's socket.
	exe, _ := filepath.EvalSymlinks(e.cli)
	mcpPath := filepath.Join(cfg.WorkDir, "mcp.json")
	chome := filepath.Join(e.d.Home, "providers", "claude", "homes", cfg.AgentID)
	want := provider.SandboxNeeds{ReadOnly: []string{filepath.Dir(exe), "/usr/local/bin/substrat", mcpPath},
		ReadWrite: []string{chome}, Network: true}
	if wrappedCmd != exe || !slices.Equal(needs.ReadOnly, want.ReadOnly) || !slices.Equal(needs.ReadWrite, want.ReadWrite) || !needs.Network || !needs.ToolSocket {
		t.Errorf("sandboxed %s with needs %+v, want %s with %+v", wrappedCmd, needs, exe, want)
	}
	if !slices.Contains(wrappedEnv, "HOME="+chome) {
		t.Errorf("sandboxed HOME is not the agent's own: %q", wrappedEnv)
	}
	var mcp struct {
		MCPServers map[string]struct {
			Args []string `json:"args"`
		} `json:"mcpServers"`
	}
	if data, err := os.ReadFile(mcpPath); err != nil || json.Unmarshal(data, &mcp) != nil {
		t.Fatalf("mcp.json: %v", err)
	}
	if got, want := mcp.MCPServers["substrat"].Args, []string{"mcp", "--agent", cfg.AgentID, "--socket", cfg.ToolSocket}; !slices.Equal(got, want) {
		t.Errorf("sandboxed mcp.json args %q, want %q", got, want)
	}
	// A sandbox that cannot be had fails the turn, saying so.
	cfg2 := e.d.Config(t)
	cfg2.Sandbox = func(ctx context.Context, cmd provider.Process, _ provider.SandboxNeeds) (provider.Process, error) {
		return provider.Process{}, errors.New("bwrap is not installed")
	}
	s2, err := e.provider().Create(context.Background(), cfg2)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Stop()
	if _, err := s2.Send(context.Background(), provider.Turn{Prompt: "hi"}); err == nil || !strings.Contains(err.Error(), "bwrap is not installed") {
		t.Errorf("Send with a broken sandbox: %v", err)
	}
}

// The permission setting maps onto the CLI's flags; IS_SANDBOX=1 (which
// lets root run bypassPermissions) is set only for full permission inside
// a sandbox.
func TestPermissionFlags(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		name      string
		perm      provider.Permissions
		sandboxed bool
		wantArgs  []string
		isSandbox bool
	}{
		{"zero value", provider.Permissions{}, false, []string{"--permission-mode", "default", "--allowedTools", "mcp__substrat__*"}, false},
		{"rules", provider.Permissions{Mode: provider.ModeAcceptEdits, AllowedTools: []string{"Bash(git *)"}, DisallowedTools: []string{"WebFetch", "Bash(rm *)"}}, false,
			[]string{"--permission-mode", "acceptEdits", "--allowedTools", "mcp__substrat__*,Bash(git *)", "--disallowedTools", strings.Join(ownAgentTools, ",") + ",WebFetch,Bash(rm *)"}, false},
		{"full outside a sandbox", provider.Permissions{Mode: provider.ModeFull}, false, []string{"--permission-mode", "bypassPermissions"}, false},
		{"full in a sandbox", provider.Permissions{Mode: provider.ModeFull}, true, []string{"--permission-mode", "bypassPermissions"}, true},
		{"safe in a sandbox", provider.Permissions{Mode: provider.ModePlan}, true, []string{"--permission-mode", "plan"}, false},
		{"no approver", provider.Permissions{Mode: provider.ModeDefault, Approver: "deny"}, false, []string{"--permission-mode", "default"}, false},
		{"prompts go to the approver", provider.Permissions{Mode: provider.ModeDefault}, false,
			[]string{"--allowedTools", "mcp__substrat__*", "--disallowedTools", strings.Join(ownAgentTools, ","), "--permission-prompt-tool", "mcp__substrat__request_approval"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := e.d.Config(t)
			cfg.Permissions = c.perm
			var env []string
			if c.sandboxed {
				cfg.Sandbox = func(ctx context.Context, cmd provider.Process, n provider.SandboxNeeds) (provider.Process, error) {
					env = cmd.Env
					return cmd, nil
				}
				cfg.ToolSocket = filepath.Join(e.d.Home, "run", cfg.AgentID+".sock")
			}
			s, err := e.provider().Create(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Stop()
			var got struct {
				Args []string          `json:"args"`
				Env  map[string]string `json:"env"`
			}
			if err := json.Unmarshal([]byte(send(t, s, "ENV").Text), &got); err != nil {
				t.Fatal(err)
			}
			joined := strings.Join(got.Args, "\x00")
			if !strings.Contains(joined, strings.Join(c.wantArgs, "\x00")) {
				t.Errorf("args %q lack %q", got.Args, c.wantArgs)
			}
			if prompts := slices.Contains(got.Args, "--permission-prompt-tool"); prompts != provider.AsksApproval(c.perm) {
				t.Errorf("--permission-prompt-tool given: %v, want %v", prompts, !prompts)
			}
			if c.sandboxed {
				if has := slices.Contains(env, "IS_SANDBOX=1"); has != c.isSandbox {
					t.Errorf("IS_SANDBOX=1 in the sandbox's env: %v, want %v", has, c.isSandbox)
				}
			} else if got.Env["IS_SANDBOX"] == "1" && os.Getenv("IS_SANDBOX") != "1" {
				t.Errorf("IS_SANDBOX=1 set outside a sandbox")
			}
		})
	}
}

// TestStubTranscript: a transcript the CLI began but was killed before it
// wrote the message (queue operations only) is not a conversation to
// --resume; nor is a FIFO planted where the transcript goes (a sandboxed
// CLI writes that HOME), which must not block the turn. Either way the
// next turn starts the session again with --session-id, which the stub
// would refuse ("already in use") if it stayed.
func TestStubTranscript(t *testing.T) {
	e := newEnv(t)
	s, cfg, ids := e.create(t)
	id := (*ids)[0]
	send(t, s, "hello")
	dir := filepath.Join(e.d.Home, "providers", "claude", "home", ".claude", "projects", strings.ReplaceAll(cfg.WorkDir, "/", "-"))
	path := filepath.Join(dir, id+".jsonl")
	for _, plant := range []func() error{
		func() error {
			return os.WriteFile(path, []byte(`{"type":"queue-operation","operation":"enqueue"}`+"\n"), 0o600)
		},
		func() error { os.Remove(path); return syscall.Mkfifo(path, 0o600) },
	} {
		if err := plant(); err != nil {
			t.Fatal(err)
		}
		res := send(t, s, "ENV")
		var got struct {
			Args []string `json:"args"`
		}
		if err := json.Unmarshal([]byte(res.Text), &got); err != nil {
			t.Fatalf("%v: %s", err, res.Text)
		}
		if !slices.Contains(got.Args, "--session-id") || slices.Contains(got.Args, "--resume") {
			t.Errorf("after a stub transcript: args %q, want --session-id", got.Args)
		}
		// The turn wrote a real transcript: the next one resumes it.
		res = send(t, s, "ENV")
		if err := json.Unmarshal([]byte(res.Text), &got); err != nil {
			t.Fatalf("%v: %s", err, res.Text)
		}
		if !slices.Contains(got.Args, "--resume") {
			t.Errorf("after a real transcript: args %q, want --resume", got.Args)
		}
	}
}
