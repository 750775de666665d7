// Package codex is the provider that drives OpenAI's Codex CLI, registered
// as "codex".
//
// Each turn runs the CLI once, non-interactively, with the prompt on stdin:
//
//	codex exec --json --skip-git-repo-check [--model <model>] <permissions> -c … -
//	codex exec resume <thread-id> --json --skip-git-repo-check … -
//
// in Config.WorkDir (/workspace in a sandbox), in its own process group
// (killed on timeout or cancel), with CODEX_HOME set to a directory of the
// agent's own, <home>/providers/codex/homes/<agent-id>, where the CLI keeps
// its threads and its config.toml. A login kept in the user's ~/.codex is
// not used: the key comes from OPENAI_API_KEY. When OPENAI_BASE_URL is set
// in the daemon's environment, the CLI is pointed at it as a provider of
// its own (the CLI itself ignores that variable), speaking the Responses
// API (wire_api "responses", the only one the pinned CLI accepts).
//
// MCP is configured in that config.toml: a "substrat" server, `substrat
// mcp --agent <id> --socket <the agent's tool socket>` (--home <home>
// without a daemon to give one), whose tools are approved
// (default_tools_approval_mode = "approve"): exec mode cannot ask, and the
// agent tools are always allowed. The CLI sends the model's
// call id as _meta.callId, which `substrat mcp` uses as the idempotency
// key. The CLI has no system-prompt flag for exec, so the instructions
// lead each prompt inside <instructions> tags.
//
// The CLI's own agent machinery is off in that config.toml: its
// sub-agents (spawn_agent, send_input, wait_agent, resume_agent,
// close_agent: features multi_agent and multi_agent_v2),
// request_user_input (tools.experimental_request_user_input) and thread
// goals (feature goals: the CLI pursues a goal with turns of its own), so
// that every agent is in Substrat's tree, under its budgets and sandbox.
//
// # Permissions
//
// The CLI has a sandbox of its own (Landlock and seccomp) and approval
// policies. exec mode runs with approval_policy "never" (nobody is there
// to ask), and the mode maps onto its sandbox: bypassPermissions (the
// default inside a bwrap sandbox) is --dangerously-bypass-approvals-and-
// sandbox, since bwrap is the boundary there and the CLI's own sandbox
// cannot nest inside it; acceptEdits is sandbox_mode "workspace-write"
// (writes in the working directory, no network); default, plan and
// dontAsk are "read-only". Claude-style tool rules are not passed: the
// CLI has none of that syntax.
//
// # Sessions
//
// The CLI picks the thread id: the first turn runs `codex exec`, the id of
// its thread.started line is reported through Config.SessionID at once and
// kept in <home>/providers/codex/sessions/<agent-id>.json, and later turns
// run `codex exec resume <thread-id>`. See provider/internal/cli.
//
// # Output
//
// The --json lines: thread.started (the thread id), item.started and
// item.completed of agent_message (text), command_execution, file_change
// and mcp_tool_call (tool_call and tool_result chunks), turn.completed
// (usage: input and output tokens, the thread's running totals across
// exec resume, which the engine turns into the turn's own, see package
// provider/internal/cli; the CLI reports no cost, so cost is unknown) and
// turn.failed (the turn fails; retried when it reads like an
// overloaded or 429/5xx API). A top-level error line (the CLI's reconnect
// notices) is shown as text. A line that is not JSON fails the turn.
package codex

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/internal/cli"
)

// Options configure the provider (see cli.Options; Name and Command
// default to "codex"). The zero value suits the daemon.
type Options struct {
	cli.Options
	// BaseURL, if set, is the Responses API the CLI talks to; default
	// OPENAI_BASE_URL of the environment, else the CLI's own default.
	BaseURL string
}

// New returns the provider.
func New(opts Options) provider.Provider {
	a := &adapter{opts: opts}
	return cli.Adapter{
		Name:        "codex",
		CLI:         "the Codex CLI",
		Install:     "install it with npm install -g @openai/codex",
		HomeEnv:     "CODEX_HOME",
		Config:      config,
		Command:     a.command,
		SandboxPath: nativeBinary,
		KeepEnv:     []string{"OPENAI_", "CODEX_"},
		Parse:       parse,
		// Each agent_message is a whole message.
		TextSeparator: "\n\n",
		Interactive:   interactive, // agent shell: interactive.go
	}.New(opts.Options)
}

