// Package clitest holds what the tests of the CLI providers that run a
// real, pinned CLI share: finding the CLI in .tools, building the substrat
// binary its MCP config starts, and a tool handler that records calls.
package clitest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/substrat/substrat/provider"
)

// RepoRoot is the module's root, above the test's directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, _ := os.Getwd()
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test")
		}
		dir = parent
	}
}

// PinnedCLI is the npm CLI name that scripts/install-tools.sh installs
// into .tools/npm.
func PinnedCLI(t testing.TB, name string) string {
	t.Helper()
	bin := filepath.Join(RepoRoot(t), ".tools", "npm", "node_modules", ".bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the %s CLI is missing (%v): run make tools (scripts/install-tools.sh installs it)", name, err)
	}
	return bin
}

// Substrat builds the substrat binary (the MCP server a CLI starts) once
// per test process.
var Substrat = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "substrat-clitest-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "substrat")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/substrat/substrat/cmd/substrat").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// Recorder is a tool handler that records each call and answers Answer.
type Recorder struct {
	Answer string

	mu    sync.Mutex
	calls []provider.ToolCall
}

// CallTool implements provider.ToolHandler.
func (r *Recorder) CallTool(ctx context.Context, c provider.ToolCall) provider.ToolResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
	return provider.ToolResult{Text: r.Answer}
}

// Calls returns the calls so far.
func (r *Recorder) Calls() []provider.ToolCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]provider.ToolCall(nil), r.calls...)
}

// Restarts drives a session of p through what a daemon puts it through,
// calling turn for each turn and check after it with the sum of the
// usage of the turns so far: three turns; a suspend, a restore from the
// blob and a turn; a restore from that same blob, now stale (the daemon
// was killed after it had resumed the session), and a turn; a restore from
// nothing (killed before any suspend) and a turn.
func Restarts(t *testing.T, p provider.Provider, cfg provider.Config,
	turn func(s provider.Session, n int) provider.TurnResult, check func(turns int, sum provider.Usage)) {
	t.Helper()
	ctx := context.Background()
	var sum provider.Usage
	n := 0
	run := func(s provider.Session) {
		t.Helper()
		n++
		u := turn(s, n).Usage
		sum.InputTokens += u.InputTokens
		sum.OutputTokens += u.OutputTokens
		sum.CostUSD += u.CostUSD
		sum.TokensUnknown = sum.TokensUnknown || u.TokensUnknown
		sum.CostUnknown = sum.CostUnknown || u.CostUnknown
		t.Logf("turn %d: %+v; sum %+v", n, u, sum)
		check(n, sum)
	}
	s, err := p.Create(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		run(s)
	}
	blob, err := s.Suspend(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Stop()
	for _, state := range [][]byte{blob, blob, nil} {
		if s, err = p.Restore(ctx, cfg, state); err != nil {
			t.Fatal(err)
		}
		run(s)
		s.Stop() // no suspend: as a kill -9 of the daemon leaves it
	}
}

// UsageTotals runs Restarts with turns of the prompt "turn", the second
// "USE-THE-TOOL" (a fake answers it with one agent tool call), and checks
// after each that the turns' usage adds up to what the fake API served
// (served: input and output tokens, and the requests so far). It returns
// the tool calls made.
func UsageTotals(t *testing.T, p provider.Provider, cfg provider.Config, served func() (in, out, requests int)) []provider.ToolCall {
	t.Helper()
	tools := &Recorder{Answer: "sent"}
	Restarts(t, p, cfg, func(s provider.Session, n int) provider.TurnResult {
		prompt := "turn"
		if n == 2 {
			prompt = "USE-THE-TOOL"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		res, err := s.Send(ctx, provider.Turn{Prompt: prompt, Tools: tools})
		if err != nil {
			t.Fatalf("turn %d: %v", n, err)
		}
		return res
	}, func(turns int, sum provider.Usage) {
		in, out, requests := served()
		if sum.InputTokens != int64(in) || sum.OutputTokens != int64(out) || sum.TokensUnknown {
			t.Fatalf("after %d turns (%d requests) the turns' usage adds up to %d in, %d out; the API served %d in, %d out",
				turns, requests, sum.InputTokens, sum.OutputTokens, in, out)
		}
	})
	return tools.Calls()
}

// Start creates a session of p with cfg, recording the session ids it
// reports through Config.SessionID, and returns it with its config; the
// session stops at the end of the test.
func Start(t *testing.T, p provider.Provider, cfg provider.Config) (provider.Session, provider.Config, *[]string) {
	t.Helper()
	var ids []string
	cfg.SessionID = func(id string) error { ids = append(ids, id); return nil }
	s, err := p.Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	return s, cfg, &ids
}

// Send runs one turn of s with tools, within 90 s, and returns what it
// streamed besides its result.
func Send(t *testing.T, s provider.Session, prompt string, tools provider.ToolHandler) (provider.TurnResult, []provider.Chunk, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var chunks []provider.Chunk
	res, err := s.Send(ctx, provider.Turn{Prompt: prompt, Tools: tools, Output: func(c provider.Chunk) { chunks = append(chunks, c) }})
	return res, chunks, err
}
