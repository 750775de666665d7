// Package claude is the provider that drives the Claude Code CLI,
// registered as "claude".
//
// Each turn runs the CLI once in print mode, with the prompt on stdin:
//
//	claude -p --output-format stream-json --verbose
//	       --mcp-config <home>/agents/<id>/mcp.json --strict-mcp-config
//	       --permission-mode <mode> --allowedTools mcp__substrat__*[,<rules>]
//	       --disallowedTools Agent,Task,…[,<rules>] [--append-system-prompt <instructions>]
//	       [--permission-prompt-tool mcp__substrat__request_approval]
//	       [--model <model>] (--session-id <uuid> | --resume <uuid>)
//
// in Config.WorkDir (the agent's working directory; /workspace in a
// sandbox), in its own process group (killed on timeout or
// cancel), with the daemon's environment plus HOME set to a private
// directory (the CLI keeps its sessions under $HOME/.claude, per working
// directory, so resume needs the same HOME and directory every time),
// ENABLE_TOOL_SEARCH=false (otherwise MCP tools hide behind a ToolSearch
// tool), CLAUDE_CODE_DISABLE_BACKGROUND_TASKS=1, CLAUDE_CODE_DISABLE_CRON=1
// and CLAUDE_CODE_DISABLE_WORKFLOWS=1 (see below), and unless set CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1,
// DISABLE_AUTOUPDATER=1 and CLAUDE_CODE_MAX_RETRIES=2 (the CLI retries API
// requests itself; more than a few retries would outlast the turn, which
// this provider retries as a whole too). The API key (ANTHROPIC_API_KEY) and
// ANTHROPIC_BASE_URL come from the daemon's environment.
//
// The agent tools reach the model over MCP: mcp.json starts
// `substrat mcp --agent <id> --socket <tool socket>` (the running substrat
// binary), which forwards each call to the daemon over the agent's own
// socket, Config.ToolSocket (without one, `--home <home>`, the daemon's
// socket); the CLI passes its tool-use id,
// which becomes the idempotency key. Only the substrat tools are allowed
// (the rules of Config.Permissions add others: see Permissions).
//
// The CLI's own agent machinery is off: --disallowedTools takes its
// sub-agents, their messages, background tasks, cron, wake-ups,
// workflows and skills (which can fork sub-agents) out of the model's
// tools list (see ownAgentTools), and
// CLAUDE_CODE_DISABLE_BACKGROUND_TASKS=1 the Bash tool's
// run_in_background. Those jobs are Substrat's: spawn_agent and the rest,
// inside the tree, its budgets and its sandbox.
//
// # Permissions
//
// Config.Permissions maps onto the CLI's own flags: the mode as
// --permission-mode (default, acceptEdits, plan, dontAsk,
// bypassPermissions), and the rules as --allowedTools (after the substrat
// tools, which are always allowed) and --disallowedTools (after the CLI's
// own agent tools, which are always disallowed). The daemon gives
// an agent in a sandbox bypassPermissions unless told otherwise: the CLI
// then does real work (Write, Edit, Bash) with nothing but bwrap around
// it, and since the CLI refuses that mode to root unless IS_SANDBOX=1, the
// adapter sets IS_SANDBOX=1 there, and only there. Outside a sandbox the
// default is the CLI's safe mode, in which print mode refuses what would
// need a prompt: the CLI prints a system/permission_denied line and the
// turn goes on; unless the agent has an approver (its parent, or USER for
// a root: the default), in which case --permission-prompt-tool makes the
// CLI call the request_approval tool instead, which waits for the
// approver's answer (checked with the pinned CLI: it calls the tool with
// {"tool_name","input","tool_use_id"} and reads back
// {"behavior":"allow","updatedInput":…} or {"behavior":"deny","message":…};
// a denial becomes the tool's error result and the turn goes on).
//
// # Sessions
//
// Substrat picks the session id (a random UUID) when the session is
// created and reports it through Config.SessionID before any turn; the
// first turn passes it with --session-id and the later ones with --resume
// (whichever the CLI's transcript file says is right). The id is also kept
// in <home>/providers/claude/sessions/<agent-id>.json so that Restore(nil)
// (after a crash) resumes the same conversation. See package
// provider/internal/cli for the blob.
//
// # Sandbox
//
// When Config.Sandbox is set (the agent has a workspace) the CLI runs
// inside the agent's bwrap sandbox, with the workspace as its working
// directory (/workspace). The sandbox shows it, besides the workspace: the
// CLI's package directory (the CLI is run by its real path, symlinks
// resolved), the substrat binary and mcp.json read-only, and a HOME of the
// agent's own, <home>/providers/claude/homes/<agent-id>, read-write, and
// the tool socket, which serves this agent's tools and nothing else. The CLI
// must reach its API, so a workspace without network access fails the
// turn rather than run it outside the sandbox. Only the variables the CLI
// needs get in (see cli.Minimal).
//
// # Output
//
// The stream-json lines are read as: system/init (the session id, and the
// MCP servers: a substrat server that failed fails the turn), assistant
// (text and tool_use blocks, streamed as chunks), user (tool results) and
// result (the final text; the tokens of modelUsage, cache tokens counted
// as input, and total_cost_usd, both the session's running totals, which
// the engine turns into the turn's own: see package provider/internal/cli),
// and system/permission_denied (a tool the CLI refused,
// streamed as a provider.ChunkDenied; the turn goes on). Other types and
// subtypes are skipped, and a field of a shape this adapter does not
// expect is left out: only a line that is not JSON at all is a
// provider.ErrProtocol. A failed result whose text reads like an
// overloaded or 429/5xx API is retried with --resume.
package claude

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/internal/cli"
)

