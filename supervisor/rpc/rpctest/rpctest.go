// Package rpctest is a stand-in for the Substrat daemon in the tests of
// the CLI providers: it serves tool.list and tool.call on the socket of a
// temporary home, and routes each tool.call to the ToolHandler of the turn
// the agent is in, as the daemon does. Fake CLIs reach it the way
// `substrat mcp` does.
package rpctest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor/rpc"
)

// Daemon is the stand-in.
type Daemon struct {
	Home string

	mu    sync.Mutex
	turns map[string]provider.ToolHandler // agent id -> the turn's tools
	calls []Call
}

// Call is a recorded tool.call.
type Call struct {
	Agent string
	Call  provider.ToolCall
}

// Start serves on a new temporary home until the test ends.
func Start(t testing.TB) *Daemon {
	t.Helper()
	home, err := os.MkdirTemp("", "sbd") // short: socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	d := &Daemon{Home: home, turns: map[string]provider.ToolHandler{}}
	if err := os.MkdirAll(fsstore.Layout{Home: home}.AgentsDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	rpc.Handle(srv, api.ToolList, func(ctx context.Context, _ struct{}) ([]api.ToolSpec, error) {
		return []api.ToolSpec{{Name: "send_message", Description: "Send a message.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"recipient":{"type":"string"},"text":{"type":"string"}}}`)},
			// The probe of provider/providertest, for a real CLI to call.
			{Name: "providertest_probe", Description: "The conformance suite's probe.",
				InputSchema: json.RawMessage(`{"type":"object"}`)}}, nil
	})
	rpc.Handle(srv, api.ToolCall, func(ctx context.Context, p api.ToolCallParams) (api.ToolResult, error) {
		call := provider.ToolCall(p.Call)
		d.mu.Lock()
		d.calls = append(d.calls, Call{p.Agent, call})
		h := d.turns[p.Agent]
		d.mu.Unlock()
		if h == nil {
			return api.ToolResult{IsError: true, Text: "agent " + p.Agent + " is not in a turn"}, nil
		}
		return api.ToolResult(h.CallTool(ctx, call)), nil
	})
	ln, err := net.Listen("unix", fsstore.Layout{Home: home}.Socket())
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return d
}

// Calls returns the tool calls so far.
func (d *Daemon) Calls() []Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Call(nil), d.calls...)
}

var seq atomic.Int64

// Config returns the config of a new agent whose directory (the work dir)
// exists under the home, as the daemon makes it.
func (d *Daemon) Config(t testing.TB) provider.Config {
	t.Helper()
	n := seq.Add(1)
	id := fmt.Sprintf("0199aaaa-0000-7000-8000-%012d", n)
	dir := fsstore.Layout{Home: d.Home}.AgentDir(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return provider.Config{AgentID: id, Name: fmt.Sprintf("agent%d", n), Instructions: "Be a test agent.", WorkDir: dir}
}

// Wrap returns p whose sessions register each turn's tools with d for the
// duration of Send, as the daemon's turns do.
func (d *Daemon) Wrap(p provider.Provider) provider.Provider { return &wrapped{Provider: p, d: d} }

type wrapped struct {
	provider.Provider
	d *Daemon
}

func (w *wrapped) Create(ctx context.Context, cfg provider.Config) (provider.Session, error) {
	s, err := w.Provider.Create(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &session{Session: s, d: w.d, agent: cfg.AgentID}, nil
}

func (w *wrapped) Restore(ctx context.Context, cfg provider.Config, state []byte) (provider.Session, error) {
	s, err := w.Provider.Restore(ctx, cfg, state)
	if err != nil {
		return nil, err
	}
	return &session{Session: s, d: w.d, agent: cfg.AgentID}, nil
}

type session struct {
	provider.Session
	d     *Daemon
	agent string
}

func (s *session) Send(ctx context.Context, turn provider.Turn) (provider.TurnResult, error) {
	s.d.mu.Lock()
	if turn.Tools != nil {
		s.d.turns[s.agent] = turn.Tools
	}
	s.d.mu.Unlock()
	defer func() {
		s.d.mu.Lock()
		delete(s.d.turns, s.agent)
		s.d.mu.Unlock()
	}()
	return s.Session.Send(ctx, turn)
}

// CallTool makes a tool.call on socket as `substrat mcp` does.
func CallTool(ctx context.Context, socket, agent string, call provider.ToolCall) (provider.ToolResult, error) {
	c, err := rpc.Dial(ctx, socket)
	if err != nil {
		return provider.ToolResult{}, err
	}
	defer c.Close()
	res, err := rpc.Call(ctx, c, api.ToolCall, api.ToolCallParams{Agent: agent, Call: api.ToolRequest(call)})
	return provider.ToolResult(res), err
}

// MCPArgs reads the agent and the socket from an MCP config's substrat
// server: the args of `substrat mcp --agent ID --home HOME` (the socket is
// then HOME's daemon.sock) or `substrat mcp --agent ID --socket PATH`.
func MCPArgs(path string) (agent, socket string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	var cfg struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return "", "", err
	}
	s, ok := cfg.MCPServers["substrat"]
	if !ok || len(s.Args) == 0 || s.Args[0] != "mcp" || s.Command == "" {
		return "", "", fmt.Errorf("no substrat mcp server in %s", data)
	}
	for i := 1; i+1 < len(s.Args); i++ {
		switch s.Args[i] {
		case "--agent":
			agent = s.Args[i+1]
		case "--home":
			socket = fsstore.Layout{Home: s.Args[i+1]}.Socket()
		case "--socket":
			socket = s.Args[i+1]
		}
	}
	if agent == "" || socket == "" {
		return "", "", fmt.Errorf("the substrat server lacks --agent, or --home or --socket: %v", s.Args)
	}
	return agent, socket, nil
}
