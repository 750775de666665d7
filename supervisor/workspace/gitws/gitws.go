// Package gitws runs git for git workspaces, so that nothing an agent
// writes is ever trusted by git on the host.
//
// A git workspace is a clone of the user's repository in the Substrat
// home (see package workspace): the agent commits in the clone, inside
// its sandbox, where the user's repository is read-only. This package is
// the daemon's workspace.GitRunner, and it keeps two rules:
//
//   - Git on the host touches only the user's repository, with the
//     directories the daemon recorded (GIT_DIR, GIT_WORK_TREE), never
//     what git would discover, with system and global configuration off,
//     no hooks, no fsmonitor, no pager, no external diff or textconv, no
//     protocol but local files (see hardening and hardEnv), and only
//     after checking that the repository's .git is still a plain git
//     directory.
//   - Git that reads the clone (its refs, its index, its work tree, its
//     config) runs inside the workspace's own sandbox, read-only and
//     without network: whatever the agent made git do there, it could do
//     itself. What comes out is data: a commit id checked for form, a
//     pack whose every object git index-pack --strict checks on the host
//     as it copies it into the repository, or text (a diff) with a size
//     cap.
//
// Publish moves only the workspace's own branch, and only forward, or
// back to history the daemon itself published before.
package gitws

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/workspace"
)

// publishedName is the file beside a git workspace's root/ that holds the
// commit its branch was last published at.
const publishedName = "git-published"

// Runner is the daemon's workspace.GitRunner for the home that layout
// names.
type Runner struct {
	layout fsstore.Layout
	git    string // the git executable, or "" when there is none
}

// New returns the runner of a home. Without git installed its methods
// fail with ErrNoGit.
func New(layout fsstore.Layout) *Runner {
	p, _ := exec.LookPath("git")
	return &Runner{layout: layout, git: p}
}

var _ workspace.GitRunner = (*Runner)(nil)

// repoOf is the repository g names, checked.
func (d *Runner) repoOf(g *workspace.Git) (repo, error) {
	if d.git == "" {
		return repo{}, ErrNoGit
	}
	r := repo{dir: g.CommonDir, top: g.Repo, path: d.git}
	return r, r.check()
}

// Prepare implements workspace.GitRunner.
func (d *Runner) Prepare(name, repoPath, branch, base string) (*workspace.Git, string, error) {
	if d.git == "" {
		return nil, "", ErrNoGit
	}
	r, err := openRepo(d.git, repoPath)
	if err != nil {
		return nil, "", err
	}
	if branch == "" {
		branch = "substrat/" + name
	}
	if err := r.checkBranch(branch); err != nil {
		return nil, "", fmt.Errorf("%w: %v", workspace.ErrExists, err)
	}
	note := ""
	if base == "" {
		base = "HEAD"
		if dirty, err := r.status(); err == nil && len(dirty) > 0 {
			note = fmt.Sprintf("%s has %d uncommitted change(s); the workspace starts at its last commit (HEAD) without them", r.top, len(dirty))
		}
	}
	commit, err := r.resolve(base)
	if err != nil {
		return nil, "", err
	}
	return &workspace.Git{Repo: r.top, CommonDir: r.dir, Branch: branch, Base: commit}, note, nil
}

// Clone implements workspace.GitRunner: the branch in the repository, a
// clone sharing its objects (git clone --shared, no checkout, no
// templates), the clone's config written anew by the daemon, empty
// hooks/ and info/, root/.git an empty directory, and the checkout, all
// on the host, before any agent can reach dir.
func (d *Runner) Clone(g *workspace.Git, dir string) error {
	r, err := d.repoOf(g)
	if err != nil {
		return err
	}
	if err := r.updateBranch(g.Branch, g.Base, "", "substrat: workspace branch"); err != nil {
		return err
	}
	gitDir := filepath.Join(dir, fsstore.WorkspaceGitName)
	root := filepath.Join(dir, fsstore.WorkspaceRootName)
	clone := repo{path: d.git}
	if _, err := clone.run("clone", "--quiet", "--shared", "--no-checkout", "--template=", "--separate-git-dir="+gitDir,
		"--branch", g.Branch, "--", g.CommonDir, root); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(gitDir, "config"), cloneConfig(g, filepath.Base(dir)), 0o644); err != nil {
		return err
	}
	for _, sub := range []string{"hooks", "info"} {
		if err := os.MkdirAll(filepath.Join(gitDir, sub), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(gitDir, "info", "exclude"), nil, 0o644); err != nil {
		return err
	}
	dotgit := filepath.Join(root, ".git")
	if err := os.Remove(dotgit); err != nil {
		return err
	}
	if err := workspace.MakeInert(dotgit); err != nil {
		return err
	}
	co := repo{dir: gitDir, top: root, path: d.git}
	_, err = co.run("checkout", "--quiet", "--force", g.Branch, "--")
	return err
}

// cloneConfig is the whole config of a clone: the remote origin (the
// repository's .git, read-only in the sandbox) and who commits.
func cloneConfig(g *workspace.Git, name string) []byte {
	var b strings.Builder
	b.WriteString("# Written by the Substrat daemon; read-only in the sandbox.\n")
	b.WriteString("[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n")
	b.WriteString("[remote \"origin\"]\n\turl = " + quote(g.CommonDir) + "\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n")
	b.WriteString("[user]\n\tname = " + quote("Substrat agent ("+strings.TrimPrefix(name, fsstore.TempPrefix)+")") +
		"\n\temail = agent@substrat.invalid\n")
	return []byte(b.String())
}

