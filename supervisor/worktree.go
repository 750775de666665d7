package supervisor

import (
	"context"

	"errors"
	"fmt"
	"strings"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"

	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/workspace"
)

// gitSpec works out the Git record of a new git workspace name: of the
// repository at repoPath, on branch (default substrat/<name>), from base
// (default the repository's HEAD). note says what a user may not expect
// (uncommitted changes of the repository are not in the clone).
func (c *Core) gitSpec(name, repoPath, branch, base string) (g *workspace.Git, note string, err error) {
	git := c.ws.Git()
	if git == nil {
		return nil, "", api.Errorf(api.CodeUnavailable, "%v", workspace.ErrNoGitRunner)
	}
	if err := c.ws.CheckRepo(repoPath); err != nil {
		return nil, "", invalidParams("%v", err)
	}
	g, note, err = git.Prepare(name, repoPath, branch, base)
	switch {
	case err == nil:
		return g, note, nil
	case errors.Is(err, workspace.ErrNoGit):
		return nil, "", api.Errorf(api.CodeUnavailable, "%v", err)
	case errors.Is(err, workspace.ErrExists):
		return nil, "", api.Errorf(api.CodeConflict, "%v", err)
	}
	return nil, "", invalidParams("%v", err)
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

// gitOf returns the git runner for w, a git workspace.
func (c *Core) gitOf(w *workspace.Workspace) (workspace.GitRunner, error) {
	if w.Git == nil {
		return nil, invalidParams("workspace %s is not a git workspace", w.Ref())
	}
	git := c.ws.Git()
	if git == nil {
		return nil, api.Errorf(api.CodeUnavailable, "%v", workspace.ErrNoGitRunner)
	}
	if err := c.ws.CheckGit(w); err != nil {
		return nil, api.Errorf(api.CodeConflict, "%v", err)
	}
	return git, nil
}

func (c *Core) diffOf(w *workspace.Workspace, stat bool) (string, error) {
	git, err := c.gitOf(w)
	if err != nil {
		return "", err
	}
	out, err := git.Diff(w, stat)
	if err != nil {
		return "", api.Errorf(api.CodeInternal, "%v", err)
	}
	return fmt.Sprintf("branch %s of %s, since %.12s:\n%s", w.Git.Branch, w.Git.Repo, w.Git.Base, out), nil
}

// WorkspacePublish sets the branch of git workspace ref in its repository
// to the clone's, and returns the commit.
func (c *Core) WorkspacePublish(ref string) (string, error) {
	w, err := c.getWorkspace(ref)
	if err != nil {
		return "", err
	}
	git, err := c.gitOf(w)
	if err != nil {
		return "", err
	}
	commit, err := git.Publish(w)
	if err != nil {
		return "", api.Errorf(api.CodeConflict, "%v", err)
	}
	return commit, nil
}

// publishBranch publishes the branch of agent s's git workspace, when a
// turn of it ends and before it reports its completion, so that its
// parent and the user see its commits; a failure is logged, and the next
// turn tries again.
func (c *Core) publishBranch(s *fsstore.Session) {
	if s.Workspace == "" || c.ws.Git() == nil {
		return
	}
	w, err := c.getWorkspace(s.Workspace)
	if err != nil || w.Git == nil {
		return
	}
	if _, err := c.WorkspacePublish(w.Ref()); err != nil {
		c.log.Warn("publishing a workspace's branch failed", "agent", s.ID, "workspace", w.Ref(), "err", err)
	}
}

// childWorktree makes (or, for a spawn run again, finds) the workspace of
// a child that works in a clone of its parent's repository: in the
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
		return "", fmt.Errorf("worktree: your workspace %s is not a git workspace", pw.Ref())
	}
	switch {
	case branch == "":
		branch = "substrat/" + child
	case !strings.HasPrefix(branch, "substrat/"):
		// An agent names branches in the user's repository only under
		// substrat/, where they cannot be taken for the user's.
		return "", fmt.Errorf("worktree: branch %q must start with substrat/", branch)
	}
	if w, err := t.c.ws.Get(t.n.id(), child); err == nil && w.Git != nil && w.Git.Branch == branch {
		return w.Ref(), nil // made by this spawn before a crash
	}
	git, err := t.c.gitOf(pw)
	if err != nil {
		return "", err
	}
	head, err := git.Head(pw)
	if err != nil {
		return "", fmt.Errorf("worktree: %v", err)
	}
	g, _, err := t.c.gitSpec(child, pw.Git.Repo, branch, head)
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
	Workspace string `json:"workspace" jsonschema:"a workspace of your scope (a child's) or your own"`
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