// Options configure the provider (see cli.Options); Name and Command
// default to "claude". The zero value suits the daemon.
type Options = cli.Options

// New returns the provider.
func New(opts Options) provider.Provider {
	return cli.Adapter{
		Name:    "claude",
		CLI:     "the Claude Code CLI",
		Install: "install it with npm install -g @anthropic-ai/claude-code",
		HomeEnv: "HOME",
		Home:    claudeHome,
		NewID:   uuid.NewString,
		Config:  config,
		Command: command,
		KeepEnv: sandboxEnv,
		Parse:   parse,
		// agent shell: interactive.go
		Interactive: interactive,
	}.New(opts)
}

// claudeHome is the CLI's HOME: in a sandbox the agent's own, else one
// that the provider's unsandboxed sessions share, <StateDir>/home.
func claudeHome(stateDir string, cfg provider.Config) string {
	if cfg.Sandbox != nil {
		return cli.AgentHome(stateDir, cfg.AgentID)
	}
	return filepath.Join(stateDir, "home")
}

// mcpConfigPath is the agent's mcp.json, in its directory.
func mcpConfigPath(p cli.Paths, cfg provider.Config) string {
	return fsstore.Layout{Home: p.Home}.Agent(cfg.AgentID).MCPConfig()
}

// config is the agent's mcp.json (written atomically, and only if it
// changed). The agent directory must exist: it is the daemon's.
func config(s cli.Setup) ([]cli.File, error) {
	return []cli.File{{Path: mcpConfigPath(s.Paths, s.Config), Data: s.MCP.JSON("stdio")}}, nil
}

// instructionsNote is the record, kept in the adapter's state directory
// (outside the sandbox), of the instructions a CLI session was last
// given.
type instructionsNote struct {
	Session string `json:"session"`
	SHA256  string `json:"sha256"`
}

func notePath(stateDir string, cfg provider.Config) string {
	return filepath.Join(stateDir, "instructions", cfg.AgentID+".json")
}

// noteInstructions records that session id now has cfg's instructions.
func noteInstructions(stateDir string, cfg provider.Config, id string) error {
	p := notePath(stateDir, cfg)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(cfg.Instructions))
	data, _ := json.Marshal(instructionsNote{Session: id, SHA256: hex.EncodeToString(sum[:])})
	return cli.WriteFile(p, data)
}

// instructionsChanged reports whether cfg's instructions differ from
// those session id was last given, and records them as given. A session
// with no record (made before this record existed) is taken as current.
func instructionsChanged(stateDir string, cfg provider.Config, id string) (bool, error) {
	p := notePath(stateDir, cfg)
	var note instructionsNote
	data, err := os.ReadFile(p)
	if err != nil || json.Unmarshal(data, &note) != nil || note.Session != id {
		return false, noteInstructions(stateDir, cfg, id)
	}
	sum := sha256.Sum256([]byte(cfg.Instructions))
	if note.SHA256 == hex.EncodeToString(sum[:]) {
		return false, nil
	}
	return true, noteInstructions(stateDir, cfg, id)
}

