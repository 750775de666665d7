// Package cursor is the provider that drives the cursor-agent CLI,
// registered as "cursor-agent".
//
// Each turn runs the CLI once in print mode:
//
//	cursor-agent --print --output-format stream-json --approve-mcps --trust
//	             [--force | --mode=plan] [--model <model>] [--resume <chat-id>] <prompt>
//
// in Config.WorkDir (the agent's working directory; /workspace in a
// sandbox), in its own process group (killed on timeout or cancel), with
// the daemon's environment (CURSOR_API_KEY) plus SUBSTRAT_AGENT_ID and a
// HOME of the agent's own, <home>/providers/cursor-agent/homes/<agent-id>,
// where the CLI keeps its chats: a login kept in the user's own HOME is
// not used, the key comes from the environment. A prompt that starts with
// "-" gets a leading newline so that it cannot be read as a flag.
//
// MCP is enabled through that HOME: before each session the provider
// writes $HOME/.cursor/mcp.json, whose "substrat" server is `substrat mcp
// --agent <id> --socket <tool socket>` (or --home <home>), and --approve-mcps
// approves it. Nothing is written into the working directory, which is
// the user's. The CLI has no system-prompt flag, so the instructions lead
// each prompt inside <instructions> tags.
//
// # Permissions
//
// Config.Permissions' mode maps onto the CLI's: bypassPermissions is
// --force (run every action without approval; the default in a sandbox),
// plan is --mode=plan, and the others run with the CLI's print-mode
// default (edits inside the working directory run, what needs approval is
// rejected). The CLI's own rule syntax differs from Claude's, so allowed
// and disallowed rules are not passed. (Read from Cursor's documentation:
// cursor-agent cannot be installed offline here; the tests drive a fake
// cursor-agent.)
//
// # Sandbox
//
// When Config.Sandbox is set the CLI runs inside the agent's bwrap sandbox,
// in the workspace, with its HOME read-write, its package directory and
// the substrat binary read-only, and the network (a workspace without it
// fails the turn); the MCP config points at Config.ToolSocket.
//
// # Sessions
//
// The CLI picks the chat id: the first turn runs without --resume, and the
// id of its system/init line is reported through Config.SessionID at once
// (before the turn returns) and kept in
// <home>/providers/cursor-agent/sessions/<agent-id>.json for Restore(nil).
// Later turns pass --resume <chat-id>. See provider/internal/cli.
//
// # Output
//
// The stream-json lines: system/init (the chat id), assistant (text,
// streamed), tool_call started/completed (streamed as tool_call and
// tool_result chunks), user (skipped) and result (the final text, and
// usage when the CLI reports it, in snake_case or camelCase). Other types
// are skipped; a line that is not a JSON object with a type is a
// provider.ErrProtocol. A failed result that reads like an overloaded or
// 429/5xx API is retried.
package cursor

import (
	"encoding/json"
	"path/filepath"
	"sort"
	"strings"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/internal/cli"
)

// Options configure the provider (see cli.Options); Name and Command
// default to "cursor-agent". The zero value suits the daemon.
type Options = cli.Options

// New returns the provider.
func New(opts Options) provider.Provider {
	return cli.Adapter{
		Name:    "cursor-agent",
		CLI:     "the cursor-agent CLI",
		Install: "see https://cursor.com/cli",
		HomeEnv: "HOME",
		Config:  config,
		Command: command,
		KeepEnv: []string{"CURSOR_"},
		Parse:   parse,
	}.New(opts)
}

// config is the MCP config in the user config of the CLI's private
// HOME ($HOME/.cursor/mcp.json): never in the agent's working
// directory, which is the user's.
func config(s cli.Setup) ([]cli.File, error) {
	return []cli.File{{Path: filepath.Join(".cursor", "mcp.json"), Data: s.MCP.JSON("")}}, nil
}

