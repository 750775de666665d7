package workspace_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/substrat/substrat/bwrap/launch"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/workspace"
	"github.com/substrat/substrat/supervisor/workspace/gitws"
)

// git runs the real git in dir, as a user would, and returns its output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir, "-c", "user.email=t@example.com", "-c", "user.name=t"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// gitEnv is a home, a store with the daemon's git runner, and a
// repository with one commit on main.
type gitEnv struct {
	s    *workspace.Store
	l    fsstore.Layout
	host string // a directory outside the home and the repository
	repo string // the repository's main working tree
	base string // its first commit
}

func newGitEnv(t *testing.T) *gitEnv {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is not installed (make test installs it)")
	}
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := &gitEnv{l: fsstore.Layout{Home: filepath.Join(dir, "home")}, host: filepath.Join(dir, "host"), repo: filepath.Join(dir, "repo")}
	for _, d := range []string{e.l.Home, e.host, e.repo} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	git(t, e.repo, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(e.repo, "README"), []byte("hello\n"), 0o644)
	git(t, e.repo, "add", ".")
	git(t, e.repo, "commit", "-qm", "init")
	e.base = git(t, e.repo, "rev-parse", "HEAD")
	e.s = workspace.NewStore(e.l, nil).WithGit(gitws.New(e.l))
	return e
}

// create makes git workspace name of the repository through the runner,
// as the daemon does.
func (e *gitEnv) create(t *testing.T, name, base string) *workspace.Workspace {
	t.Helper()
	g, _, err := e.s.Git().Prepare(name, e.repo, "", base)
	if err != nil {
		t.Fatal(err)
	}
	w, err := e.s.Create(workspace.Workspace{Scope: workspace.UserScope, Name: name, Git: g})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// sh runs a shell script in w's sandbox, as an agent's shell would, and
// returns its output and exit code.
func (e *gitEnv) sh(t *testing.T, w *workspace.Workspace, script string) (string, int) {
	t.Helper()
	spec, err := w.Spec(e.l)
	if err != nil {
		t.Fatal(err)
	}
	spec.Env = map[string]string{"PATH": "/usr/bin:/bin", "HOME": "/tmp"}
	c, err := launch.Command(context.Background(), spec, []string{"/bin/sh", "-c", script})
	if err != nil {
		t.Fatal(err)
	}
	defer launch.CloseFiles(c)
	var out, stderr bytes.Buffer
	c.Stdout, c.Stderr = &out, &stderr
	err = c.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		if bytes.HasPrefix(stderr.Bytes(), []byte("bwrap:")) {
			t.Fatalf("bwrap failed: %s", stderr.String())
		}
		return out.String() + stderr.String(), ee.ExitCode()
	}
	t.Fatal(err)
	return "", 0
}

func wantErr(t *testing.T, err, sentinel error, substr string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v containing %q", sentinel, substr)
	}
	if !errors.Is(err, sentinel) {
		t.Errorf("error %q does not wrap %v", err, sentinel)
	}
	if !strings.Contains(err.Error(), substr) {
		t.Errorf("error %q does not contain %q", err, substr)
	}
}

