package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/substrat/substrat/fsstore"
)

// Git workspaces.
//
// A git workspace is a clone of the user's repository that lives wholly in
// the home: its git directory is git/, beside root/ (never inside it), and
// the sandbox binds it at /workspace/.git. The clone shares the
// repository's objects read-only (git clone --shared: its
// objects/info/alternates names the repository's objects directory, which
// the sandbox binds read-only with the rest of the repository's .git). So
// nothing an agent can write is ever read by git on the host: the user's
// repository is read-only in every sandbox, and the clone's own files are
// read only by git running inside the workspace's sandbox (GitRunner).
// The clone's config, hooks/ and info/ are bound read-only, and root/.git
// is an empty directory, the mount point of git/, so that git run by hand
// in root/ finds no repository.
//
// The workspace's branch exists twice: in the clone, where the agent
// commits, and in the user's repository, where the daemon publishes it
// (GitRunner.Publish) with its objects checked, and where the user and
// the parent agents' sandboxes (through the remote "origin") read it.
//
// It is made like any other workspace, under .tmp-<name>, with one more
// file, git-creating: its Git record, written (and fsynced) before the
// branch and the clone are made. A crash leaves either a .tmp- directory
// with git-creating, which Sweep undoes (the branch deleted if it is
// still at its base), or a workspace still holding git-creating, which
// Sweep finishes (removes the marker).

// gitMarker is the file of a git workspace being made.
const gitMarker = "git-creating"

// gitFault is a seam for the crash tests: called at each step of making a
// git workspace ("marker", "added", "written", "renamed").
var gitFault = func(step string) {}

// ErrNoGitRunner is returned for a git workspace when the store has no
// GitRunner (the simulation, or a tool run without the daemon).
var ErrNoGitRunner = errors.New("git workspaces need the daemon's git (no git runner here)")

// ErrNoGit is returned when git is not installed.
var ErrNoGit = errors.New("git is not installed (on Debian: apt-get install git)")

// GitRunner runs git for git workspaces. The daemon's (package
// workspace/gitws) runs the real git: hardened on the host, with its
// directories from the daemon's records, for the user's repository, and
// inside the workspace's sandbox for anything an agent could have
// written. The core itself never runs a process.
type GitRunner interface {
	// Prepare works out the Git record of a new workspace called name, of
	// the repository at repoPath (its main working tree or any
	// subdirectory), on branch (default substrat/<name>), from base
	// (default the repository's HEAD). note says what a user may not
	// expect.
	Prepare(name, repoPath, branch, base string) (g *Git, note string, err error)
	// Clone makes g.Branch at g.Base in the repository, and the clone in
	// dir (dir/git and dir/root, checked out).
	Clone(g *Git, dir string) error
	// Unclone takes back what Clone did to the repository: the branch,
	// if it is still at g.Base.
	Unclone(g *Git) error
	// Head returns the commit HEAD of w's clone points at, with its
	// objects copied into w's repository.
	Head(w *Workspace) (string, error)
	// Publish sets w's branch in its repository to the branch of its
	// clone, and returns the commit.
	Publish(w *Workspace) (string, error)
	// Dirty lists the paths w's clone has not committed.
	Dirty(w *Workspace) ([]string, error)
	// Unmerged lists the commits of g's branch that its repository's HEAD
	// does not have.
	Unmerged(g *Git) ([]string, error)
	// DeleteBranch deletes g's branch in its repository.
	DeleteBranch(g *Git) error
	// Diff returns what w's clone changed since g.Base, committed and not
	// (with stat, a summary).
	Diff(w *Workspace, stat bool) (string, error)
}

// buildGit fills the temporary directory of a new git workspace.
func (s *Store) buildGit(dir string, g *Git, data []byte) error {
	if s.git == nil {
		return ErrNoGitRunner
	}
	if err := s.fs.Mkdir(dir, dirPerm); err != nil {
		return err
	}
	marker, err := json.Marshal(g)
	if err != nil {
		return err
	}
	if err := fsstore.ReplaceFile(s.fs, filepath.Join(dir, gitMarker), marker); err != nil {
		return err
	}
	gitFault("marker")
	if err := s.git.Clone(g, dir); err != nil {
		return err
	}
	gitFault("added")
	if err := fsstore.ReplaceFile(s.fs, filepath.Join(dir, fsstore.WorkspaceFileName), data); err != nil {
		return err
	}
	gitFault("written")
	return nil
}

