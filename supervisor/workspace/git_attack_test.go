package workspace_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/substrat/substrat/supervisor/workspace"
)

// The attacks of issue 26, as a prompt-injected agent with a shell in its
// sandbox would try them, with the real git and the real bwrap. In each,
// the agent tries to get git on the host to run a command of its choice,
// which would create a marker file on the host, or to move a branch that
// is not its own. After each attempt the daemon does everything it does
// with a git workspace (diff, status, publish, a child's workspace from
// the agent's HEAD, delete), and the user runs git in the repository
// and in the workspace's root/, and the marker must never appear.

// attackEnv is a gitEnv whose repository was made without hooks/ (git
// init --template=), so that an agent that could write the repository's
// .git could plant hooks there.
func attackEnv(t *testing.T) (*gitEnv, string) {
	t.Helper()
	e := newGitEnv(t)
	os.RemoveAll(filepath.Join(e.repo, ".git", "hooks"))
	return e, filepath.Join(e.host, "marker")
}

// evil is what the agent's config, hooks and filters would run.
func evil(marker string) string { return "touch " + marker }

// afterAttack does everything the daemon and the user do with w and its
// repository, then checks that the marker is not on the host and that
// main did not move.
func (e *gitEnv) afterAttack(t *testing.T, w *workspace.Workspace, marker string) {
	t.Helper()
	git := e.s.Git()
	git.Diff(w, false)
	git.Diff(w, true)
	git.Dirty(w)
	git.Publish(w)
	if head, err := git.Head(w); err == nil { // spawn_agent with worktree: true
		if g, _, err := git.Prepare(w.Name+"-child", e.repo, "", head); err == nil {
			if c, err := e.s.Create(workspace.Workspace{Scope: workspace.UserScope, Name: w.Name + "-child", Git: g}); err == nil {
				git.Diff(c, false)
			}
		}
	}
	// The user, in the repository and in the workspace's root/.
	gitTry(e.repo, "status")
	gitTry(e.repo, "diff", "substrat/"+w.Name)
	os.WriteFile(filepath.Join(e.repo, "user.txt"), []byte("mine\n"), 0o644)
	gitTry(e.repo, "add", "user.txt")
	gitTry(e.repo, "commit", "-qm", "user's own commit")
	gitTry(e.repo, "merge", "--no-edit", "substrat/"+w.Name)
	gitTry(e.l.WorkspaceRoot(w.Scope, w.Name), "status")
	gitTry(e.l.WorkspaceRoot(w.Scope, w.Name), "diff")
	e.s.DeleteWith(w.Scope, w.Name, nil, workspace.DeleteOptions{Force: true, DeleteBranch: true})
	if _, err := os.Lstat(marker); err == nil {
		t.Fatalf("the agent's command ran on the host: %s exists", marker)
	}
}

// gitTry runs git as the user would, ignoring failure.
func gitTry(dir string, args ...string) {
	cmd := execGit(dir, args...)
	cmd.Run()
}

// mainAt checks that the user's main did not move to anything the agent
// made: it is base or a commit of the user's own.
func (e *gitEnv) mainAt(t *testing.T, want string) {
	t.Helper()
	if got := git(t, e.repo, "rev-parse", "refs/heads/main"); got != want {
		t.Fatalf("main moved from %s to %s", want, got)
	}
}

