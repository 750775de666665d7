// Package gitwt runs the git commands of workspaces that are git
// worktrees: it finds a repository, checks branch names, adds, repairs and
// removes worktrees, and tells what a worktree's branch changed since its
// base. Every command is the real git, run with a clean environment (no
// user hooks or pager) and a time limit.
package gitwt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ErrNoGit is returned when git is not installed.
var ErrNoGit = errors.New("git is not installed (on Debian: apt-get install git)")

// timeout bounds one git command.
const timeout = 2 * time.Minute

// run runs git with args in dir and returns its stdout; an error carries
// git's own message.
func run(dir string, args ...string) (string, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return "", ErrNoGit
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_PAGER=cat", "LC_ALL=C")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		return out.String(), fmt.Errorf("git %s: %s", args[0], msg)
	}
	return out.String(), nil
}

// Repo is a repository worktrees are made of.
type Repo struct {
	// Top is its main working tree, CommonDir its .git directory (both
	// real paths).
	Top       string `json:"top"`
	CommonDir string `json:"common_dir"`
}

// Open finds the repository at path (its main working tree, or any
// worktree of it: then the main repository is the one used).
func Open(path string) (Repo, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Repo{}, err
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return Repo{}, fmt.Errorf("%s is not a directory", path)
	}
	common, err := run(abs, "rev-parse", "--path-format=absolute", "--git-common-dir")
	if err != nil {
		if errors.Is(err, ErrNoGit) {
			return Repo{}, err
		}
		return Repo{}, fmt.Errorf("%s is not a git repository (%v)", path, err)
	}
	common, err = filepath.EvalSymlinks(strings.TrimSpace(common))
	if err != nil {
		return Repo{}, err
	}
	if filepath.Base(common) != ".git" {
		return Repo{}, fmt.Errorf("%s: a bare repository (%s) has no working tree to branch from; use a clone", path, common)
	}
	return Repo{Top: filepath.Dir(common), CommonDir: common}, nil
}

// Head returns the commit HEAD of dir points at.
func Head(dir string) (string, error) {
	out, err := run(dir, "rev-parse", "--verify", "HEAD^{commit}")
	return strings.TrimSpace(out), err
}

// Resolve returns the commit ref names in r.
func (r Repo) Resolve(ref string) (string, error) {
	out, err := run(r.Top, "rev-parse", "--verify", "--end-of-options", ref+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("%q is not a commit of %s: %v", ref, r.Top, err)
	}
	return strings.TrimSpace(out), nil
}

// CheckBranch checks name as a branch name (git check-ref-format) that
// does not exist yet in r.
func (r Repo) CheckBranch(name string) error {
	if name == "" || strings.HasPrefix(name, "-") {
		return fmt.Errorf("branch name %q is not valid", name)
	}
	if _, err := run(r.Top, "check-ref-format", "--branch", name); err != nil {
		return fmt.Errorf("branch name %q is not valid (git check-ref-format)", name)
	}
	if _, err := run(r.Top, "rev-parse", "--verify", "--quiet", "refs/heads/"+name); err == nil {
		return fmt.Errorf("branch %s already exists in %s; name another with --branch", name, r.Top)
	}
	return nil
}

// Dirty returns the paths git status shows in dir (changed, staged or
// untracked), and whether HEAD there is on a commit.
func Dirty(dir string) ([]string, error) {
	out, err := run(dir, "status", "--porcelain", "--untracked-files=all")
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if len(l) > 3 {
			paths = append(paths, l[3:])
		}
	}
	return paths, nil
}

// Add makes a new worktree of r at dir on a new branch from base.
func (r Repo) Add(dir, branch, base string) error {
	_, err := run(r.Top, "worktree", "add", "-b", branch, "--end-of-options", dir, base)
	return err
}

// Repair makes r's record of the worktree at dir point at dir again (after
// the worktree was moved into place).
func (r Repo) Repair(dir string) error {
	_, err := run(r.Top, "worktree", "repair", dir)
	return err
}

// Remove removes the worktree at dir (with force, even with changes), then
// prunes r's records of worktrees that are gone.
func (r Repo) Remove(dir string, force bool) error {
	args := []string{"worktree", "remove"}
	if force {
		args = append(args, "--force", "--force")
	}
	if _, err := run(r.Top, append(args, dir)...); err != nil && !strings.Contains(err.Error(), "is not a working tree") {
		return err
	}
	return r.Prune()
}

// Prune forgets worktrees whose directories are gone.
func (r Repo) Prune() error {
	_, err := run(r.Top, "worktree", "prune")
	return err
}

// DeleteBranch deletes branch; unless force, only if it is merged into
// r's HEAD.
func (r Repo) DeleteBranch(branch string, force bool) error {
	flag := "-d"
	if force {
		flag = "-D"
	}
	_, err := run(r.Top, "branch", flag, "--", branch)
	return err
}

// BranchAt reports whether branch exists and points at commit.
func (r Repo) BranchAt(branch, commit string) bool {
	out, err := run(r.Top, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch)
	return err == nil && strings.TrimSpace(out) == commit
}

// Unmerged returns the commits of branch that r's HEAD does not have.
func (r Repo) Unmerged(branch string) ([]string, error) {
	out, err := run(r.Top, "rev-list", "--oneline", "HEAD.."+branch, "--")
	if err != nil || strings.TrimSpace(out) == "" {
		return nil, err
	}
	return strings.Split(strings.TrimSpace(out), "\n"), nil
}

// Diff returns what the worktree at dir changed since base, committed and
// not (untracked files listed at the end); with stat, a summary.
func Diff(dir, base string, stat bool) (string, error) {
	args := []string{"diff", "--no-color", "--no-ext-diff"}
	if stat {
		args = append(args, "--stat")
	}
	out, err := run(dir, append(args, base, "--")...)
	if err != nil {
		return "", err
	}
	untracked, err := run(dir, "ls-files", "--others", "--exclude-standard")
	if err != nil {
		return "", err
	}
	if u := strings.TrimSpace(untracked); u != "" {
		out += "untracked files:\n  " + strings.ReplaceAll(u, "\n", "\n  ") + "\n"
	}
	if strings.TrimSpace(out) == "" {
		return "no changes since " + short(base) + "\n", nil
	}
	return out, nil
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