// transcriptExists reports whether the CLI has a conversation of session
// id under its HOME, to --resume. A transcript that holds no message is a
// stub, which it removes: the CLI writes its queue operations first and
// the user's message a moment later, and one killed in between (a turn
// cancelled, a daemon killed) leaves a file that makes both --resume ("No
// conversation found") and --session-id ("already in use") fail (checked
// with 2.1.328).
func transcriptExists(claudeHome, id string) bool {
	matches, _ := filepath.Glob(filepath.Join(claudeHome, ".claude", "projects", "*", id+".jsonl"))
	found := false
	for _, m := range matches {
		if holdsConversation(m) {
			found = true
		} else {
			os.Remove(m) // a link is removed, not what it names
		}
	}
	return found
}

// holdsConversation reports whether the transcript at path has a user or
// assistant message among its first lines. The file is in a HOME the
// sandboxed CLI writes: it is read only if it is a regular file (never a
// FIFO, which would block), and only so far.
func holdsConversation(path string) bool {
	f, err := fsstore.OpenRegular(path)
	if err != nil {
		return false
	}
	defer f.Close()
	r := bufio.NewReader(io.LimitReader(f, 16<<20))
	for {
		line, err := r.ReadBytes('\n')
		var l struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(line, &l) == nil && (l.Type == "user" || l.Type == "assistant") {
			return true
		}
		if err != nil {
			return false
		}
	}
}

// command is a turn's command line, environment and prompt.
func command(t cli.Turn) (cli.Invocation, error) {
	cfg, id, prompt := t.Config, t.ID, t.Prompt
	if _, err := uuid.Parse(id); err != nil {
		return cli.Invocation{}, fmt.Errorf("session id %q is not a UUID (%v)", id, err)
	}
	mcp := mcpConfigPath(t.Paths, cfg)
	perm := cfg.Permissions
	mode := perm.Mode
	if mode == "" {
		mode = provider.ModeDefault
	}
	allowed := slices.Concat([]string{"mcp__substrat__*"}, perm.AllowedTools)
	args := []string{"-p", "--output-format", "stream-json", "--verbose",
		"--mcp-config", mcp, "--strict-mcp-config",
		"--permission-mode", mode,
		"--allowedTools", strings.Join(allowed, ",")}
	args = append(args, "--disallowedTools", strings.Join(slices.Concat(ownAgentTools, perm.DisallowedTools), ","))
	if provider.AsksApproval(perm) {
		// What the mode would prompt for goes to the agent's approver;
		// the tool call waits for the answer (the CLI's MCP tool timeout
		// is about 28 hours; the turn's own timeout comes first).
		args = append(args, "--permission-prompt-tool", "mcp__substrat__"+provider.ApprovalTool)
	}
	if cfg.Instructions != "" {
		args = append(args, "--append-system-prompt", cfg.Instructions)
	}
	if cfg.Model != "" {
		args = append(args, "--model", cfg.Model)
	}
	fresh := !transcriptExists(t.CLIHome, id)
	if fresh {
		args = append(args, "--session-id", id)
		if err := noteInstructions(t.StateDir, cfg, id); err != nil {
			return cli.Invocation{}, err
		}
	} else {
		args = append(args, "--resume", id)
		// A resumed session keeps the system prompt it started with and
		// ignores --append-system-prompt (checked with 2.1.328): new
		// instructions go in the prompt, once.
		if changed, err := instructionsChanged(t.StateDir, cfg, id); err != nil {
			return cli.Invocation{}, err
		} else if changed {
			prompt = "<instructions>\nYour instructions have changed. From now on they are:\n" +
				strings.TrimRight(cfg.Instructions, "\n") + "\n</instructions>\n\n" + prompt
		}
	}
	args = append(args, t.ExtraArgs...)
	set := map[string]string{
		"ENABLE_TOOL_SEARCH": "false",
		// No run_in_background on Bash, no cron, no workflows: see
		// ownAgentTools.
		"CLAUDE_CODE_DISABLE_BACKGROUND_TASKS": "1",
		"CLAUDE_CODE_DISABLE_CRON":             "1",
		"CLAUDE_CODE_DISABLE_WORKFLOWS":        "1",
	}
	if cfg.Sandbox != nil && mode == provider.ModeFull {
		// The CLI refuses bypassPermissions to root unless told it runs
		// in a sandbox, which it does: bwrap is the boundary.
		set["IS_SANDBOX"] = "1"
	}
	return cli.Invocation{Args: args, Stdin: prompt, Env: set,
		Defaults: map[string]string{
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
			"DISABLE_AUTOUPDATER":                      "1",
			"CLAUDE_CODE_MAX_RETRIES":                  "2",
		},
		Drop: []string{"CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT"},
		// mcp.json is read inside the sandbox too.
		ReadOnly: []string{mcp},
		Fresh:    fresh}, nil
}