func TestGitAttacks(t *testing.T) {
	cases := []struct {
		name string
		// script is what the agent runs in its sandbox; $M is the marker's
		// host path, $C the repository's .git, $B the base commit.
		script string
	}{
		{"pointer file to a git dir of its own", `
			mkdir -p /workspace/evil && git init -q /workspace/evil/g
			git --git-dir=/workspace/evil/g config core.fsmonitor "touch $M"
			rm -rf /workspace/.git; echo "gitdir: /workspace/evil/g" > /workspace/.git`},
		{"symlink for the pointer", `
			mkdir -p /workspace/evil && git init -q /workspace/evil/g
			git --git-dir=/workspace/evil/g config core.fsmonitor "touch $M"
			rm -rf /workspace/.git; ln -s /workspace/evil/g /workspace/.git`},
		{"a .git directory of its own in a subdirectory", `
			mkdir -p /workspace/sub && git init -q /workspace/sub
			git -C /workspace/sub config core.fsmonitor "touch $M"`},
		{"commondir of a sibling", `
			mkdir -p /workspace/evil && git init -q /workspace/evil/g
			git --git-dir=/workspace/evil/g config core.fsmonitor "touch $M"
			mkdir -p $C/worktrees/other; echo /workspace/evil/g > $C/worktrees/other/commondir
			echo /workspace/evil/g > /workspace/.git/commondir`},
		{"hooks in the shared git dir and in its own", `
			mkdir -p $C/hooks; printf '#!/bin/sh\ntouch %s\n' "$M" > $C/hooks/post-checkout; chmod +x $C/hooks/post-checkout
			cp $C/hooks/post-checkout $C/hooks/pre-commit
			printf '#!/bin/sh\ntouch %s\n' "$M" > /workspace/.git/hooks/post-checkout; chmod +x /workspace/.git/hooks/post-checkout
			rm -rf /workspace/.git/hooks; mkdir /workspace/.git/hooks`},
		{"worktree config", `
			git config extensions.worktreeConfig true
			git config --worktree core.fsmonitor "touch $M"
			printf '[core]\n\tfsmonitor = touch %s\n' "$M" > /workspace/.git/config.worktree
			mkdir -p $C/worktrees/w; printf '[core]\n\tfsmonitor = touch %s\n' "$M" > $C/worktrees/w/config.worktree`},
		{"its own config: fsmonitor, pager, external diff, ssh, worktree", `
			git config core.fsmonitor "touch $M"; git config core.pager "touch $M"; git config diff.external "touch $M"
			git config core.sshCommand "touch $M"; git config core.worktree /etc; git config core.hooksPath /workspace/h
			printf '[core]\n\tfsmonitor = touch %s\n' "$M" > /tmp/c; cp /tmp/c /workspace/.git/config
			rm -f /workspace/.git/config; ln -sf /tmp/c /workspace/.git/config`},
		{"the repository's config", `
			git --git-dir=$C config core.fsmonitor "touch $M"; printf '[core]\n\tfsmonitor = touch %s\n' "$M" >> $C/config
			printf '*.txt filter=x\n' > $C/info/attributes`},
		{"filter and textconv through attributes", `
			printf '*.txt filter=x diff=y\n' > .gitattributes; echo data > f.txt
			git config filter.x.clean "touch $M"; git config diff.y.textconv "touch $M"
			printf '[filter "x"]\n\tclean = touch %s\n' "$M" > /workspace/.git/info/attributes
			git add -A; git commit -qm attrs`},
		{"refs: move main and another's branch", `
			git commit -q --allow-empty -m evil
			git --git-dir=$C update-ref refs/heads/main HEAD; git --git-dir=$C update-ref refs/heads/substrat/other HEAD
			git push -q origin HEAD:main; git push -q origin HEAD:refs/heads/substrat/other
			echo $(git rev-parse HEAD) > $C/refs/heads/main; git --git-dir=$C pack-refs --all`},
		{"objects: replace the repository's", `
			for f in $(find $C/objects -type f); do chmod u+w $f; echo junk > $f; done; echo /workspace > $C/objects/info/alternates`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, marker := attackEnv(t)
			git(t, e.repo, "branch", "substrat/other")
			w := e.create(t, "w", "")
			script := "M=" + shq(marker) + "; C=" + shq(w.Git.CommonDir) + "; B=" + w.Git.Base + "\n" + tc.script
			e.sh(t, w, script) // failures are the point
			e.mainAt(t, e.base)
			if got := git(t, e.repo, "rev-parse", "substrat/other"); got != e.base {
				t.Fatalf("substrat/other moved to %s", got)
			}
			git(t, e.repo, "fsck", "--strict")
			if cfg, _ := os.ReadFile(filepath.Join(e.repo, ".git", "config")); strings.Contains(string(cfg), "fsmonitor") {
				t.Fatalf("the repository's config was written:\n%s", cfg)
			}
			e.afterAttack(t, w, marker)
		})
	}
}

// TestGitClonesFilesAreNotTrusted: even if an agent owned every file of
// its clone (its config, hooks and attributes), the daemon's git reads
// them only inside the sandbox: the commands they name never run on the
// host.
func TestGitClonesFilesAreNotTrusted(t *testing.T) {
	e, marker := attackEnv(t)
	w := e.create(t, "w", "")
	gitDir := e.l.WorkspaceGitDir(w.Scope, w.Name)
	root := e.l.WorkspaceRoot(w.Scope, w.Name)
	cfg := "[core]\n\tfsmonitor = " + evil(marker) + "\n\tpager = " + evil(marker) + "\n\tsshCommand = " + evil(marker) +
		"\n\thooksPath = " + filepath.Join(gitDir, "evilhooks") +
		"\n[diff]\n\texternal = " + evil(marker) + "\n[diff \"y\"]\n\ttextconv = " + evil(marker) +
		"\n[filter \"x\"]\n\tclean = " + evil(marker) + "\n\tsmudge = " + evil(marker) + "\n\trequired = true\n" +
		"[include]\n\tpath = " + filepath.Join(e.host, "included") + "\n"
	appendFile(t, filepath.Join(gitDir, "config"), cfg)
	os.WriteFile(filepath.Join(e.host, "included"), []byte("[core]\n\tfsmonitor = "+evil(marker)+"\n"), 0o644)
	os.MkdirAll(filepath.Join(gitDir, "evilhooks"), 0o755)
	for _, h := range []string{"post-checkout", "pre-commit", "post-commit", "reference-transaction"} {
		os.WriteFile(filepath.Join(gitDir, "evilhooks", h), []byte("#!/bin/sh\n"+evil(marker)+"\n"), 0o755)
		os.WriteFile(filepath.Join(gitDir, "hooks", h), []byte("#!/bin/sh\n"+evil(marker)+"\n"), 0o755)
	}
	os.WriteFile(filepath.Join(root, ".gitattributes"), []byte("*.txt filter=x diff=y\n"), 0o644)
	os.WriteFile(filepath.Join(root, "f.txt"), []byte("data\n"), 0o644)
	e.afterAttack(t, w, marker)
}

