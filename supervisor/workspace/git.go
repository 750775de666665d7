package workspace

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/workspace/gitwt"
)

// Git workspaces.
//
// A workspace whose root/ is a git worktree is made like any other, under
// .tmp-<name>, with one more file, git-creating: its Git record, written
// (and fsynced) before git makes the worktree and the branch. The worktree
// is added at .tmp-<name>/root, workspace.json is written, the directory
// is renamed into place, `git worktree repair` points the repository's
// record at the new path, and git-creating is removed. A crash leaves
// either a .tmp- directory with git-creating, which Sweep undoes (the
// worktree removed and pruned, the branch deleted if it has no commit of
// its own), or a workspace still holding git-creating, which Sweep
// finishes (repair, remove the marker).

// gitMarker is the file of a git workspace being made.
const gitMarker = "git-creating"

// gitFault is a seam for the crash tests: called at each step of making a
// git workspace ("marker", "added", "written", "renamed").
var gitFault = func(step string) {}

func (g *Git) repo() gitwt.Repo { return gitwt.Repo{Top: g.Repo, CommonDir: g.CommonDir} }

// buildGit fills the temporary directory of a new git workspace.
func (s *Store) buildGit(dir string, g *Git, data []byte) error {
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
	if err := g.repo().Add(filepath.Join(dir, fsstore.WorkspaceRootName), g.Branch, g.Base); err != nil {
		return err
	}
	gitFault("added")
	if err := fsstore.ReplaceFile(s.fs, filepath.Join(dir, fsstore.WorkspaceFileName), data); err != nil {
		return err
	}
	gitFault("written")
	return nil
}

// finishGit points the repository at the worktree in its place, then
// removes the marker.
func (s *Store) finishGit(dir string, g *Git) error {
	if err := g.repo().Repair(filepath.Join(dir, fsstore.WorkspaceRootName)); err != nil {
		return err
	}
	if err := s.fs.Remove(filepath.Join(dir, gitMarker)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return s.fs.SyncDir(dir)
}

// undoGit takes back a git workspace that was not finished in dir: its
// worktree, the repository's record of it, and its branch if no commit
// was made on it.
func (s *Store) undoGit(dir string) error {
	data, err := fsstore.ReadRegular(filepath.Join(dir, gitMarker), fsstore.MaxJSONSize)
	if err != nil {
		return nil // made no worktree
	}
	var g Git
	if err := json.Unmarshal(data, &g); err != nil {
		return fmt.Errorf("%s: %v", filepath.Join(dir, gitMarker), err)
	}
	repo := g.repo()
	var errs []error
	if err := repo.Remove(filepath.Join(dir, fsstore.WorkspaceRootName), true); err != nil {
		errs = append(errs, err)
	}
	if repo.BranchAt(g.Branch, g.Base) {
		errs = append(errs, repo.DeleteBranch(g.Branch, true))
	}
	return errors.Join(errs...)
}

// DeleteOptions say how far Delete may go with a git workspace.
type DeleteOptions struct {
	// Force deletes a worktree with uncommitted changes or commits its
	// repository's HEAD does not have.
	Force bool
	// DeleteBranch deletes the branch too (kept by default).
	DeleteBranch bool
}

// removeGit removes w's worktree before its directory goes: it refuses,
// naming the files or commits, when there is work that would be lost,
// unless opts.Force.
func (s *Store) removeGit(w *Workspace, opts DeleteOptions) error {
	g := w.Git
	root := s.layout.WorkspaceRoot(w.Scope, w.Name)
	repo := g.repo()
	if !opts.Force {
		if dirty, err := gitwt.Dirty(root); err == nil && len(dirty) > 0 {
			return fmt.Errorf("%w: workspace %s has uncommitted changes: %s (commit them, or delete with --force)",
				ErrInUse, w.Ref(), strings.Join(dirty, ", "))
		}
		if opts.DeleteBranch {
			if commits, err := repo.Unmerged(g.Branch); err == nil && len(commits) > 0 {
				return fmt.Errorf("%w: branch %s of workspace %s has commits %s's HEAD does not: %s (merge them, or delete with --force)",
					ErrInUse, g.Branch, w.Ref(), g.Repo, strings.Join(commits, "; "))
			}
		}
	}
	if err := repo.Remove(root, true); err != nil {
		return err
	}
	if opts.DeleteBranch {
		return repo.DeleteBranch(g.Branch, true)
	}
	return nil
}

// GitProblems reports git workspaces whose worktree or repository is gone
// (for fsck and the daemon's start).
func (s *Store) GitProblems() []string {
	all, _ := s.List()
	var out []string
	for _, w := range all {
		g := w.Git
		if g == nil {
			continue
		}
		root := s.layout.WorkspaceRoot(w.Scope, w.Name)
		switch {
		case !isGitDir(g.CommonDir):
			out = append(out, fmt.Sprintf("workspace %s: its repository %s is gone or moved", w.Ref(), g.Repo))
		case !exists(filepath.Join(root, ".git")):
			out = append(out, fmt.Sprintf("workspace %s: its worktree %s is gone (delete the workspace)", w.Ref(), root))
		}
	}
	return out
}

func isGitDir(p string) bool { return exists(filepath.Join(p, "HEAD")) }

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
