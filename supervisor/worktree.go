package supervisor

import (
	"context"

	"errors"
	"fmt"

	"github.com/substrat/substrat/provider"

	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/workspace"
	"github.com/substrat/substrat/supervisor/workspace/gitwt"
)

// gitSpec works out the Git record of a new worktree workspace name: of
// the repository at repoPath, on branch (default substrat/<name>), from
// base (default the repository's HEAD). note says what a user may not
// expect (uncommitted changes of the repository are not in the worktree).
func gitSpec(name, repoPath, branch, base string) (g *workspace.Git, note string, err error) {
	repo, err := gitwt.Open(repoPath)
	if err != nil {
		if errors.Is(err, gitwt.ErrNoGit) {
			return nil, "", api.Errorf(api.CodeUnavailable, "%v", err)
		}
		return nil, "", invalidParams("%v", err)
	}
	if branch == "" {
		branch = "substrat/" + name
	}
	if err := repo.CheckBranch(branch); err != nil {
		return nil, "", api.Errorf(api.CodeConflict, "%v", err)
	}
	if base == "" {
		base = "HEAD"
		if dirty, err := gitwt.Dirty(repo.Top); err == nil && len(dirty) > 0 {
			note = fmt.Sprintf("%s has %d uncommitted change(s); the worktree starts at its last commit (HEAD) without them", repo.Top, len(dirty))
		}
	}
	commit, err := repo.Resolve(base)
	if err != nil {
		return nil, "", invalidParams("%v", err)
	}
	return &workspace.Git{Repo: repo.Top, CommonDir: repo.CommonDir, Branch: branch, Base: commit}, note, nil
}

// WorkspaceDiff returns what the branch of a git workspace changed since
// its base, committed and not (with stat, a summary).
func (c *Core) WorkspaceDiff(ref string, stat bool) (string, error) {
	w, err := c.getWorkspace(ref)
	if err != nil {
		return "", err
	}
	return c.diffOf(w, stat)
}

func (c *Core) diffOf(w *workspace.Workspace, stat bool) (string, error) {
	if w.Git == nil {
		return "", invalidParams("workspace %s is not a git worktree", w.Ref())
	}
	out, err := gitwt.Diff(c.store.Layout().WorkspaceRoot(w.Scope, w.Name), w.Git.Base, stat)
	if err != nil {
		return "", api.Errorf(api.CodeInternal, "%v", err)
	}
	return fmt.Sprintf("branch %s of %s, since %.12s:\n%s", w.Git.Branch, w.Git.Repo, w.Git.Base, out), nil
}

// childWorktree makes (or, for a spawn run again, finds) the workspace of
// a child that works in a worktree of its parent's repository: in the
// parent's scope, named after the child, on branch (default
// substrat/<child>), from the parent's current HEAD.
func (t *turnTools) childWorktree(child, branch string, network bool) (string, error) {
	parent := t.n.s()
	if parent.Workspace == "" {
		return "", fmt.Errorf("worktree: you are not in a git workspace")
	}
	pw, err := t.c.getWorkspace(parent.Workspace)
	if err != nil {
		return "", err
	}
	if pw.Git == nil {
		return "", fmt.Errorf("worktree: your workspace %s is not a git worktree", pw.Ref())
	}
	if branch == "" {
		branch = "substrat/" + child
	}
	if w, err := t.c.ws.Get(t.n.id(), child); err == nil && w.Git != nil && w.Git.Branch == branch {
		return w.Ref(), nil // made by this spawn before a crash
	}
	head, err := gitwt.Head(t.c.store.Layout().WorkspaceRoot(pw.Scope, pw.Name))
	if err != nil {
		return "", fmt.Errorf("worktree: %v", err)
	}
	g, _, err := gitSpec(child, pw.Git.Repo, branch, head)
	if err != nil {
		return "", err
	}
	w, err := t.c.ws.Create(workspace.Workspace{Scope: t.n.id(), Name: child, NetworkAccess: network && pw.NetworkAccess, Git: g})
	if err != nil {
		return "", workspaceErr(err)
	}
	return w.Ref(), nil
}

// workspaceDiffArgs are the arguments of workspace_diff.
type workspaceDiffArgs struct {
	Workspace string `json:"workspace" jsonschema:"a workspace of your scope (a child's worktree) or your own"`
	Stat      bool   `json:"stat,omitempty" jsonschema:"a summary (files and lines) instead of the whole diff"`
}

func (t *turnTools) workspaceDiff(ctx context.Context, call provider.ToolCall, a workspaceDiffArgs) (string, error) {
	ref, err := t.c.resolveAgentWorkspace(t.n, a.Workspace)
	if err != nil {
		return "", err
	}
	w, err := t.c.getWorkspace(ref)
	if err != nil {
		return "", err
	}
	return t.c.diffOf(w, a.Stat)
}