type adapter struct {
	opts Options
}

// ownAgentToolsOff is the part of config.toml that turns off the CLI's own
// agent machinery: sub-agents (spawn_agent, send_input, wait_agent,
// resume_agent, close_agent: the multi_agent features, v1 and v2),
// request_user_input, and thread goals (create_goal, get_goal,
// update_goal: a goal makes the CLI start turns of its own, "goal
// continuation", when the thread is idle). Checked with the pinned CLI (0.169.0): the model's
// tools list then carries none of them, in every sandbox mode.
const ownAgentToolsOff = `
# The CLI's own agents and automatic work are off: Substrat's spawn_agent
# and its turns do those jobs.
[features]
multi_agent = false
multi_agent_v2 = false
goals = false

[tools.experimental_request_user_input]
enabled = false
`

// config is the agent's config.toml, in its CODEX_HOME: the substrat
// MCP server, its tools approved, and the CLI's own agent tools off.
func config(s cli.Setup) ([]cli.File, error) {
	var b strings.Builder
	b.WriteString("# Written by Substrat for agent " + s.Config.AgentID + "; rewritten at each session start.\n")
	fmt.Fprintf(&b, "[mcp_servers.substrat]\ncommand = %s\nargs = [", toml(s.MCP.Command))
	for i, arg := range s.MCP.Args {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(toml(arg))
	}
	b.WriteString("]\ndefault_tools_approval_mode = \"approve\"\n")
	b.WriteString(ownAgentToolsOff)
	return []cli.File{{Path: "config.toml", Data: []byte(b.String())}}, nil
}

