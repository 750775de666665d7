package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/provider/fakeapi"
	wire "github.com/substrat/substrat/supervisor/api"
)

// worktreeModel plays a lead and a worker of real Claude Code CLIs on git:
// the lead spawns the worker in a worktree of its own; the worker writes a
// file and commits it with Bash, then completes; the lead, told, merges
// the worker's branch with Bash.
func worktreeModel(req fakeapi.ClaudeRequest) fakeapi.ClaudeOut {
	sys := string(req.System)
	var result *fakeapi.Block
	for _, b := range req.Last().Blocks() {
		if b.Type == "tool_result" {
			result = &b
		}
	}
	bash := func(id, command string) fakeapi.ClaudeOut {
		in, _ := json.Marshal(map[string]string{"command": command, "description": "git"})
		return fakeapi.ClaudeOut{ToolUse: &fakeapi.Call{ID: id, Name: "Bash", Args: string(in)}}
	}
	switch {
	case strings.Contains(sys, "ROLE=wtworker"):
		switch {
		case result == nil:
			return bash("toolu_wt_commit", `cd /workspace && echo from-the-worker > work.txt && git add work.txt && `+
				`git -c user.email=w@example.com -c user.name=worker commit -qm "worker: work.txt" && git log --format=%s -1`)
		case result.ToolUseID == "toolu_wt_commit":
			out, _ := json.Marshal(map[string]string{"result": "committed: " + fakeapi.ResultText(*result)})
			return fakeapi.ClaudeOut{ToolUse: &fakeapi.Call{ID: "toolu_wt_complete", Name: "mcp__substrat__complete", Args: string(out)}}
		}
		return fakeapi.ClaudeOut{Text: "done"}
	case strings.Contains(sys, "ROLE=wtlead"):
		switch {
		case result != nil && result.ToolUseID == "toolu_wt_spawn":
			return fakeapi.ClaudeOut{Text: "Spawned the worker."}
		case result != nil && result.ToolUseID == "toolu_wt_merge":
			return fakeapi.ClaudeOut{Text: "merged: " + fakeapi.ResultText(*result)}
		case strings.Contains(req.Last().Text(), "start"):
			in, _ := json.Marshal(map[string]any{"name": "w1", "instructions": "ROLE=wtworker. Commit your work.", "worktree": true})
			return fakeapi.ClaudeOut{ToolUse: &fakeapi.Call{ID: "toolu_wt_spawn", Name: "mcp__substrat__spawn_agent", Args: string(in)}}
		case strings.Contains(req.Last().Text(), "committed: worker: work.txt"):
			return bash("toolu_wt_merge", `cd /workspace && git -c user.email=l@example.com -c user.name=lead fetch -q origin && git -c user.email=l@example.com -c user.name=lead merge --no-edit origin/substrat/w1 >/dev/null && git log --format=%s -1 && ls`)
		}
		return fakeapi.ClaudeOut{Text: "waiting"}
	}
	return fakeapi.ClaudeOut{Text: "ok"}
}

// TestClaudeWorktreeE2E: a lead running the real Claude Code CLI in a git
// worktree workspace spawns a worker in a worktree of its own over MCP;
// the worker commits with the CLI's Bash tool in its sandbox, and the lead
// merges the worker's branch in its own; the repository ends with both.
func TestClaudeWorktreeE2E(t *testing.T) {
	cli := claudeCLI(t)
	for _, tool := range []string{"bwrap", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing (%v): run make tools", tool, err)
		}
	}
	api := fakeapi.NewClaude(worktreeModel)
	t.Cleanup(api.Close)
	d := runDaemon(t, claudeEnv(cli, api.URL)...)

	repo := filepath.Join(t.TempDir(), "repo")
	os.Mkdir(repo, 0o755)
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "."}, {"commit", "-qm", "init"}} {
		if args[0] == "add" {
			os.WriteFile(filepath.Join(repo, "README"), []byte("hello\n"), 0o644)
		}
		if out, err := exec.Command("git", append([]string{"-C", repo, "-c", "user.email=t@example.com", "-c", "user.name=t"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "team", Git: repo, Branch: "team", Network: true}, nil)
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "lead", Provider: "claude", Workspace: "team",
		Instructions: "ROLE=wtlead. Lead on git."}, nil)
	d.send("lead", "start")
	deadline := time.Now().Add(90 * time.Second)
	for {
		log, _ := exec.Command("git", "-C", repo, "log", "--format=%s", "team").Output()
		if strings.Contains(string(log), "worker: work.txt") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lead never merged the worker's branch; branch team:\n%s\ndaemon output: %s", log, filepath.Join(d.home, "e2e-daemon.out"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	worker, _ := exec.Command("git", "-C", repo, "log", "--format=%an %s", "-1", "substrat/w1").Output()
	if !strings.Contains(string(worker), "worker worker: work.txt") {
		t.Errorf("branch substrat/w1: %s", worker)
	}
	var diff wire.WorkspaceDiffResult
	mustCall(d, wire.WorkspaceDiff, wire.WorkspaceDiffParams{Ref: "lead/w1", Stat: true}, &diff)
	if !strings.Contains(diff.Diff, "work.txt") {
		t.Errorf("workspace diff of the worker: %s", diff.Diff)
	}
}