// ownAgentTools are the CLI's own ways to start agents and background
// work, outside Substrat's tree, budgets and sandbox: sub-agents (Agent,
// formerly Task), messages between them (SendMessage, ListAgents),
// background tasks (TaskStop, Monitor), scheduled and recurring work
// (CronCreate, CronDelete, CronList, ScheduleWakeup), workflows
// (Workflow) and skills (Skill: a skill whose SKILL.md says context: fork,
// which an agent can write into its working directory's .claude/skills,
// runs as a sub-agent of the CLI's, Agent disallowed or not; the bundled
// batch and loop skills are agent and recurring machinery themselves).
// --disallowedTools takes them out of the model's tools list
// in every permission mode, bypassPermissions included (checked with the
// pinned CLI, 2.1.328); the Bash tool's run_in_background parameter goes
// with CLAUDE_CODE_DISABLE_BACKGROUND_TASKS=1. Substrat's own tools
// (spawn_agent, send_message...) do these jobs, inside the tree.
var ownAgentTools = []string{"Agent", "Task", "SendMessage", "ListAgents", "TaskStop", "Monitor",
	"CronCreate", "CronDelete", "CronList", "ScheduleWakeup", "Workflow", "Skill"}

// sandboxEnv is what of the daemon's environment the CLI keeps in a
// sandbox: its own settings, and the credentials of the Anthropic API,
// Bedrock or Vertex.
var sandboxEnv = []string{"ANTHROPIC_", "CLAUDE_", "DISABLE_", "ENABLE_TOOL_SEARCH=", "MAX_THINKING_TOKENS=", "IS_SANDBOX=",
	"AWS_", "CLOUD_ML_REGION=", "GOOGLE_APPLICATION_CREDENTIALS=", "VERTEX_REGION_"}

// streamLine is one stream-json line. Fields whose shape differs between
// line types (message is an object in assistant and user lines and a
// string in system/permission_denied) are kept raw and read per type.
type streamLine struct {
	Type       string `json:"type"`
	Subtype    string `json:"subtype"`
	SessionID  string `json:"session_id"`
	MCPServers []struct {
		Name   string `json:"name"`
		Status string `json:"status"`
	} `json:"mcp_servers"`
	Message      json.RawMessage       `json:"message"`
	Result       *string               `json:"result"`
	IsError      bool                  `json:"is_error"`
	Errors       []string              `json:"errors"`
	Usage        *usage                `json:"usage"`
	TotalCostUSD *float64              `json:"total_cost_usd"`
	ModelUsage   map[string]modelUsage `json:"modelUsage"`
	// system/permission_denied
	ToolName       string `json:"tool_name"`
	DecisionReason string `json:"decision_reason"`
	// system/compact_boundary: {"trigger":"auto"|"manual","pre_tokens":N}
	CompactMetadata json.RawMessage `json:"compact_metadata"`
}

type message struct {
	Content []contentBlock `json:"content"`
}

type contentBlock struct {
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	Name    string          `json:"name"`
	Input   json.RawMessage `json:"input"`
	Content json.RawMessage `json:"content"`
	IsError bool            `json:"is_error"`
}

// modelUsage is one model's part of a result's modelUsage: the session's
// running totals.
type modelUsage struct {
	InputTokens              int64 `json:"inputTokens"`
	OutputTokens             int64 `json:"outputTokens"`
	CacheReadInputTokens     int64 `json:"cacheReadInputTokens"`
	CacheCreationInputTokens int64 `json:"cacheCreationInputTokens"`
}

type usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

const toolPrefix = "mcp__substrat__"