// finishGit removes the marker of a git workspace in its place.
func (s *Store) finishGit(dir string) error {
	if err := s.fs.Remove(filepath.Join(dir, gitMarker)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return s.fs.SyncDir(dir)
}

// undoGit takes back a git workspace that was not finished in dir: its
// branch, if no commit was published on it. The directory itself is the
// caller's to remove.
func (s *Store) undoGit(dir string) error {
	data, err := fsstore.ReadRegular(filepath.Join(dir, gitMarker), fsstore.MaxJSONSize)
	if err != nil {
		return nil // made nothing in the repository
	}
	var g Git
	if err := json.Unmarshal(data, &g); err != nil {
		return fmt.Errorf("%s: %v", filepath.Join(dir, gitMarker), err)
	}
	if s.git == nil {
		return ErrNoGitRunner
	}
	return s.git.Unclone(&g)
}

// DeleteOptions say how far Delete may go with a git workspace.
type DeleteOptions struct {
	// Force deletes a workspace with uncommitted changes or commits its
	// repository's HEAD does not have.
	Force bool
	// DeleteBranch deletes the branch in the repository too (kept by
	// default).
	DeleteBranch bool
}

// removeGit publishes w's branch and checks for work that would be lost
// before its directory goes: it refuses, naming the files or commits,
// unless opts.Force.
func (s *Store) removeGit(w *Workspace, opts DeleteOptions) error {
	if s.git == nil {
		return ErrNoGitRunner
	}
	g := w.Git
	if !opts.Force {
		dirty, err := s.git.Dirty(w)
		if err != nil {
			return fmt.Errorf("%w: workspace %s: cannot tell whether it has uncommitted changes (%v); delete with --force", ErrInUse, w.Ref(), err)
		}
		if len(dirty) > 0 {
			return fmt.Errorf("%w: workspace %s has uncommitted changes: %s (commit them, or delete with --force)",
				ErrInUse, w.Ref(), strings.Join(dirty, ", "))
		}
		if _, err := s.git.Publish(w); err != nil {
			return fmt.Errorf("%w: workspace %s: its branch could not be published (%v); delete with --force", ErrInUse, w.Ref(), err)
		}
		if opts.DeleteBranch {
			if commits, err := s.git.Unmerged(g); err == nil && len(commits) > 0 {
				return fmt.Errorf("%w: branch %s of workspace %s has commits %s's HEAD does not: %s (merge them, or delete with --force)",
					ErrInUse, g.Branch, w.Ref(), g.Repo, strings.Join(commits, "; "))
			}
		}
	}
	if opts.DeleteBranch {
		return s.git.DeleteBranch(g)
	}
	return nil
}

// checkGitLinkLocked refuses a read-write link that would show the git
// metadata of a git workspace (its git/, its root/.git, or a directory
// holding either) writable in some sandbox: git on the host would then
// find what an agent wrote there.
func (s *Store) checkGitLinkLocked(l Link) error {
	if l.Mode != ModeRW {
		return nil
	}
	all, _ := s.listLocked()
	for _, w := range all {
		if w.Git == nil {
			continue
		}
		for _, p := range []string{s.layout.WorkspaceGitDir(w.Scope, w.Name), filepath.Join(s.layout.WorkspaceRoot(w.Scope, w.Name), ".git")} {
			if within(p, l.HostPath) || within(l.HostPath, p) {
				return fmt.Errorf("%w: a read-write link of %s would show %s, the git metadata of workspace %s, writable; link a subdirectory, or read-only",
					ErrEscape, l.HostPath, p, w.Ref())
			}
		}
	}
	return nil
}

// CheckRepo refuses a repository at path that an agent can write: one in
// the Substrat home (a workspace's files, an agent's directory), or in a
// host directory some workspace links read-write. Its config and hooks
// would be an agent's, and git on the host would run them; only the
// user's own repository is trusted.
func (s *Store) CheckRepo(path string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil // the git runner says it is missing
	}
	if real, err = filepath.Abs(real); err != nil {
		return nil
	}
	home := s.layout.Home
	if r, err := filepath.EvalSymlinks(home); err == nil {
		home = r
	}
	if within(home, real) {
		return fmt.Errorf("%w: %s is in the Substrat home, where agents write: git on the host would run what an agent put in it; "+
			"use your own repository", ErrEscape, path)
	}
	all, _ := s.List()
	for _, w := range all {
		for _, l := range w.Links {
			if l.Mode == ModeRW && within(l.HostPath, real) {
				return fmt.Errorf("%w: %s is in %s, which workspace %s links read-write, so an agent can write it; "+
					"git on the host would run what it put there", ErrEscape, path, l.HostPath, w.Ref())
			}
		}
	}
	return nil
}

