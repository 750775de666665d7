package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor"
	"github.com/substrat/substrat/supervisor/rpc"
)

const mcpAgent = "0199aaaa-0000-7000-8000-000000000042"

// fakeDaemon serves tool.list (the real tool specs) and tool.call (recorded,
// answered by answer) on the socket of a home.
type fakeDaemon struct {
	home string
	srv  *rpc.Server

	mu       sync.Mutex
	calls    []toolCallParams
	extra    []api.ToolSpec                  // listed besides the real tools
	handlers map[string]provider.ToolHandler // agent id -> its turn's tools
}

type toolCallParams = api.ToolCallParams

func startFakeDaemon(t *testing.T, home string) *fakeDaemon {
	t.Helper()
	d := &fakeDaemon{home: home, handlers: map[string]provider.ToolHandler{}}
	d.srv = rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	rpc.Handle(d.srv, api.ToolList, func(ctx context.Context, _ struct{}) ([]api.ToolSpec, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		return append(supervisor.Tools(), d.extra...), nil
	})
	rpc.Handle(d.srv, api.ToolCall, func(ctx context.Context, p api.ToolCallParams) (api.ToolResult, error) {
		d.mu.Lock()
		d.calls = append(d.calls, p)
		h := d.handlers[p.Agent]
		d.mu.Unlock()
		if h != nil {
			return api.ToolResult(h.CallTool(ctx, provider.ToolCall(p.Call))), nil
		}
		if p.Call.Name == "complete" {
			return api.ToolResult{IsError: true, Text: "complete: you have children still running"}, nil
		}
		return api.ToolResult{Text: fmt.Sprintf("ran %s with %s", p.Call.Name, p.Call.Args)}, nil
	})
	ln, err := net.Listen("unix", fsstore.Layout{Home: home}.Socket())
	if err != nil {
		t.Fatal(err)
	}
	go d.srv.Serve(ln)
	t.Cleanup(func() { d.srv.Close() })
	return d
}

func (d *fakeDaemon) got() []toolCallParams {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]toolCallParams(nil), d.calls...)
}

// shortHome returns a home whose socket path fits in sun_path.
func shortHome(t testing.TB) string {
	t.Helper()
	home, err := os.MkdirTemp("", "sbm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	return home
}

// mcpCommand is `substrat mcp` run as a subprocess (the test binary, which
// testscript put in PATH as substrat).
func mcpCommand(t *testing.T, home string, args ...string) *exec.Cmd {
	t.Helper()
	bin, err := exec.LookPath("substrat")
	if err != nil {
		t.Fatalf("substrat is not in PATH: %v", err)
	}
	cmd := exec.Command(bin, append([]string{"mcp", "--home", home}, args...)...)
	cmd.Env = append(os.Environ(), "SUBSTRAT_HOME=")
	return cmd
}

func TestMCPServer(t *testing.T) {
	home := shortHome(t)
	d := startFakeDaemon(t, home)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "substrat-test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: mcpCommand(t, home, "--agent", mcpAgent)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got := cs.InitializeResult(); got == nil || got.ServerInfo == nil || got.ServerInfo.Name != "substrat" {
		t.Errorf("server info %+v", got)
	}

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	specs := supervisor.Tools()
	if len(tools.Tools) != len(specs) {
		t.Fatalf("%d tools listed, the daemon has %d", len(tools.Tools), len(specs))
	}
	byName := map[string]*mcp.Tool{}
	for _, tl := range tools.Tools {
		byName[tl.Name] = tl
	}
	for _, s := range specs {
		tl := byName[s.Name]
		if tl == nil {
			t.Errorf("tool %s is not listed", s.Name)
			continue
		}
		got, _ := json.Marshal(tl.InputSchema)
		if !jsonSame(got, s.InputSchema) || tl.Description != s.Description {
			t.Errorf("tool %s: schema %s, description %q; want %s, %q", s.Name, got, tl.Description, s.InputSchema, s.Description)
		}
	}

	// A call with the client's tool-use id in _meta.
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "send_message",
		Arguments: map[string]any{"recipient": "USER", "text": "hi"},
		Meta:      mcp.Meta{"claudecode/toolUseId": "toolu_01ABC"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != `ran send_message with {"recipient":"USER","text":"hi"}` {
		t.Errorf("result %+v", res)
	}
	// An error result.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "complete", Arguments: map[string]any{"result": "done"}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || res.Content[0].(*mcp.TextContent).Text != "complete: you have children still running" {
		t.Errorf("error result %+v", res)
	}
	// Two identical calls without an id.
	for range 2 {
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_children", Arguments: map[string]any{}}); err != nil {
			t.Fatal(err)
		}
	}
	calls := d.got()
	if len(calls) != 4 {
		t.Fatalf("%d calls reached the daemon, want 4", len(calls))
	}
	for _, c := range calls {
		if c.Agent != mcpAgent {
			t.Errorf("call for agent %q, want %q", c.Agent, mcpAgent)
		}
	}
	if calls[0].Call.ID != "toolu_01ABC" {
		t.Errorf("id %q, want the client's tool-use id", calls[0].Call.ID)
	}
	want2 := mcpCallID(mcpAgent, "list_children", json.RawMessage(`{}`), 2)
	want3 := mcpCallID(mcpAgent, "list_children", json.RawMessage(`{}`), 3)
	if calls[2].Call.ID != want2 || calls[3].Call.ID != want3 || want2 == want3 || !strings.HasPrefix(want2, "mcp_") {
		t.Errorf("ids without _meta %q %q, want %q %q", calls[2].Call.ID, calls[3].Call.ID, want2, want3)
	}
}

