package workspace

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/workspace/gitwt"
)

// git runs the real git in dir and returns its output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir, "-c", "user.email=t@example.com", "-c", "user.name=t"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// newRepo makes a repository with one commit under host.
func newRepo(t *testing.T, host string) gitwt.Repo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is not installed (make test installs it)")
	}
	dir := filepath.Join(host, "repo")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(dir, "README"), []byte("hello\n"), 0o644)
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-qm", "init")
	r, err := gitwt.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func gitWorkspace(t *testing.T, s *Store, r gitwt.Repo, name string) *Workspace {
	t.Helper()
	base, err := r.Resolve("HEAD")
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Create(Workspace{Scope: UserScope, Name: name,
		Git: &Git{Repo: r.Top, CommonDir: r.CommonDir, Branch: "substrat/" + name, Base: base}})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// inSandbox runs a shell script in w's sandbox, as an agent's shell would.
func inSandbox(t *testing.T, l fsstore.Layout, w *Workspace, script string) (string, int) {
	t.Helper()
	spec, err := w.Spec(l)
	if err != nil {
		t.Fatal(err)
	}
	spec.Env = map[string]string{"PATH": "/usr/bin:/bin", "HOME": "/tmp", "GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "a@example.com",
		"GIT_COMMITTER_NAME": "agent", "GIT_COMMITTER_EMAIL": "a@example.com"}
	c, err := bwrap.Command(context.Background(), spec, []string{"/bin/sh", "-c", script})
	defer bwrap.CloseFiles(c)
	return sandboxRun(t, c, err)
}

// TestGitWorkspace: a workspace that is a worktree of a real repository;
// git works inside its sandbox (a commit lands on the branch in the
// repository), the repository's config and hooks cannot be changed from
// there, two worktrees do not see each other's files, and deleting keeps
// work unless forced.
func TestGitWorkspace(t *testing.T) {
	s, l, host := newStore(t)
	r := newRepo(t, host)
	a, b := gitWorkspace(t, s, r, "a"), gitWorkspace(t, s, r, "b")
	if got := git(t, r.Top, "worktree", "list"); !strings.Contains(got, l.WorkspaceRoot(UserScope, "a")+" ") {
		t.Fatalf("the repository does not know the worktree:\n%s", got)
	}
	out, code := inSandbox(t, l, a, `echo from-a >> README && echo a > a.txt && git add -A && git commit -qm "work of a" && git log --format=%s -1`)
	if code != 0 || out != "work of a\n" {
		t.Fatalf("commit in the sandbox: %q (exit %d)", out, code)
	}
	if got := git(t, r.Top, "log", "--format=%s", "-1", "substrat/a"); got != "work of a" {
		t.Fatalf("branch substrat/a in the repository: %q", got)
	}
	out, code = inSandbox(t, l, b, `cat README; ls a.txt 2>&1; echo x >> "$(git rev-parse --git-common-dir)/config" 2>&1 || echo config-refused; `+
		`touch "$(git rev-parse --git-common-dir)/hooks/post-commit" 2>&1 || echo hooks-refused`)
	if out2 := out; !strings.Contains(out2, "hello\n") || strings.Contains(out2, "from-a") || strings.Contains(out2, "\na.txt\n") ||
		!strings.Contains(out2, "config-refused") || !strings.Contains(out2, "hooks-refused") {
		t.Fatalf("worktree b (exit %d):\n%s", code, out)
	}

	// Uncommitted work stops a delete; --force does not stop; the branch
	// stays unless asked.
	if _, code := inSandbox(t, l, b, "echo wip > wip.txt"); code != 0 {
		t.Fatal("write in b")
	}
	err := s.DeleteWith(UserScope, "b", nil, DeleteOptions{})
	wantErr(t, err, ErrInUse, "uncommitted changes: wip.txt")
	err = s.DeleteWith(UserScope, "a", nil, DeleteOptions{DeleteBranch: true})
	wantErr(t, err, ErrInUse, "commits")
	if err := s.DeleteWith(UserScope, "b", nil, DeleteOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteWith(UserScope, "a", nil, DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := git(t, r.Top, "worktree", "list"); strings.Contains(got, l.Home) {
		t.Errorf("worktrees left after the deletes:\n%s", got)
	}
	if got := git(t, r.Top, "branch", "--list", "substrat/*"); !strings.Contains(got, "substrat/a") || !strings.Contains(got, "substrat/b") {
		t.Errorf("the branches were not kept: %q", got)
	}
	if len(s.GitProblems()) != 0 {
		t.Errorf("problems: %v", s.GitProblems())
	}
}

// crash is the panic of a simulated crash.
type crash struct{}

// TestGitWorkspaceCrash: a crash (the process stopping) at each step of
// making a git workspace leaves, after the next start's Sweep, either no
// workspace, no worktree and no branch, or a whole workspace whose
// worktree git knows at its place.
func TestGitWorkspaceCrash(t *testing.T) {
	for _, step := range []string{"marker", "added", "written", "renamed"} {
		t.Run(step, func(t *testing.T) {
			s, l, host := newStore(t)
			r := newRepo(t, host)
			old := gitFault
			gitFault = func(at string) {
				if at == step {
					panic(crash{})
				}
			}
			func() {
				defer func() {
					if p := recover(); p != nil && p != (crash{}) {
						panic(p)
					}
				}()
				gitWorkspace(t, s, r, "w")
			}()
			gitFault = old

			s2 := NewStore(l, nil) // the next start
			if _, err := s2.Sweep(); err != nil {
				t.Fatal(err)
			}
			w, err := s2.Get(UserScope, "w")
			list := git(t, r.Top, "worktree", "list")
			branches := git(t, r.Top, "branch", "--list", "substrat/w")
			if step != "renamed" {
				if err == nil || strings.Contains(list, l.Home) || branches != "" {
					t.Fatalf("half-made workspace left: %v; worktrees:\n%s\nbranches: %q", err, list, branches)
				}
				leftovers, _ := os.ReadDir(filepath.Join(l.WorkspacesDir(), UserScope))
				if len(leftovers) != 0 {
					t.Fatalf("left in workspaces/USER: %v", leftovers)
				}
				gitWorkspace(t, s2, r, "w") // and it can be made again
				return
			}
			if err != nil || !strings.Contains(list, l.WorkspaceRoot(UserScope, "w")+" ") {
				t.Fatalf("the workspace made before the crash: %v; worktrees:\n%s", err, list)
			}
			if _, err := os.Stat(filepath.Join(l.WorkspaceDir(UserScope, "w"), gitMarker)); err == nil {
				t.Error("the marker is still there after Sweep")
			}
			if out, code := inSandbox(t, l, w, "git status --short && git rev-parse --abbrev-ref HEAD"); code != 0 || out != "substrat/w\n" {
				t.Fatalf("git in the repaired worktree: %q (exit %d)", out, code)
			}
		})
	}
}