// command is a turn's command line, the prompt its last argument.
func command(t cli.Turn) (cli.Invocation, error) {
	cfg := t.Config
	// The CLI has no system-prompt flag: the instructions lead the prompt.
	prompt := cli.LeadWith(cfg.Instructions, t.Prompt)
	args := []string{"--print", "--output-format", "stream-json", "--approve-mcps", "--trust"}
	switch cfg.Permissions.Mode {
	case provider.ModeFull:
		args = append(args, "--force")
	case provider.ModePlan:
		args = append(args, "--mode=plan")
	}
	if cfg.Model != "" {
		args = append(args, "--model", cfg.Model)
	}
	if t.ID != "" {
		args = append(args, "--resume", t.ID)
	}
	args = append(args, t.ExtraArgs...)
	if strings.HasPrefix(prompt, "-") {
		prompt = "\n" + prompt
	}
	return cli.Invocation{Args: append(args, prompt)}, nil
}

type streamLine struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype"`
	SessionID string `json:"session_id"`
	Message   *struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"message"`
	ToolCall map[string]json.RawMessage `json:"tool_call"`
	Result   *string                    `json:"result"`
	IsError  bool                       `json:"is_error"`
	Usage    map[string]json.RawMessage `json:"usage"`
}

// parse reads one line. Only a line that is not JSON is an error: a line
// of a type this adapter does not know is skipped, and a field of an
// unexpected shape is left out (encoding/json fills the others).
func parse(b []byte) (cli.Line, error) {
	var l streamLine
	if err := cli.Unmarshal(b, &l); err != nil {
		return cli.Line{}, err
	}
	var out cli.Line
	switch l.Type {
	case "system":
		if l.Subtype == "init" {
			out.SessionID = l.SessionID
		}
	case "assistant":
		if l.Message != nil {
			for _, c := range l.Message.Content {
				if c.Type == "text" {
					out.Chunks = append(out.Chunks, provider.Chunk{Kind: provider.ChunkText, Text: c.Text})
				}
			}
		}
	case "tool_call":
		kind, text := toolCallText(l.ToolCall, l.Subtype == "completed")
		switch l.Subtype {
		case "started":
			out.Chunks = append(out.Chunks, provider.Chunk{Kind: provider.ChunkToolCall, Text: kind + " " + text})
		case "completed":
			out.Chunks = append(out.Chunks, provider.Chunk{Kind: provider.ChunkToolResult, Text: kind + " -> " + text})
		}
	case "result":
		out.SessionID = l.SessionID
		text := ""
		if l.Result != nil {
			text = *l.Result
		}
		if l.IsError || (l.Subtype != "" && l.Subtype != "success") {
			out.Final = &cli.Final{Err: cli.FailureText("cursor-agent reported "+l.Subtype, text)}
			return out, nil
		}
		out.Final = &cli.Final{Text: text, Usage: usageOf(l.Usage)}
	}
	return out, nil
}

// toolCallText renders a tool_call event's payload: {"<kind>ToolCall":
// {"args":…, "result":…}}. MCP calls name their tool in args.
func toolCallText(tc map[string]json.RawMessage, completed bool) (string, string) {
	keys := make([]string, 0, len(tc))
	for k := range tc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return "tool", "{}"
	}
	kind := keys[0]
	var body struct {
		Args   json.RawMessage `json:"args"`
		Result json.RawMessage `json:"result"`
	}
	json.Unmarshal(tc[kind], &body)
	name := strings.TrimSuffix(kind, "ToolCall")
	var mcp struct {
		ToolName string          `json:"toolName"`
		Name     string          `json:"name"`
		Args     json.RawMessage `json:"args"`
	}
	if json.Unmarshal(body.Args, &mcp) == nil && (mcp.ToolName != "" || mcp.Name != "") && name == "mcp" {
		name = mcp.ToolName
		if name == "" {
			name = mcp.Name
		}
		if len(mcp.Args) > 0 {
			body.Args = mcp.Args
		}
	}
	text := string(body.Args)
	if completed {
		text = string(body.Result)
	}
	if len(text) > 500 {
		text = text[:500] + "..."
	}
	return name, text
}

// usageOf reads usage in either case convention.
func usageOf(m map[string]json.RawMessage) provider.Usage {
	get := func(keys ...string) int64 {
		var n int64
		for _, k := range keys {
			var v int64
			if json.Unmarshal(m[k], &v) == nil && v > 0 {
				n += v
			}
		}
		return n
	}
	return provider.Usage{
		InputTokens: get("input_tokens", "inputTokens", "cache_read_input_tokens", "cacheReadTokens",
			"cache_creation_input_tokens", "cacheWriteTokens"),
		OutputTokens: get("output_tokens", "outputTokens"),
	}
}
