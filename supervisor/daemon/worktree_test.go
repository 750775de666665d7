package daemon

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/substrat/substrat/bwrap/launch"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor"
	"github.com/substrat/substrat/supervisor/api"
)

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir, "-c", "user.email=t@example.com", "-c", "user.name=t"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// sh runs a script in agent ref's sandbox through the daemon's own hook.
func sh(t *testing.T, c *supervisor.Core, h *host, ref, script string) string {
	t.Helper()
	hook := h.sandboxFor(sessionOf(c, ref))
	if hook == nil {
		t.Fatalf("%s has no sandbox", ref)
	}
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/tmp", "GIT_AUTHOR_NAME=" + ref, "GIT_AUTHOR_EMAIL=a@example.com",
		"GIT_COMMITTER_NAME=" + ref, "GIT_COMMITTER_EMAIL=a@example.com"}
	wrapped, err := wrap(context.Background(), hook, cmd, provider.SandboxNeeds{})
	if err != nil {
		t.Fatal(err)
	}
	defer launch.CloseFiles(wrapped)
	var out bytes.Buffer
	wrapped.Stdout, wrapped.Stderr = &out, &out
	if err := wrapped.Run(); err != nil {
		t.Fatalf("%s: %s: %v\n%s", ref, script, err, out.String())
	}
	return out.String()
}

// turn sends agent ref a message and runs the turn that takes it, and
// returns the turn's text.
func turn(t *testing.T, c *supervisor.Core, ref, text string) string {
	t.Helper()
	_, outcome, cancel, err := c.SendAndAwait(api.SendParams{To: ref, Text: text})
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	drain(t, c)
	o := <-outcome
	if o.Failed != "" {
		t.Fatalf("the turn of %s failed: %s", ref, o.Failed)
	}
	return o.Text
}

// TestWorktreeTeam: a lead in a git worktree spawns two workers, each in a
// worktree of its own branched from the lead's HEAD; each commits in its
// sandbox without seeing the other's work; the lead sees their diffs
// with workspace_diff and merges both branches in its own sandbox.
func TestWorktreeTeam(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is not installed (make test installs it)")
	}
	home := shortDir(t)
	repo := filepath.Join(shortDir(t), "repo")
	os.Mkdir(repo, 0o755)
	gitIn(t, repo, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(repo, "README"), []byte("hello\n"), 0o644)
	gitIn(t, repo, "add", ".")
	gitIn(t, repo, "commit", "-qm", "init")

	c, h := newCore(t, home)
	if _, err := c.CreateWorkspace(api.WorkspaceParams{Name: "team", Git: repo, Branch: "team"}); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, c, api.CreateParams{Name: "lead", Workspace: "team"})
	text := turn(t, c, "lead", `!spawn_agent {"name":"w1","instructions":"work","worktree":true}
!spawn_agent {"name":"w2","instructions":"work","worktree":true,"branch":"substrat/two"}`)
	if strings.Contains(text, "error") {
		t.Fatalf("the spawns: %s", text)
	}
	drain(t, c)
	if b := gitIn(t, repo, "branch", "--list"); !strings.Contains(b, "substrat/w1") || !strings.Contains(b, "substrat/two") {
		t.Fatalf("branches: %s", b)
	}
	sh(t, c, h, "lead/w1", `echo one > one.txt && git add one.txt && git commit -qm "w1: one"`)
	if out := sh(t, c, h, "lead/w2", `ls; echo two > two.txt && git add two.txt && git commit -qm "w2: two"`); strings.Contains(out, "one.txt") {
		t.Fatalf("w2 sees w1's work: %s", out)
	}
	diff := turn(t, c, "lead", `!workspace_diff {"workspace":"w1","stat":true}`)
	if !strings.Contains(diff, "one.txt") || !strings.Contains(diff, "substrat/w1") {
		t.Fatalf("workspace_diff of w1: %s", diff)
	}
	if b := gitIn(t, repo, "log", "--format=%s", "-1", "substrat/w1"); b == "w1: one" {
		t.Fatal("w1's commit reached the repository before the daemon published it")
	}
	// A turn of each worker ends: the daemon publishes its branch.
	turn(t, c, "lead/w1", "done?")
	turn(t, c, "lead/w2", "done?")
	if b := gitIn(t, repo, "log", "--format=%s", "-1", "substrat/w1"); b != "w1: one" {
		t.Fatalf("substrat/w1 in the repository after w1's turn: %s", b)
	}
	got := sh(t, c, h, "lead", `git fetch -q origin && git merge -q --no-edit origin/substrat/w1 origin/substrat/two && ls && git log --format=%s -3`)
	for _, want := range []string{"one.txt", "two.txt", "README"} {
		if !strings.Contains(got, want) {
			t.Fatalf("after the merge the lead's worktree lacks %s:\n%s", want, got)
		}
	}
	turn(t, c, "lead", "merged")
	if log := gitIn(t, repo, "log", "--format=%s", "team"); !strings.Contains(log, "w1: one") || !strings.Contains(log, "w2: two") {
		t.Fatalf("branch team in the repository: %s", log)
	}
}
