// Package gemini is the provider that drives Google's Gemini CLI,
// registered as "gemini".
//
// Each turn runs the CLI once, headless, with the prompt on stdin:
//
//	gemini -p "" --output-format stream-json --skip-trust --approval-mode <mode>
//	       [--model <model>] [--resume <session-id>]
//
// in Config.WorkDir (/workspace in a sandbox), in its own process group
// (killed on timeout or cancel), with a HOME of the agent's own,
// <home>/providers/gemini/homes/<agent-id>, where the CLI keeps its
// sessions and its settings.json: a login kept in the user's own HOME is
// not used; the key comes from GEMINI_API_KEY (and the endpoint from
// GOOGLE_GEMINI_BASE_URL when set). settings.json turns off update checks
// and usage statistics, and GEMINI_CLI_NO_RELAUNCH=true keeps the CLI to
// one process. The CLI has no system-prompt flag, so
// the instructions lead each prompt inside <instructions> tags.
//
// MCP is configured in settings.json: a "substrat" server, `substrat mcp
// --agent <id> --socket <the agent's tool socket>` (--home <home> without
// a daemon to give one), trusted (its tools run without confirmation: the
// agent tools are always allowed).
// The CLI names them mcp_substrat_<tool> to the model and sends no call
// id, so `substrat mcp` keys a call by a hash of the agent, the tool, the
// arguments and the call's position (see cmd/substrat/mcp.go).
//
// The CLI's own agent machinery is off. settings.json's tools.exclude
// leaves invoke_agent (its sub-agents), list_background_processes and
// read_background_output out of what the model sees, and
// experimental.enableAgents = false keeps its agent registry empty. A
// policy of the user tier, $HOME/.gemini/policies/substrat.toml, denies a
// shell command with is_background set, in every approval mode, yolo
// included: the pinned CLI (0.61.0) keeps that parameter in the shell
// tool's schema and has no setting that drops it, so the model sees it,
// and a call with it is refused. A command that backgrounds itself with
// the shell's own & is not caught by this.
//
// # Permissions
//
// Config.Permissions' mode maps onto --approval-mode: bypassPermissions
// (the default inside a bwrap sandbox) is yolo, acceptEdits is auto_edit,
// plan is plan, and default and dontAsk are default, in which headless
// mode refuses what would need a confirmation. The CLI's own sandbox (a
// container) is not used: inside bwrap, bwrap is the boundary.
//
// # Sessions
//
// The CLI picks the session id: the first turn runs without --resume, the
// id of its init line is reported through Config.SessionID at once and
// kept in <home>/providers/gemini/sessions/<agent-id>.json, and later
// turns pass --resume <session-id>. See provider/internal/cli.
//
// # Output
//
// The stream-json lines: init (the session id), message (assistant text,
// streamed; the user's echo is skipped), tool_use and tool_result
// (tool_call and tool_result chunks), result (status and token counts,
// the turn's own: checked with the pinned CLI, across --resume; the CLI
// reports no cost, so cost is unknown) and error. A result whose
// status is not success fails the turn (retried when it reads like an
// overloaded or 429/5xx API); a quota or rate limit ends the turn as a
// limit the daemon parks for (see ratelimit.go). A line that is not JSON
// fails the turn.
package gemini

import (
	"encoding/json"
	"path/filepath"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/internal/cli"
)

// Options configure the provider (see cli.Options); Name and Command
// default to "gemini". The zero value suits the daemon.
type Options = cli.Options

// New returns the provider.
func New(opts Options) provider.Provider {
	return cli.Adapter{
		Name:    "gemini",
		CLI:     "the Gemini CLI",
		Install: "install it with npm install -g @google/gemini-cli",
		HomeEnv: "HOME",
		Config:  config,
		Command: command,
		KeepEnv: []string{"GEMINI_", "GOOGLE_"},
		Parse:   parse,
		// agent shell: interactive.go
		Interactive: interactive,
	}.New(opts)
}

// config is $HOME/.gemini/settings.json (API-key auth, the substrat MCP
// server, trusted, and the CLI's own agent tools excluded) and the
// policy that refuses background shell commands.
func config(s cli.Setup) ([]cli.File, error) {
	settings := map[string]any{
		"security":   map[string]any{"auth": map[string]any{"selectedType": "gemini-api-key"}},
		"mcpServers": map[string]any{"substrat": map[string]any{"command": s.MCP.Command, "args": s.MCP.Args, "trust": true}},
		// Offline and quiet: no update checks, no usage statistics.
		// One attempt: the engine retries, and parks on a quota (ratelimit.go).
		"general":   map[string]any{"disableAutoUpdate": true, "disableUpdateNag": true, "maxAttempts": 1},
		"privacy":   map[string]any{"usageStatisticsEnabled": false},
		"telemetry": map[string]any{"enabled": false},
		"tools":     map[string]any{"exclude": ownAgentTools},
		// No sub-agents at all, invoke_agent excluded or not.
		"experimental": map[string]any{"enableAgents": false},
	}
	data, _ := json.MarshalIndent(settings, "", "  ")
	return []cli.File{
		{Path: filepath.Join(".gemini", "policies", "substrat.toml"), Data: []byte(policy)},
		{Path: filepath.Join(".gemini", "settings.json"), Data: append(data, '\n')},
	}, nil
}

