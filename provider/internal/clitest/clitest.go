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