// toml quotes s as a TOML basic string (JSON's escapes are TOML's).
func toml(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// command is a turn's command line and prompt: `codex exec`, or `codex
// exec resume <thread-id>` once the CLI told the thread's id.
func (a *adapter) command(t cli.Turn) (cli.Invocation, error) {
	cfg, id := t.Config, t.ID
	args := []string{"exec"}
	if id != "" {
		args = append(args, "resume", id)
	}
	args = append(args, "--json", "--skip-git-repo-check", "-c", `approval_policy="never"`)
	switch cfg.Permissions.Mode {
	case provider.ModeFull:
		args = append(args, "--dangerously-bypass-approvals-and-sandbox")
	case provider.ModeAcceptEdits:
		args = append(args, "-c", `sandbox_mode="workspace-write"`)
	default:
		args = append(args, "-c", `sandbox_mode="read-only"`)
	}
	if base := a.baseURL(); base != "" {
		args = append(args, "-c", `model_provider="substrat"`,
			"-c", "model_providers.substrat.name=\"substrat\"",
			"-c", "model_providers.substrat.base_url="+toml(base),
			"-c", `model_providers.substrat.wire_api="responses"`,
			"-c", `model_providers.substrat.env_key="OPENAI_API_KEY"`)
	}
	if cfg.Model != "" {
		args = append(args, "--model", cfg.Model)
	}
	args = append(args, t.ExtraArgs...)
	args = append(args, "-")
	return cli.Invocation{Args: args, Stdin: cli.LeadWith(cfg.Instructions, t.Prompt), Fresh: id == ""}, nil
}

// nativeBinary returns the native codex binary of an npm install whose
// launcher is path, or path itself. npm's codex is a Node script that
// starts the native binary of a sibling package: in a sandbox, that
// binary runs itself.
func nativeBinary(path string) string {
	real, err := filepath.EvalSymlinks(path)
	if err != nil || filepath.Ext(real) != ".js" {
		return path
	}
	// .../node_modules/@openai/codex/bin/codex.js
	pkgs := filepath.Dir(filepath.Dir(filepath.Dir(real)))
	matches, _ := filepath.Glob(filepath.Join(pkgs, "codex-linux-*", "vendor", "*", "bin", "codex"))
	if len(matches) == 0 {
		return path
	}
	return matches[0]
}

func (a *adapter) baseURL() string {
	if a.opts.BaseURL != "" {
		return a.opts.BaseURL
	}
	return os.Getenv("OPENAI_BASE_URL")
}

// line is one --json line.
type line struct {
	Type     string                    `json:"type"`
	ThreadID string                    `json:"thread_id"`
	Item     *item                     `json:"item"`
	Usage    *usage                    `json:"usage"`
	Error    *struct{ Message string } `json:"error"`
	Message  string                    `json:"message"`
}

type item struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Command   string          `json:"command"`
	Output    string          `json:"aggregated_output"`
	ExitCode  *int            `json:"exit_code"`
	Server    string          `json:"server"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Result    json.RawMessage `json:"result"`
	Error     json.RawMessage `json:"error"`
	Changes   json.RawMessage `json:"changes"`
	Message   string          `json:"message"`
	Status    string          `json:"status"`
}

type usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// parse reads one --json line. Only a line that is not JSON fails it.
func parse(b []byte) (cli.Line, error) {
	if f := rateLimit(b, time.Now()); f != nil { // see ratelimit.go
		return cli.Line{Final: f}, nil
	}
	var l line
	if err := cli.Unmarshal(b, &l); err != nil {
		return cli.Line{}, err
	}
	var out cli.Line
	switch l.Type {
	case "thread.started":
		out.SessionID = l.ThreadID
	case "item.started":
		if c, ok := toolCall(l.Item); ok {
			out.Chunks = append(out.Chunks, c)
		}
	case "item.completed":
		if l.Item != nil {
			out.Chunks = append(out.Chunks, itemChunks(l.Item)...)
		}
	case "turn.completed":
		// The usage is the thread's running total (checked with the
		// pinned CLI: it keeps counting across exec resume and a kill
		// -9), which the engine turns into the turn's own.
		u := provider.Usage{CostUnknown: true}
		if l.Usage != nil {
			u.InputTokens, u.OutputTokens = l.Usage.InputTokens, l.Usage.OutputTokens
		} else {
			u.TokensUnknown = true
		}
		out.Final = &cli.Final{Usage: u, CumulativeTokens: true}
	case "turn.failed":
		msg := "the turn failed"
		if l.Error != nil && l.Error.Message != "" {
			msg = l.Error.Message
		}
		out.Final = &cli.Final{Err: cli.FailureText("codex reported turn.failed", msg)}
	case "error":
		if l.Message != "" { // reconnect notices: shown, not the turn's text
			out.Chunks = append(out.Chunks, provider.Chunk{Kind: provider.ChunkToolResult, Text: "codex -> " + l.Message})
		}
	}
	return out, nil
}

// toolCall is the chunk of an item that starts a tool's work.
func toolCall(it *item) (provider.Chunk, bool) {
	if it == nil {
		return provider.Chunk{}, false
	}
	switch it.Type {
	case "command_execution":
		return provider.Chunk{Kind: provider.ChunkToolCall, Text: "shell " + it.Command}, true
	case "mcp_tool_call":
		return provider.Chunk{Kind: provider.ChunkToolCall, Text: it.Server + "." + it.Tool + " " + string(it.Arguments)}, true
	}
	return provider.Chunk{}, false
}

// itemChunks are the chunks of a completed item: an agent message is
// text; a tool's work, its result.
func itemChunks(it *item) []provider.Chunk {
	switch it.Type {
	case "agent_message":
		return []provider.Chunk{{Kind: provider.ChunkText, Text: it.Text}}
	case "command_execution":
		text := it.Output
		if it.ExitCode != nil && *it.ExitCode != 0 {
			text = fmt.Sprintf("error: exit %d: %s", *it.ExitCode, text)
		}
		return []provider.Chunk{{Kind: provider.ChunkToolResult, Text: "shell -> " + text}}
	case "mcp_tool_call":
		if len(it.Error) > 0 && string(it.Error) != "null" {
			return []provider.Chunk{{Kind: provider.ChunkToolResult, Text: it.Server + "." + it.Tool + " -> error: " + string(it.Error)}}
		}
		return []provider.Chunk{{Kind: provider.ChunkToolResult, Text: it.Server + "." + it.Tool + " -> " + string(it.Result)}}
	case "file_change":
		return []provider.Chunk{{Kind: provider.ChunkToolResult, Text: "file_change -> " + string(it.Changes)}}
	case "error":
		// A notice of the CLI's own (a model it has no metadata for):
		// shown, and kept out of the turn's text.
		return []provider.Chunk{{Kind: provider.ChunkToolResult, Text: "codex -> " + it.Message}}
	}
	return nil
}
