package claude

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/fakeapi"
	"github.com/substrat/substrat/provider/internal/cli"
	"github.com/substrat/substrat/provider/internal/retry"
)

var updateCorpus = flag.Bool("corpus.update", false, "run the pinned Claude Code CLI and rewrite testdata/stream")

// A scenario of the stream-line corpus: how the pinned CLI is run against
// the fake API, and what the adapter must make of its lines.
type corpusCase struct {
	name  string
	args  []string // besides -p PROMPT --output-format stream-json --verbose
	env   []string // besides HOME and the fake's
	reply func(fakeapi.ClaudeRequest) fakeapi.ClaudeOut
	hooks bool // a settings.json with hooks in the CLI's HOME
	want  func(t *testing.T, lines []cli.Line)
}

// toolThenText answers the first request with a tool call, the next with
// text.
func toolThenText(name, input string) func(fakeapi.ClaudeRequest) fakeapi.ClaudeOut {
	return func(req fakeapi.ClaudeRequest) fakeapi.ClaudeOut {
		for _, b := range req.Last().Blocks() {
			if b.Type == "tool_result" {
				return fakeapi.ClaudeOut{Text: "after the tool: " + fakeapi.ResultText(b)}
			}
		}
		return fakeapi.ClaudeOut{ToolUse: &fakeapi.Call{ID: "toolu_corpus_1", Name: name, Args: input}}
	}
}

func corpusCases() []corpusCase {
	hasChunk := func(kind, tool string) func(*testing.T, []cli.Line) {
		return func(t *testing.T, lines []cli.Line) {
			for _, l := range lines {
				for _, c := range l.Chunks {
					if c.Kind == kind && (tool == "" || c.Tool == tool) {
						return
					}
				}
			}
			t.Errorf("no %s chunk (tool %q)", kind, tool)
		}
	}
	succeeded := func(t *testing.T, lines []cli.Line) {
		f := final(lines)
		if f == nil || f.Err != nil {
			t.Errorf("the turn did not succeed: %+v", f)
		}
	}
	failed := func(t *testing.T, lines []cli.Line) {
		if f := final(lines); f == nil || f.Err == nil {
			t.Errorf("the turn did not fail: %+v", f)
		}
	}
	retryable := func(t *testing.T, lines []cli.Line) {
		var tr *retry.Transient
		if f := final(lines); f == nil || !errors.As(f.Err, &tr) {
			t.Errorf("the failure is not retried: %+v", f)
		}
	}
	both := func(fs ...func(*testing.T, []cli.Line)) func(*testing.T, []cli.Line) {
		return func(t *testing.T, lines []cli.Line) {
			for _, f := range fs {
				f(t, lines)
			}
		}
	}
	return []corpusCase{
		{name: "text", reply: func(fakeapi.ClaudeRequest) fakeapi.ClaudeOut { return fakeapi.ClaudeOut{Text: "hello there"} }, want: succeeded},
		{name: "partial_messages", args: []string{"--include-partial-messages"},
			reply: func(fakeapi.ClaudeRequest) fakeapi.ClaudeOut { return fakeapi.ClaudeOut{Text: "streamed in pieces"} }, want: succeeded},
		{name: "write_allowed", args: []string{"--permission-mode", "acceptEdits"},
			reply: toolThenText("Write", `{"file_path":"CWD/made.txt","content":"made\n"}`), want: both(succeeded, hasChunk(provider.ChunkToolCall, ""))},
		{name: "write_denied", reply: toolThenText("Write", `{"file_path":"/tmp/substrat-corpus-outside/x.txt","content":"x\n"}`),
			want: both(succeeded, hasChunk(provider.ChunkDenied, "Write"))},
		{name: "bash_denied", reply: toolThenText("Bash", `{"command":"echo hi > /tmp/substrat-corpus-bash","description":"write"}`),
			want: both(succeeded, hasChunk(provider.ChunkDenied, "Bash"))},
		{name: "bash_allowed", args: []string{"--allowedTools", "Bash(echo *)"},
			reply: toolThenText("Bash", `{"command":"echo allowed","description":"echo"}`), want: both(succeeded, hasChunk(provider.ChunkToolResult, ""))},
		{name: "hooks", args: []string{"--include-hook-events", "--permission-mode", "acceptEdits"}, hooks: true,
			reply: toolThenText("Write", `{"file_path":"CWD/hooked.txt","content":"h\n"}`), want: succeeded},
		{name: "max_turns", args: []string{"--max-turns", "1", "--permission-mode", "acceptEdits"},
			reply: toolThenText("Write", `{"file_path":"CWD/once.txt","content":"1\n"}`), want: failed},
		{name: "api_error", env: []string{"CLAUDE_CODE_MAX_RETRIES=0"},
			reply: func(fakeapi.ClaudeRequest) fakeapi.ClaudeOut { return fakeapi.ClaudeOut{Status: 500} }, want: both(failed, retryable)},
		{name: "overloaded", env: []string{"CLAUDE_CODE_MAX_RETRIES=1"},
			reply: func(fakeapi.ClaudeRequest) fakeapi.ClaudeOut { return fakeapi.ClaudeOut{Status: 529} }, want: both(failed, retryable)},
	}
}