// TestGitRefusesAReplacedDotGit: root/.git is the inert bare repository
// the daemon made; replaced or changed (here from the host, as a view or
// a link could), the sandbox and every git operation refuse with a clear
// error, and fsck says so.
func TestGitRefusesAReplacedDotGit(t *testing.T) {
	for name, tamper := range map[string]func(dotgit string){
		"a pointer file": func(d string) {
			os.RemoveAll(d)
			os.WriteFile(d, []byte("gitdir: /elsewhere\n"), 0o644)
		},
		"its config changed": func(d string) {
			os.Chmod(filepath.Join(d, "config"), 0o644)
			appendFile(t, filepath.Join(d, "config"), "\tfsmonitor = touch /tmp/x\n")
		},
		"a hook added": func(d string) {
			os.Mkdir(filepath.Join(d, "hooks"), 0o755)
		},
		"a symlink": func(d string) {
			os.RemoveAll(d)
			os.Symlink("/tmp", d)
		},
	} {
		t.Run(name, func(t *testing.T) {
			e, _ := attackEnv(t)
			w := e.create(t, "w", "")
			dotgit := filepath.Join(e.l.WorkspaceRoot(w.Scope, w.Name), ".git")
			if err := e.s.CheckGit(w); err != nil {
				t.Fatalf("before: %v", err)
			}
			tamper(dotgit)
			if _, err := w.Spec(e.l); err == nil || !strings.Contains(err.Error(), "not the inert .git the daemon made") {
				t.Fatalf("Spec: %v", err)
			}
			if _, err := e.s.Git().Diff(w, false); err == nil {
				t.Fatal("Diff succeeded")
			}
			if p := e.s.GitProblems(); len(p) != 1 || !strings.Contains(p[0], ".git") {
				t.Fatalf("problems: %v", p)
			}
		})
	}
}

// TestGitInRootFindsNoRepository: git run by hand in a workspace's root/
// (or below it) stops at the inert .git, even when the agent made root/
// itself into a bare repository whose config runs a command.
func TestGitInRootFindsNoRepository(t *testing.T) {
	e, marker := attackEnv(t)
	w := e.create(t, "w", "")
	script := `cd /workspace && mkdir -p objects refs/heads sub && echo 'ref: refs/heads/main' > HEAD && ` +
		`printf '[core]\n\tbare = false\n\tworktree = .\n\tfsmonitor = "touch ` + marker + `; true"\n' > config`
	if out, code := e.sh(t, w, script); code != 0 {
		t.Fatalf("the agent's script: %s", out)
	}
	for _, dir := range []string{e.l.WorkspaceRoot(w.Scope, w.Name), filepath.Join(e.l.WorkspaceRoot(w.Scope, w.Name), "sub")} {
		out, err := execGit(dir, "status").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "must be run in a work tree") {
			t.Errorf("git status in %s: %v\n%s", dir, err, out)
		}
	}
	if _, err := os.Lstat(marker); err == nil {
		t.Fatal("the agent's fsmonitor ran on the host")
	}
}