// TestGitWorkspace: a workspace is a clone in the home; git works in its
// sandbox (commit, log, fetch from the repository), the commit reaches
// the repository only when the daemon publishes it, two workspaces do
// not see each other's files, and deleting keeps work unless forced.
func TestGitWorkspace(t *testing.T) {
	e := newGitEnv(t)
	a, b := e.create(t, "a", ""), e.create(t, "b", "")
	if got := git(t, e.repo, "rev-parse", "substrat/a"); got != e.base {
		t.Fatalf("branch substrat/a in the repository: %q, want %s", got, e.base)
	}
	out, code := e.sh(t, a, `echo from-a >> README && echo a > a.txt && git add -A && git commit -qm "work of a" && git log --format=%s -1 && git rev-parse --abbrev-ref HEAD`)
	if code != 0 || out != "work of a\nsubstrat/a\n" {
		t.Fatalf("commit in the sandbox: %q (exit %d)", out, code)
	}
	if got := git(t, e.repo, "rev-parse", "substrat/a"); got != e.base {
		t.Fatalf("the commit reached the repository before it was published: %s", got)
	}
	commit, err := e.s.Git().Publish(a)
	if err != nil {
		t.Fatal(err)
	}
	if got := git(t, e.repo, "log", "--format=%s", "-1", "substrat/a"); got != "work of a" || git(t, e.repo, "rev-parse", "substrat/a") != commit {
		t.Fatalf("branch substrat/a in the repository after publish: %q", got)
	}
	git(t, e.repo, "fsck", "--strict")
	// b sees a's published branch through origin, not a's files.
	out, code = e.sh(t, b, `cat README; ls a.txt 2>&1; git fetch -q origin && git log --format=%s -1 origin/substrat/a`)
	if code != 0 || !strings.Contains(out, "hello\n") || strings.Contains(out, "from-a") || !strings.HasSuffix(out, "work of a\n") {
		t.Fatalf("workspace b (exit %d):\n%s", code, out)
	}
	diff, err := e.s.Git().Diff(a, true)
	if err != nil || !strings.Contains(diff, "README") || !strings.Contains(diff, "a.txt") {
		t.Fatalf("diff of a: %q, %v", diff, err)
	}

	// Uncommitted work stops a delete; --force does not stop; the branch
	// stays unless asked.
	if _, code := e.sh(t, b, "echo wip > wip.txt"); code != 0 {
		t.Fatal("write in b")
	}
	err = e.s.DeleteWith(workspace.UserScope, "b", nil, workspace.DeleteOptions{})
	wantErr(t, err, workspace.ErrInUse, "uncommitted changes: wip.txt")
	err = e.s.DeleteWith(workspace.UserScope, "a", nil, workspace.DeleteOptions{DeleteBranch: true})
	wantErr(t, err, workspace.ErrInUse, "commits")
	if err := e.s.DeleteWith(workspace.UserScope, "b", nil, workspace.DeleteOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.s.DeleteWith(workspace.UserScope, "a", nil, workspace.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := git(t, e.repo, "branch", "--list", "substrat/*"); !strings.Contains(got, "substrat/a") || !strings.Contains(got, "substrat/b") {
		t.Errorf("the branches were not kept: %q", got)
	}
	c := e.create(t, "c", "")
	if err := e.s.DeleteWith(workspace.UserScope, "c", nil, workspace.DeleteOptions{DeleteBranch: true}); err != nil {
		t.Fatal(err)
	}
	if got := git(t, e.repo, "branch", "--list", "substrat/c"); got != "" {
		t.Errorf("--delete-branch kept %q", got)
	}
	_ = c
	if p := e.s.GitProblems(); len(p) != 0 {
		t.Errorf("problems: %v", p)
	}
}

// crash is the panic of a simulated crash.
type crash struct{}

// TestGitWorkspaceCrash: a crash (the process stopping) at each step of
// making a git workspace leaves, after the next start's Sweep, either no
// workspace and no branch, or a whole workspace git works in.
func TestGitWorkspaceCrash(t *testing.T) {
	for _, step := range []string{"marker", "added", "written", "renamed"} {
		t.Run(step, func(t *testing.T) {
			e := newGitEnv(t)
			restore := workspace.SetGitFault(func(at string) {
				if at == step {
					panic(crash{})
				}
			})
			func() {
				defer func() {
					if p := recover(); p != nil && p != (crash{}) {
						panic(p)
					}
				}()
				e.create(t, "w", "")
			}()
			restore()

			s2 := workspace.NewStore(e.l, nil).WithGit(gitws.New(e.l)) // the next start
			if _, err := s2.Sweep(); err != nil {
				t.Fatal(err)
			}
			w, err := s2.Get(workspace.UserScope, "w")
			branches := git(t, e.repo, "branch", "--list", "substrat/w")
			if step != "renamed" {
				if err == nil || branches != "" {
					t.Fatalf("half-made workspace left: %v; branches: %q", err, branches)
				}
				leftovers, _ := os.ReadDir(filepath.Join(e.l.WorkspacesDir(), workspace.UserScope))
				if len(leftovers) != 0 {
					t.Fatalf("left in workspaces/USER: %v", leftovers)
				}
				e.s = s2
				e.create(t, "w", "") // and it can be made again
				return
			}
			if err != nil || branches == "" {
				t.Fatalf("the workspace made before the crash: %v; branches %q", err, branches)
			}
			if _, err := os.Stat(filepath.Join(e.l.WorkspaceDir(workspace.UserScope, "w"), "git-creating")); err == nil {
				t.Error("the marker is still there after Sweep")
			}
			if out, code := e.sh(t, w, "git status --short && git rev-parse --abbrev-ref HEAD"); code != 0 || out != "substrat/w\n" {
				t.Fatalf("git in the workspace: %q (exit %d)", out, code)
			}
		})
	}
}

// execGit is the command of git run by a user in dir.
func execGit(dir string, args ...string) *exec.Cmd {
	return exec.Command("git", append([]string{"-C", dir, "-c", "user.email=t@example.com", "-c", "user.name=t"}, args...)...)
}
