package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/claude"
	"github.com/substrat/substrat/provider/codex"
	"github.com/substrat/substrat/provider/cursor"
	"github.com/substrat/substrat/provider/gemini"
	"github.com/substrat/substrat/provider/openai"
	"github.com/substrat/substrat/supervisor"
	"github.com/substrat/substrat/supervisor/rpc"
)

// McpCmd is `substrat mcp --agent ID`: a stdio MCP server, named
// "substrat", that provider CLIs (claude, cursor-agent) start to reach the
// agent tools. It lists the tools of the daemon of --home and forwards each
// tools/call to the daemon's tool.call for the agent. Inside a sandbox it
// is started with --socket, the agent's own tool socket, which serves
// those two calls for that agent only.
//
// Every daemon call uses a fresh connection, so a server outlives a daemon
// restart. The idempotency key of a call (provider.ToolCall.ID) is the
// client's tool-use id when the request's _meta carries one (Claude Code
// sends "claudecode/toolUseId", the Codex CLI "callId"), and otherwise "mcp_" followed by a hash of
// the agent, the tool name, the arguments and the call's position among
// this process's calls, so that a turn replayed after a crash asks for the
// same keys.
type McpCmd struct {
	Agent  string        `required:"" help:"Id of the agent the tools act for." placeholder:"ID"`
	Socket string        `help:"Socket to reach the tools on instead of the daemon's (a sandboxed agent's own tool socket, run/<id>.sock)." type:"path" placeholder:"PATH"`
	Wait   time.Duration `help:"How long to wait for the daemon to answer at start." default:"10s"`
}

// Run serves MCP on stdin and stdout until stdin closes or a signal.
func (c *McpCmd) Run(g *Globals) error {
	if !fsstore.IsID(c.Agent) {
		return &exitError{code: 2, msg: fmt.Sprintf("--agent must be an agent id (a lower-case UUIDv7), got %q", c.Agent)}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	socket := c.Socket
	if socket == "" {
		socket = fsstore.Layout{Home: g.Home}.Socket()
	}
	b := &mcpBridge{socket: socket, agent: c.Agent}
	srv, err := b.server(ctx, c.Wait)
	if err != nil {
		return err
	}
	err = srv.Run(ctx, &mcp.StdioTransport{})
	if err == nil || errors.Is(err, io.EOF) || ctx.Err() != nil {
		return nil // the client went away, or we were told to stop
	}
	return fmt.Errorf("mcp: %w", err)
}

// mcpToolUseIDKeys are the _meta keys under which MCP clients pass the
// model's tool-use id, in order of preference.
var mcpToolUseIDKeys = []string{"claudecode/toolUseId", "toolUseId", "tool_use_id", "toolCallId", "tool_call_id", "callId"}

// mcpBridge forwards MCP tool calls to the daemon.
type mcpBridge struct {
	socket string
	agent  string
	calls  atomic.Int64 // tool calls made by this process
}

// bridgeCall makes the call m on a fresh connection to b's socket.
func bridgeCall[P, R any](ctx context.Context, b *mcpBridge, m api.Method[P, R], p P) (R, error) {
	c, err := rpc.Dial(ctx, b.socket)
	if err != nil {
		var zero R
		return zero, err
	}
	defer c.Close()
	return rpc.Call(ctx, c, m, p)
}

// server fetches the tool list, waiting up to wait for the daemon, and
// returns an MCP server exposing it.
func (b *mcpBridge) server(ctx context.Context, wait time.Duration) (*mcp.Server, error) {
	var specs []api.ToolSpec
	deadline := time.Now().Add(wait)
	for {
		var err error
		specs, err = bridgeCall(ctx, b, api.ToolList, struct{}{})
		if err == nil {
			break
		}
		if !errors.Is(err, rpc.ErrNoDaemon) || time.Now().After(deadline) || ctx.Err() != nil {
			return nil, &exitError{code: 3, msg: fmt.Sprintf("mcp: cannot list the agent tools from the daemon on %s: %v", b.socket, err),
				hint: "the daemon must run on the same --home"}
		}
		time.Sleep(100 * time.Millisecond)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv := mcp.NewServer(&mcp.Implementation{Name: "substrat", Version: version}, &mcp.ServerOptions{Logger: log})
	for _, s := range specs {
		schema := s.InputSchema
		if len(bytes.TrimSpace(schema)) == 0 {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		srv.AddTool(&mcp.Tool{Name: s.Name, Description: s.Description, InputSchema: schema}, b.handler(s.Name))
	}
	return srv, nil
}

func (b *mcpBridge) handler(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		n := b.calls.Add(1) - 1
		args := json.RawMessage(bytes.TrimSpace(req.Params.Arguments))
		if len(args) == 0 || string(args) == "null" {
			args = json.RawMessage("{}")
		}
		id := metaToolUseID(req.Params.Meta)
		if id == "" {
			id = mcpCallID(b.agent, name, args, n)
		}
		res, err := bridgeCall(ctx, b, api.ToolCall, api.ToolCallParams{Agent: b.agent, Call: api.ToolRequest{ID: id, Name: name, Args: args}})
		if err != nil {
			res = api.ToolResult{IsError: true, Text: fmt.Sprintf("substrat could not run %s: %v", name, err)}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Text}}, IsError: res.IsError}, nil
	}
}

// metaToolUseID returns the tool-use id a client passed in _meta, or "".
func metaToolUseID(meta mcp.Meta) string {
	for _, k := range mcpToolUseIDKeys {
		if s, ok := meta[k].(string); ok && s != "" {
			return s
		}
	}
	return ""
}

// mcpCallID is the deterministic id of the n-th (0-based) call of this
// process when the client gave none.
func mcpCallID(agent, name string, args json.RawMessage, n int64) string {
	canon := []byte(args)
	var v any
	if json.Unmarshal(args, &v) == nil {
		if b, err := json.Marshal(v); err == nil { // map keys come out sorted
			canon = b
		}
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(agent), []byte(name), canon, []byte(strconv.FormatInt(n, 10))} {
		h.Write(part)
		h.Write([]byte{0})
	}
	return "mcp_" + hex.EncodeToString(h.Sum(nil))[:24]
}

// realProviders are the providers that reach a model: the Claude Code CLI,
// cursor-agent and OpenAI-compatible APIs. They are configured from the
// environment (see each package).
func realProviders() []provider.Provider {
	return []provider.Provider{
		claude.New(claude.Options{}),
		cursor.New(cursor.Options{}),
		codex.New(codex.Options{}),
		gemini.New(gemini.Options{}),
		openai.New(openai.Options{Tools: agentTools}),
	}
}

// agentTools is the daemon's tool set in the form the openai adapter
// advertises.
func agentTools() []openai.Tool {
	var out []openai.Tool
	for _, s := range supervisor.Tools() {
		out = append(out, openai.Tool{Name: s.Name, Description: s.Description, Parameters: s.InputSchema})
	}
	return out
}