// GitProblems reports git workspaces whose repository is gone or whose
// clone is missing or was made by an older Substrat as a worktree of the
// repository (for fsck and the daemon's start).
func (s *Store) GitProblems() []string {
	all, _ := s.List()
	var out []string
	for _, w := range all {
		if w.Git == nil {
			continue
		}
		if err := s.CheckGit(w); err != nil {
			out = append(out, err.Error())
		}
	}
	return out
}

// CheckGit checks that the git files of w are what the daemon made: the
// repository's .git a directory with a HEAD (and not itself a linked
// worktree's), the clone's git/ a directory, and root/.git an empty
// directory (or absent). It looks by name, without following symlinks.
func (s *Store) CheckGit(w *Workspace) error {
	return checkGit(s.layout, w)
}

func checkGit(l fsstore.Layout, w *Workspace) error {
	g := w.Git
	if fi, err := os.Lstat(filepath.Join(g.CommonDir, "HEAD")); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("workspace %s: its repository %s is gone or moved", w.Ref(), g.Repo)
	}
	if fi, err := os.Lstat(g.CommonDir); err != nil || !fi.IsDir() {
		return fmt.Errorf("workspace %s: the repository's %s is not a directory", w.Ref(), g.CommonDir)
	}
	for _, f := range []string{"commondir", "gitdir"} {
		if _, err := os.Lstat(filepath.Join(g.CommonDir, f)); err == nil {
			return fmt.Errorf("workspace %s: %s holds a %s file, which would send git elsewhere; remove it", w.Ref(), g.CommonDir, f)
		}
	}
	root := l.WorkspaceRoot(w.Scope, w.Name)
	gitDir := l.WorkspaceGitDir(w.Scope, w.Name)
	if fi, err := os.Lstat(gitDir); err != nil || !fi.IsDir() {
		if fi, err := os.Lstat(filepath.Join(root, ".git")); err == nil && !fi.IsDir() {
			return fmt.Errorf("workspace %s was made by an older Substrat as a worktree whose git metadata its agents could write; "+
				"delete it (substrat workspace delete %s --force) and create it again", w.Ref(), w.Ref())
		}
		return fmt.Errorf("workspace %s: its clone %s is gone (delete the workspace)", w.Ref(), gitDir)
	}
	return checkInert(w, filepath.Join(root, ".git"))
}

// The inert root/.git. It is a bare repository with no commits, so that
// git run by hand in root/ stops there ("this operation must be run in a
// work tree") instead of looking further up, or taking root/ itself for
// a repository an agent made of it. In the sandbox the clone's git/
// covers it; no sandbox can write it (a view shows it read-only, and no
// read-write link may show it).
const (
	inertHEAD   = "ref: refs/heads/not-a-repository\n"
	inertConfig = "# Written by the Substrat daemon. Not the workspace's repository: run git in\n" +
		"# the sandbox (substrat workspace exec WS -- git ...), or in your own repository.\n" +
		"[core]\n\trepositoryformatversion = 0\n\tbare = true\n"
)

// MakeInert makes the inert .git directory at dir.
func MakeInert(dir string) error {
	for _, d := range []string{dir, filepath.Join(dir, "objects"), filepath.Join(dir, "refs")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "HEAD"), []byte(inertHEAD), 0o444); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config"), []byte(inertConfig), 0o444)
}

// checkInert checks that dotgit is the inert .git the daemon made, and
// nothing more.
func checkInert(w *Workspace, dotgit string) error {
	bad := func(why string) error {
		return fmt.Errorf("workspace %s: %s is not the inert .git the daemon made (%s); something replaced it: "+
			"remove it and run no git there by hand", w.Ref(), dotgit, why)
	}
	fi, err := os.Lstat(dotgit)
	if err != nil || !fi.IsDir() {
		return bad("not a directory")
	}
	entries, err := os.ReadDir(dotgit)
	if err != nil {
		return bad(err.Error())
	}
	want := map[string]string{"HEAD": inertHEAD, "config": inertConfig, "objects": "", "refs": ""}
	if len(entries) != len(want) {
		return bad(fmt.Sprintf("it holds %d entries", len(entries)))
	}
	for _, e := range entries {
		content, ok := want[e.Name()]
		switch {
		case !ok:
			return bad("it holds " + e.Name())
		case content == "":
			sub, err := os.ReadDir(filepath.Join(dotgit, e.Name()))
			if !e.IsDir() || err != nil || len(sub) > 0 {
				return bad(e.Name() + " is not an empty directory")
			}
		default:
			data, err := os.ReadFile(filepath.Join(dotgit, e.Name()))
			if !e.Type().IsRegular() || err != nil || string(data) != content {
				return bad(e.Name() + " was changed")
			}
		}
	}
	return nil
}