// ownAgentTools are the CLI's own ways to start agents and background
// work, outside Substrat's tree, budgets and sandbox: left out of what the
// model sees (settings.json tools.exclude).
var ownAgentTools = []string{"invoke_agent", "list_background_processes", "read_background_output"}

// policy is the CLI's user-tier policy (~/.gemini/policies/substrat.toml):
// a shell command the model asks to run in the background is refused. The
// shell tool's schema keeps its is_background parameter (the pinned CLI
// has no setting that drops it), but no call with it set runs, in any
// approval mode.
const policy = `# Written by Substrat; rewritten at each session start.
[[rule]]
toolName = "run_shell_command"
argsPattern = '"is_background":true'
decision = "deny"
priority = 999
denyMessage = "Background commands are off under Substrat: run the command in the foreground, or spawn an agent with spawn_agent."
`

// command is a turn's command line and prompt.
func command(t cli.Turn) (cli.Invocation, error) {
	cfg := t.Config
	mode := "default"
	switch cfg.Permissions.Mode {
	case provider.ModeFull:
		mode = "yolo"
	case provider.ModeAcceptEdits:
		mode = "auto_edit"
	case provider.ModePlan:
		mode = "plan"
	}
	args := []string{"-p", "", "--output-format", "stream-json", "--skip-trust", "--approval-mode", mode}
	if cfg.Model != "" {
		args = append(args, "--model", cfg.Model)
	}
	if t.ID != "" && resumable(t.CLIHome, t.ID) { // else afresh: see resume.go
		args = append(args, "--resume", t.ID)
	}
	args = append(args, t.ExtraArgs...)
	// GEMINI_CLI_NO_RELAUNCH: one process, not a relaunched child (which
	// outlived a cancelled turn's kill for seconds).
	return cli.Invocation{Args: args, Stdin: cli.LeadWith(cfg.Instructions, t.Prompt),
		Env: map[string]string{"GEMINI_CLI_NO_RELAUNCH": "true"}}, nil
}

// line is one stream-json line.
type line struct {
	Type      string          `json:"type"`
	SessionID string          `json:"session_id"`
	Role      string          `json:"role"`
	Content   string          `json:"content"`
	ToolName  string          `json:"tool_name"`
	ToolID    string          `json:"tool_id"`
	Params    json.RawMessage `json:"parameters"`
	Status    string          `json:"status"`
	Output    string          `json:"output"`
	Error     json.RawMessage `json:"error"`
	Message   string          `json:"message"`
	Stats     *struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	} `json:"stats"`
}

// parse reads one stream-json line. Only a line that is not JSON fails it.
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
	case "init":
		out.SessionID = l.SessionID
	case "message":
		if l.Role == "assistant" && l.Content != "" {
			out.Chunks = append(out.Chunks, provider.Chunk{Kind: provider.ChunkText, Text: l.Content})
		}
	case "tool_use":
		out.Chunks = append(out.Chunks, provider.Chunk{Kind: provider.ChunkToolCall, Text: l.ToolName + " " + string(l.Params)})
	case "tool_result":
		text := l.Output
		if l.Status != "success" {
			text = "error: " + l.Status + " " + text + " " + string(l.Error)
		}
		out.Chunks = append(out.Chunks, provider.Chunk{Kind: provider.ChunkToolResult, Text: l.ToolID + " -> " + text})
	case "error":
		msg := l.Message
		if msg == "" {
			msg = string(b)
		}
		out.Chunks = append(out.Chunks, provider.Chunk{Kind: provider.ChunkToolResult, Text: "gemini -> " + msg})
	case "result":
		if l.Status != "success" {
			msg := string(l.Error)
			if msg == "" || msg == "null" {
				msg = string(b)
			}
			out.Final = &cli.Final{Err: cli.FailureText("gemini reported "+l.Status, msg)}
			return out, nil
		}
		u := provider.Usage{CostUnknown: true, TokensUnknown: l.Stats == nil}
		if l.Stats != nil {
			u.InputTokens, u.OutputTokens = l.Stats.InputTokens, l.Stats.OutputTokens
		}
		out.Final = &cli.Final{Usage: u}
	}
	return out, nil
}