func final(lines []cli.Line) *cli.Final {
	for i := len(lines) - 1; i >= 0; i-- {
		if lines[i].Final != nil {
			return lines[i].Final
		}
	}
	return nil
}

// TestStreamCorpus replays lines the pinned Claude Code CLI printed
// (testdata/stream, written by -corpus.update): every line parses (only a
// line that is not JSON would fail a turn), each session's id is learned,
// and each scenario gives what it should.
func TestStreamCorpus(t *testing.T) {
	if *updateCorpus {
		writeCorpus(t)
	}
	for _, c := range corpusCases() {
		t.Run(c.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "stream", c.name+".jsonl"))
			if err != nil {
				t.Fatalf("%v (regenerate with go test ./provider/claude -run TestStreamCorpus -corpus.update)", err)
			}
			var lines []cli.Line
			sessionID := ""
			for n, b := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
				l, err := parse(b)
				if err != nil {
					t.Fatalf("line %d: %v: %s", n+1, err, b)
				}
				if l.SessionID != "" {
					sessionID = l.SessionID
				}
				lines = append(lines, l)
			}
			if sessionID == "" {
				t.Error("no session id learned")
			}
			c.want(t, lines)
		})
	}
}

// writeCorpus runs the pinned CLI for each scenario and writes its stdout.
func writeCorpus(t *testing.T) {
	bin := pinnedCLI(t)
	dir := filepath.Join("testdata", "stream")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range corpusCases() {
		api := fakeapi.NewClaude(c.reply)
		home, cwd := t.TempDir(), t.TempDir()
		if c.hooks {
			settings := `{"hooks":{"PreToolUse":[{"matcher":"Write","hooks":[{"type":"command","command":"echo pre-tool-use"}]}],` +
				`"SessionStart":[{"hooks":[{"type":"command","command":"echo session-start"}]}]}}`
			os.MkdirAll(filepath.Join(home, ".claude"), 0o700)
			if err := os.WriteFile(filepath.Join(home, ".claude", "settings.json"), []byte(settings), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		reply := c.reply
		api.SetReply(func(req fakeapi.ClaudeRequest) fakeapi.ClaudeOut {
			out := reply(req)
			if out.ToolUse != nil {
				tu := *out.ToolUse
				tu.Args = strings.ReplaceAll(tu.Args, "CWD", cwd)
				out.ToolUse = &tu
			}
			return out
		})
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		cmd := exec.CommandContext(ctx, bin, append([]string{"-p", "Do the thing.", "--output-format", "stream-json", "--verbose"}, c.args...)...)
		cmd.Dir = cwd
		cmd.Env = append([]string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "ANTHROPIC_BASE_URL=" + api.URL, "ANTHROPIC_API_KEY=sk-ant-corpus",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "ENABLE_TOOL_SEARCH=false", "DISABLE_AUTOUPDATER=1"}, c.env...)
		out, _ := cmd.Output()
		cancel()
		api.Close()
		var keep bytes.Buffer
		sc := bufio.NewScanner(bytes.NewReader(out))
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			if len(bytes.TrimSpace(sc.Bytes())) > 0 {
				keep.Write(sc.Bytes())
				keep.WriteByte('\n')
			}
		}
		if err := os.WriteFile(filepath.Join(dir, c.name+".jsonl"), keep.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d lines", c.name, bytes.Count(keep.Bytes(), []byte("\n")))
	}
}

// pinnedCLI is the CLI make tools installs in .tools/.
func pinnedCLI(t *testing.T) string {
	t.Helper()
	dir, _ := os.Getwd()
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		if parent := filepath.Dir(dir); parent != dir {
			dir = parent
		} else {
			t.Fatal("no go.mod above the test")
		}
	}
	bin := filepath.Join(dir, ".tools", "npm", "node_modules", ".bin", "claude")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the pinned Claude Code CLI is missing: %v (make tools)", err)
	}
	return bin
}