// parse reads one line. Only a line that is not JSON is an error: the CLI
// adds line types and fields from one version to the next, so a line of a
// type this adapter does not know is skipped, and a field of an
// unexpected shape is left out (encoding/json fills the others and says
// which one it could not read).
func parse(b []byte) (cli.Line, error) {
	if f := rateLimit(b, time.Now()); f != nil { // see ratelimit.go
		return cli.Line{Final: f}, nil
	}
	var l streamLine
	if err := cli.Unmarshal(b, &l); err != nil {
		return cli.Line{}, err
	}
	var out cli.Line
	switch l.Type {
	case "system":
		return parseSystem(l), nil
	case "assistant", "user":
		var m message
		if json.Unmarshal(l.Message, &m) != nil {
			return out, nil
		}
		for _, c := range m.Content {
			switch c.Type {
			case "text":
				if l.Type == "assistant" {
					out.Chunks = append(out.Chunks, provider.Chunk{Kind: provider.ChunkText, Text: c.Text})
				}
			case "tool_use":
				out.Chunks = append(out.Chunks, provider.Chunk{Kind: provider.ChunkToolCall, Text: strings.TrimPrefix(c.Name, toolPrefix) + " " + string(c.Input)})
			case "tool_result":
				text := resultText(c.Content)
				if c.IsError {
					text = "error: " + text
				}
				out.Chunks = append(out.Chunks, provider.Chunk{Kind: provider.ChunkToolResult, Text: text})
			}
		}
	case "result":
		out.SessionID = l.SessionID
		text := ""
		if l.Result != nil {
			text = *l.Result
		}
		if l.IsError || (l.Subtype != "" && l.Subtype != "success") {
			if text == "" {
				text = strings.Join(l.Errors, "; ")
			}
			out.Final = &cli.Final{Err: cli.FailureText("claude reported "+l.Subtype, text)}
			return out, nil
		}
		out.Final = resultUsage(l, text)
	}
	return out, nil
}

// resultUsage is the final of a successful result line. The pinned CLI
// (2.1.328, checked against a fake API) reports total_cost_usd and
// modelUsage as the session's running totals, kept across --resume (in the
// transcript), and usage as this run's own tokens. The engine turns the
// running totals into the turn's (see package cli). Cache tokens count as
// input.
func resultUsage(l streamLine, text string) *cli.Final {
	f := &cli.Final{Text: text}
	if l.TotalCostUSD != nil {
		f.Usage.CostUSD, f.CumulativeCost = max(*l.TotalCostUSD, 0), true
	} else {
		f.Usage.CostUnknown = true
	}
	switch {
	case len(l.ModelUsage) > 0:
		// Every model's tokens (the CLI may call a small model besides
		// the main one), as running totals.
		for _, m := range l.ModelUsage {
			f.Usage.InputTokens += max(m.InputTokens+m.CacheCreationInputTokens+m.CacheReadInputTokens, 0)
			f.Usage.OutputTokens += max(m.OutputTokens, 0)
		}
		f.CumulativeTokens = true
	case l.Usage != nil:
		u := l.Usage
		f.Usage.InputTokens = max(u.InputTokens+u.CacheCreationInputTokens+u.CacheReadInputTokens, 0)
		f.Usage.OutputTokens = max(u.OutputTokens, 0)
	default:
		f.Usage.TokensUnknown = true
	}
	return f
}

// parseSystem reads a system line: init (the session id; a substrat MCP
// server that failed fails the turn), permission_denied (a tool the CLI
// refused: the turn goes on, the denial is reported) and
// compact_boundary (the CLI compacted its context: reported in the turn's
// result). Other subtypes are skipped.
func parseSystem(l streamLine) cli.Line {
	var out cli.Line
	switch l.Subtype {
	case "init":
		out.SessionID = l.SessionID
		for _, s := range l.MCPServers {
			if s.Name == "substrat" && (s.Status == "failed" || s.Status == "needs-auth") {
				out.Final = &cli.Final{Err: fmt.Errorf("the substrat MCP server did not start (status %q): the agent tools are unreachable; see the CLI's MCP log under its HOME", s.Status)}
			}
		}
	case "compact_boundary":
		// Claude Code compacted its conversation itself.
		var m struct {
			Trigger   string `json:"trigger"`
			PreTokens int    `json:"pre_tokens"`
		}
		json.Unmarshal(l.CompactMetadata, &m)
		reason := provider.CompactThreshold
		if m.Trigger != "" && m.Trigger != "auto" {
			reason = m.Trigger
		}
		out.Compactions = append(out.Compactions, provider.Compaction{Reason: reason,
			Replaced: "the conversation before this point, summarized by Claude Code", TokensBefore: max(m.PreTokens, 0)})
	case "permission_denied":
		var text string
		json.Unmarshal(l.Message, &text)
		if text == "" {
			text = l.DecisionReason
		}
		if l.DecisionReason != "" && l.DecisionReason != text {
			text += " (" + l.DecisionReason + ")"
		}
		out.Chunks = append(out.Chunks, provider.Chunk{Kind: provider.ChunkDenied, Tool: l.ToolName, Text: text})
	}
	return out
}

// resultText reads a tool_result's content: a string or text blocks.
func resultText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []contentBlock
	json.Unmarshal(raw, &blocks)
	var parts []string
	for _, b := range blocks {
		if b.Text != "" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}
