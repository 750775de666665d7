package claude

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor/rpc/rpctest"
)

// The test binary doubles as a fake `claude`: run under that name it plays
// the CLI's print mode (see runFakeClaude) instead of running the tests.
func isFakeClaude() bool { return filepath.Base(os.Args[0]) == "claude" }

// runFakeClaude mimics `claude -p --output-format stream-json --verbose`:
// sessions are files under $HOME/.claude/projects/<cwd>/<id>.jsonl (one
// prompt a line), --session-id needs a new one and --resume an existing
// one. The prompt, read from stdin, says what to do:
//
//	CALL name {args}  call mcp__substrat__name through the daemon, then
//	                  answer "tool said: <result>"
//	HISTORY           answer the session's earlier prompts, joined by "|"
//	ENV               answer a JSON report of args, cwd and environment
//	GARBAGE           print a line that is not JSON, then hang
//	HANG              start a grandchild (sleep 300.N), say "sleeps 300.N", then hang
//	OVERLOAD n        fail with an overloaded API error the first n times
//	NORESULT          exit without a result
//	LINGER ms         answer, then take ms to exit, and add "exited" to the
//	                  session as it does
//	anything else     answer "echo: <prompt>"
func runFakeClaude() int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "Error: "+format+"\n", args...)
		return 1
	}
	flags := map[string]string{}
	bools := map[string]bool{}
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "-p", "--print", "--verbose", "--strict-mcp-config":
			bools[a] = true
		case "--output-format", "--mcp-config", "--allowedTools", "--disallowedTools", "--permission-mode", "--append-system-prompt", "--model", "--session-id", "--resume",
			"--permission-prompt-tool":
			if i+1 >= len(args) {
				return fail("option %s needs a value", a)
			}
			flags[a] = args[i+1]
			i++
		default:
			return fail("unknown option or argument %q", a)
		}
	}
	if !bools["-p"] || flags["--output-format"] != "stream-json" || !bools["--verbose"] {
		return fail("stream-json in print mode needs -p, --output-format stream-json and --verbose; got %q", args)
	}
	prompt, _ := io.ReadAll(os.Stdin)
	cwd, _ := os.Getwd()
	dir := filepath.Join(os.Getenv("HOME"), ".claude", "projects", strings.ReplaceAll(cwd, "/", "-"))
	os.MkdirAll(dir, 0o700)
	var id string
	switch {
	case flags["--session-id"] != "" && flags["--resume"] != "":
		return fail("--session-id and --resume together")
	case flags["--session-id"] != "":
		id = flags["--session-id"]
		if _, err := os.Stat(filepath.Join(dir, id+".jsonl")); err == nil {
			return fail("Session ID %s is already in use.", id)
		}
	case flags["--resume"] != "":
		// As the real CLI: a transcript without a message (queue
		// operations only) is no conversation.
		id = flags["--resume"]
		if data, err := os.ReadFile(filepath.Join(dir, id+".jsonl")); err != nil || !strings.Contains(string(data), `"type":"user"`) {
			return fail("No conversation found with session ID: %s", id)
		}
	default:
		return fail("the fake wants --session-id or --resume")
	}
	sessFile := filepath.Join(dir, id+".jsonl")
	var history []string
	if data, err := os.ReadFile(sessFile); err == nil {
		sc := bufio.NewScanner(strings.NewReader(string(data)))
		for sc.Scan() {
			var l struct {
				Type, Prompt string
			}
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Type == "user" {
				history = append(history, l.Prompt)
			}
		}
	}
	f, err := os.OpenFile(sessFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fail("%v", err)
	}
	// As the real CLI: queue operations first, then the message.
	line, _ := json.Marshal(map[string]string{"type": "user", "prompt": string(prompt)})
	f.Write(append([]byte(`{"type":"queue-operation","operation":"enqueue"}`+"\n"), append(line, '\n')...))
	f.Close()

	out := json.NewEncoder(os.Stdout)
	out.Encode(map[string]any{"type": "system", "subtype": "init", "cwd": cwd, "session_id": id,
		"tools": []string{"mcp__substrat__send_message"}, "mcp_servers": []map[string]string{{"name": "substrat", "status": "connected"}},
		"model": "claude-fake", "permissionMode": "default"})
	assistant := func(blocks ...map[string]any) {
		out.Encode(map[string]any{"type": "assistant", "session_id": id, "message": map[string]any{"role": "assistant", "content": blocks}})
	}
	result := func(text string) int {
		out.Encode(map[string]any{"type": "result", "subtype": "success", "is_error": false, "result": text, "session_id": id,
			"total_cost_usd": 0.25, "usage": map[string]any{"input_tokens": 7, "cache_read_input_tokens": 3, "cache_creation_input_tokens": 1,
				"output_tokens": 5, "server_tool_use": map[string]int{"web_search_requests": 0}}})
		return 0
	}
	p := strings.TrimSpace(string(prompt))
	// A framed prompt (the daemon's): the command is the last CALL line.
	if i := strings.LastIndex(p, "\nCALL "); i >= 0 && strings.HasPrefix(p, "[") {
		p, _, _ = strings.Cut(p[i+1:], "\n")
	}
	switch word, rest, _ := strings.Cut(p, " "); word {
	case "CALL":
		name, argsJSON, _ := strings.Cut(rest, " ")
		toolID := fmt.Sprintf("toolu_fake_%d", len(history))
		assistant(map[string]any{"type": "tool_use", "id": toolID, "name": "mcp__substrat__" + name, "input": json.RawMessage(argsJSON)})
		agent, socket, err := rpctest.MCPArgs(flags["--mcp-config"])
		if err != nil {
			return fail("mcp config: %v", err)
		}
		res, err := rpctest.CallTool(context.Background(), socket, agent, provider.ToolCall{ID: toolID, Name: name, Args: json.RawMessage(argsJSON)})
		if err != nil {
			return fail("tool call: %v", err)
		}
		out.Encode(map[string]any{"type": "user", "session_id": id, "message": map[string]any{"role": "user", "content": []map[string]any{
			{"type": "tool_result", "tool_use_id": toolID, "content": []map[string]string{{"type": "text", "text": res.Text}}, "is_error": res.IsError}}}})
		text := "tool said: " + res.Text
		assistant(map[string]any{"type": "text", "text": text})
		return result(text)
	case "HISTORY":
		text := strings.Join(history, "|")
		assistant(map[string]any{"type": "text", "text": text})
		return result(text)
	case "ENV":
		env := map[string]string{}
		for _, k := range []string{"HOME", "ENABLE_TOOL_SEARCH", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "SUBSTRAT_AGENT_ID", "CLAUDECODE",
			"CLAUDE_CODE_DISABLE_BACKGROUND_TASKS", "CLAUDE_CODE_DISABLE_CRON", "CLAUDE_CODE_DISABLE_WORKFLOWS"} {
			env[k] = os.Getenv(k)
		}
		b, _ := json.Marshal(map[string]any{"args": args, "cwd": cwd, "env": env})
		return result(string(b))
	case "GARBAGE":
		fmt.Println("Traceback (most recent call last): this is not json")
		time.Sleep(time.Hour)
		return 0
	case "HANG":
		// A sleep the test can find by its command line: the pids here
		// are of the turn's PID namespace, not the host's.
		arg := fmt.Sprintf("300.%d", time.Now().UnixNano()%1e9)
		cmd := exec.Command("sleep", arg)
		if err := cmd.Start(); err != nil {
			return fail("%v", err)
		}
		assistant(map[string]any{"type": "text", "text": "sleeps " + arg})
		time.Sleep(time.Hour)
		return 0
	case "OVERLOAD":
		n, _ := strconv.Atoi(rest)
		counter := filepath.Join(os.Getenv("HOME"), "overload-count")
		data, _ := os.ReadFile(counter)
		seen, _ := strconv.Atoi(string(data))
		os.WriteFile(counter, []byte(strconv.Itoa(seen+1)), 0o600)
		if seen < n {
			out.Encode(map[string]any{"type": "result", "subtype": "success", "is_error": true, "session_id": id,
				"result": `API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`})
			return 1
		}
		return result(fmt.Sprintf("fine after %d failures", seen))
	case "NORESULT":
		fmt.Fprintln(os.Stderr, "something went wrong")
		return 2
	case "LINGER":
		ms, _ := strconv.Atoi(rest)
		result("lingering")
		time.Sleep(time.Duration(ms) * time.Millisecond)
		f, err := os.OpenFile(sessFile, os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return fail("%v", err)
		}
		f.Write([]byte(`{"type":"user","prompt":"exited"}` + "\n"))
		f.Close()
		return 0
	default:
		text := "echo: " + p
		half := len(text) / 2
		assistant(map[string]any{"type": "text", "text": text[:half]})
		assistant(map[string]any{"type": "text", "text": text[half:]})
		return result(text)
	}
}