// quote renders s as a git config value.
func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`)
	return `"` + r.Replace(s) + `"`
}

// Unclone implements workspace.GitRunner.
func (d *Runner) Unclone(g *workspace.Git) error {
	r, err := d.repoOf(g)
	if err != nil {
		return err
	}
	if r.branchAt(g.Branch) == g.Base {
		return r.deleteBranch(g.Branch, g.Base)
	}
	return nil
}

// Head implements workspace.GitRunner.
func (d *Runner) Head(w *workspace.Workspace) (string, error) {
	r, err := d.repoOf(w.Git)
	if err != nil {
		return "", err
	}
	c, err := d.commit(w, "HEAD")
	if err != nil {
		return "", err
	}
	return c, d.export(w, r, c)
}

// Publish implements workspace.GitRunner. The branch moves forward, or to
// where the clone's branch is now when the repository's still points
// where this workspace last published it (the agent rewrote its own
// history); anything else (someone committed on it in the repository)
// is refused.
func (d *Runner) Publish(w *workspace.Workspace) (string, error) {
	g := w.Git
	r, err := d.repoOf(g)
	if err != nil {
		return "", err
	}
	c, err := d.commit(w, "refs/heads/"+g.Branch)
	if err != nil {
		return "", err
	}
	if err := d.export(w, r, c); err != nil {
		return "", err
	}
	cur := r.branchAt(g.Branch)
	published := d.published(w)
	switch {
	case cur == c:
		return c, nil
	case cur == "", r.isAncestor(cur, c), cur == published:
	default:
		return "", fmt.Errorf("branch %s of %s is at %.12s, which workspace %s's branch does not contain (was it committed on in the repository?); "+
			"merge it into the workspace first", g.Branch, g.Repo, cur, w.Ref())
	}
	if err := r.updateBranch(g.Branch, c, cur, "substrat: publish workspace "+w.Ref()); err != nil {
		return "", err
	}
	return c, fsstore.ReplaceFile(fsstore.OS{}, d.publishedFile(w), []byte(c+"\n"))
}

func (d *Runner) publishedFile(w *workspace.Workspace) string {
	return filepath.Join(d.layout.WorkspaceDir(w.Scope, w.Name), publishedName)
}

// published is the commit w's branch was last published at, or "".
func (d *Runner) published(w *workspace.Workspace) string {
	data, err := os.ReadFile(d.publishedFile(w))
	if err != nil {
		return ""
	}
	if c := strings.TrimSpace(string(data)); commitID.MatchString(c) {
		return c
	}
	return ""
}

// Dirty implements workspace.GitRunner.
func (d *Runner) Dirty(w *workspace.Workspace) ([]string, error) {
	out, err := d.output(w, "status", "--porcelain", "--untracked-files=all")
	if err != nil {
		return nil, err
	}
	return porcelainPaths(out), nil
}

// Unmerged implements workspace.GitRunner.
func (d *Runner) Unmerged(g *workspace.Git) ([]string, error) {
	r, err := d.repoOf(g)
	if err != nil {
		return nil, err
	}
	return r.unmerged(g.Branch)
}

// DeleteBranch implements workspace.GitRunner: git branch -D, which
// refuses the branch the repository has checked out.
func (d *Runner) DeleteBranch(g *workspace.Git) error {
	r, err := d.repoOf(g)
	if err != nil {
		return err
	}
	if r.branchAt(g.Branch) == "" {
		return nil
	}
	_, err = r.run("branch", "-D", "--", g.Branch)
	return err
}

// Diff implements workspace.GitRunner. It shows what Publish would
// publish (the branch's commits since the base) and, apart, what the
// checkout holds that is not committed: a change committed and then
// removed from the checkout still shows, since it is on the branch.
func (d *Runner) Diff(w *workspace.Workspace, stat bool) (string, error) {
	flags := []string{"diff", "--no-color", "--no-ext-diff", "--no-textconv"}
	if stat {
		flags = append(flags, "--stat")
	}
	branch := "refs/heads/" + w.Git.Branch
	committed, err := d.output(w, append(flags, w.Git.Base, branch, "--")...)
	if err != nil {
		return "", err
	}
	uncommitted, err := d.output(w, append(flags, "HEAD", "--")...)
	if err != nil {
		return "", err
	}
	untracked, err := d.output(w, "ls-files", "--others", "--exclude-standard")
	if err != nil {
		return "", err
	}
	if u := strings.TrimSpace(untracked); u != "" {
		uncommitted += "untracked files:\n  " + strings.ReplaceAll(u, "\n", "\n  ") + "\n"
	}
	var b strings.Builder
	if strings.TrimSpace(committed) == "" {
		fmt.Fprintf(&b, "no commits on %s since %.12s\n", w.Git.Branch, w.Git.Base)
	} else {
		fmt.Fprintf(&b, "committed on %s since %.12s (what is published):\n%s", w.Git.Branch, w.Git.Base, committed)
	}
	head, _ := d.output(w, "symbolic-ref", "--quiet", "HEAD")
	if h := strings.TrimSpace(head); h != branch {
		fmt.Fprintf(&b, "the checkout is not on %s (HEAD: %s); its commits are not published\n", w.Git.Branch, orDetached(h))
	}
	if strings.TrimSpace(uncommitted) != "" {
		fmt.Fprintf(&b, "not committed (in the checkout only):\n%s", uncommitted)
	}
	return b.String(), nil
}

func orDetached(ref string) string {
	if ref == "" {
		return "detached"
	}
	return ref
}