func TestMCPCallIDDeterministic(t *testing.T) {
	a := mcpCallID(mcpAgent, "spawn_agent", json.RawMessage(`{"name":"x","instructions":"y"}`), 0)
	b := mcpCallID(mcpAgent, "spawn_agent", json.RawMessage(`{ "instructions":"y", "name":"x" }`), 0)
	if a != b {
		t.Errorf("key order changes the id: %s %s", a, b)
	}
	for _, other := range []string{
		mcpCallID(mcpAgent, "spawn_agent", json.RawMessage(`{"name":"x","instructions":"y"}`), 1),
		mcpCallID(mcpAgent, "spawn_agent", json.RawMessage(`{"name":"z","instructions":"y"}`), 0),
		mcpCallID("0199aaaa-0000-7000-8000-000000000043", "spawn_agent", json.RawMessage(`{"name":"x","instructions":"y"}`), 0),
		mcpCallID(mcpAgent, "send_message", json.RawMessage(`{"name":"x","instructions":"y"}`), 0),
	} {
		if other == a {
			t.Errorf("different calls share id %s", a)
		}
	}
}

// rawMCP speaks JSON-RPC lines to a `substrat mcp` process, as Claude Code
// does (a server/discover probe first, protocol 2025-11-25).
type rawMCP struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Scanner
	id  int
}

func (r *rawMCP) send(method string, params any, notify bool) {
	r.t.Helper()
	msg := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		msg["params"] = params
	}
	if !notify {
		r.id++
		msg["id"] = r.id
	}
	b, _ := json.Marshal(msg)
	if _, err := r.in.Write(append(b, '\n')); err != nil {
		r.t.Fatal(err)
	}
}

// reply reads lines until the answer to the last request.
func (r *rawMCP) reply() map[string]any {
	r.t.Helper()
	for r.out.Scan() {
		var m map[string]any
		if err := json.Unmarshal(r.out.Bytes(), &m); err != nil {
			r.t.Fatalf("the server wrote a line that is not JSON: %q", r.out.Text())
		}
		if id, ok := m["id"].(float64); ok && int(id) == r.id {
			return m
		}
	}
	r.t.Fatalf("the server closed stdout: %v", r.out.Err())
	return nil
}

func TestMCPRawProtocol(t *testing.T) {
	home := shortHome(t)
	d := startFakeDaemon(t, home)
	cmd := mcpCommand(t, home, "--agent", mcpAgent)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	waited := make(chan struct{})
	go func() { exited <- cmd.Wait(); close(waited) }()
	defer func() {
		cmd.Process.Kill()
		<-waited
	}()
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	r := &rawMCP{t: t, in: in, out: sc}

	// Claude Code's probe, and a method nobody knows: answered, not fatal.
	r.send("server/discover", map[string]any{"protocolVersion": "2025-11-25"}, false)
	r.reply()
	r.send("substrat/no-such-method", map[string]any{}, false)
	if m := r.reply(); m["error"] == nil {
		t.Errorf("an unknown method got %v, want an error", m)
	}
	r.send("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "claude-code", "version": "2.1.328"}}, false)
	init := r.reply()
	res, _ := init["result"].(map[string]any)
	if res == nil || res["protocolVersion"] != "2025-11-25" {
		t.Fatalf("initialize answered %v (stderr %s)", init, stderr.String())
	}
	r.send("notifications/initialized", nil, true)
	r.send("tools/list", map[string]any{}, false)
	list, _ := r.reply()["result"].(map[string]any)
	if tools, _ := list["tools"].([]any); len(tools) != len(supervisor.Tools()) {
		t.Errorf("tools/list %v", list)
	}
	r.send("tools/call", map[string]any{"name": "spawn_agent", "arguments": map[string]any{"name": "kid", "instructions": "play"},
		"_meta": map[string]any{"claudecode/toolUseId": "toolu_raw_1"}}, false)
	call, _ := r.reply()["result"].(map[string]any)
	if call == nil || call["isError"] == true {
		t.Errorf("tools/call answered %v", call)
	}
	if calls := d.got(); len(calls) != 1 || calls[0].Call.ID != "toolu_raw_1" || calls[0].Call.Name != "spawn_agent" {
		t.Errorf("daemon calls %+v", calls)
	}
	// Closing stdin ends the server cleanly.
	in.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit: %v (stderr %s)", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Error("the server did not exit after stdin closed")
	}
}

func TestMCPDaemonRestart(t *testing.T) {
	home := shortHome(t)
	d := startFakeDaemon(t, home)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "substrat-test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: mcpCommand(t, home, "--agent", mcpAgent)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	// The daemon goes away: the call is an error result, not a crash.
	d.srv.Close()
	os.Remove(fsstore.Layout{Home: home}.Socket())
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_children", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "daemon") {
		t.Errorf("call with the daemon down: %+v", res)
	}
	// It comes back: the same server reaches it.
	d2 := startFakeDaemon(t, home)
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_children", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("call after the restart: %+v, %v", res, err)
	}
	if len(d2.got()) != 1 {
		t.Errorf("the new daemon got %d calls", len(d2.got()))
	}
}

func TestMCPNoDaemon(t *testing.T) {
	home := shortHome(t)
	cmd := mcpCommand(t, home, "--agent", mcpAgent, "--wait", "200ms")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 || !strings.Contains(string(out), "cannot list the agent tools") {
		t.Errorf("mcp without a daemon: %v\n%s", err, out)
	}
	cmd = mcpCommand(t, home, "--agent", "../etc")
	out, err = cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "agent id") {
		t.Errorf("mcp with a bad agent: %v\n%s", err, out)
	}
}

func jsonSame(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}