// TestGitLinksCannotExposeMetadata: no read-write link (an agent's or a
// user's) may show a git workspace's git/ or root/.git, or a directory
// holding them; read-only, and below them, is fine.
func TestGitLinksCannotExposeMetadata(t *testing.T) {
	e, _ := attackEnv(t)
	w := e.create(t, "w", "")
	if _, err := e.s.Create(workspace.Workspace{Scope: workspace.UserScope, Name: "other"}); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(e.l.WorkspaceRoot(w.Scope, w.Name), "src"), 0o755)
	root := e.l.WorkspaceRoot(w.Scope, w.Name)
	for _, p := range []string{root, e.l.WorkspaceGitDir(w.Scope, w.Name), filepath.Join(root, ".git"), e.l.WorkspaceDir(w.Scope, w.Name)} {
		_, err := e.s.Link(workspace.UserScope, "other", workspace.Link{HostPath: p, MountPath: "/mnt/x", Mode: workspace.ModeRW})
		wantErr(t, err, workspace.ErrEscape, "git metadata")
	}
	if _, err := e.s.Link(workspace.UserScope, "other", workspace.Link{HostPath: root, MountPath: "/mnt/ro", Mode: workspace.ModeRO}); err != nil {
		t.Fatalf("read-only link: %v", err)
	}
	if _, err := e.s.Link(workspace.UserScope, "other", workspace.Link{HostPath: filepath.Join(root, "src"), MountPath: "/mnt/src", Mode: workspace.ModeRW}); err != nil {
		t.Fatalf("read-write link below: %v", err)
	}
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestGitViews: a view of a git workspace cannot write its root/.git, and
// no view may show the .git directory itself.
func TestGitViews(t *testing.T) {
	e, _ := attackEnv(t)
	w := e.create(t, "w", "")
	v, err := e.s.CreateView(workspace.UserScope, "v", workspace.View{SourceScope: w.Scope, SourceName: w.Name, Mode: workspace.ModeRW})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := e.sh(t, v, `echo x > /workspace/note.txt; mkdir /workspace/.git/hooks 2>&1; printf '[core]\n\tfsmonitor = touch /x\n' > /workspace/.git/config 2>&1; ls -A /workspace/.git`)
	if !strings.Contains(out, "Read-only") && !strings.Contains(out, "read-only") {
		t.Fatalf("the view wrote root/.git:\n%s", out)
	}
	if err := e.s.CheckGit(w); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.CreateView(workspace.UserScope, "v2", workspace.View{SourceScope: w.Scope, SourceName: w.Name, Subdir: ".git", Mode: workspace.ModeRW}); err == nil {
		t.Fatal("a view of root/.git was made")
	}
}

// TestGitRefusesAnAgentsRepository: a repository an agent made (in a
// workspace, in the home) or can write (under a read-write link) is
// refused before any git runs in it, so its planted filter and fsmonitor
// never run on the host.
func TestGitRefusesAnAgentsRepository(t *testing.T) {
	e, marker := attackEnv(t)
	lab, err := e.s.Create(workspace.Workspace{Scope: workspace.UserScope, Name: "lab"})
	if err != nil {
		t.Fatal(err)
	}
	out, code := e.sh(t, lab, `git init -q app && cd app && echo '* filter=x' > .gitattributes && echo data > f && `+
		`git config filter.x.clean "touch `+marker+`; cat" && git config core.fsmonitor "touch `+marker+`" && git add -A && `+
		`git -c user.name=a -c user.email=a@b commit -qm x && echo dirty >> f`)
	if code != 0 {
		t.Fatalf("the agent's repository: %s", out)
	}
	shared := filepath.Join(e.host, "shared")
	os.Mkdir(shared, 0o755)
	execGit(shared, "init", "-q").Run()
	if _, err := e.s.Link(workspace.UserScope, "lab", workspace.Link{HostPath: shared, MountPath: "/shared", Mode: workspace.ModeRW}); err != nil {
		t.Fatal(err)
	}
	for _, repo := range []string{filepath.Join(e.l.WorkspaceRoot(lab.Scope, lab.Name), "app"), shared} {
		err := e.s.CheckRepo(repo)
		wantErr(t, err, workspace.ErrEscape, "an agent")
	}
	if err := e.s.CheckRepo(e.repo); err != nil {
		t.Fatalf("the user's own repository: %v", err)
	}
	if _, err := os.Lstat(marker); err == nil {
		t.Fatal("the agent's filter ran on the host")
	}
}

// TestGitBranchNames: a branch name that already means something in the
// repository (a tag, a remote-tracking branch, a commit) is refused, so
// that no agent's branch shadows what the user's names mean.
func TestGitBranchNames(t *testing.T) {
	e, _ := attackEnv(t)
	git(t, e.repo, "tag", "v1")
	git(t, e.repo, "update-ref", "refs/remotes/origin/main", "HEAD")
	for _, b := range []string{"v1", "origin/main", "main", "HEAD", e.base[:10], "refs/heads/x", "-x"} {
		if _, _, err := e.s.Git().Prepare("w", e.repo, b, ""); err == nil {
			t.Errorf("branch %q was accepted", b)
		}
	}
	if _, _, err := e.s.Git().Prepare("w", e.repo, "substrat/ok", ""); err != nil {
		t.Errorf("substrat/ok: %v", err)
	}
}
