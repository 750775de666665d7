package gitws

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/substrat/substrat/supervisor/workspace"
)

// ErrNoGit is returned when git is not installed.
var ErrNoGit = workspace.ErrNoGit

// timeout bounds one git command.
const timeout = 2 * time.Minute

// hardening are the options every git command of this package starts
// with, on the host and in a sandbox: no pager, no hooks, no fsmonitor,
// no external diff or textconv, no replace objects, and no protocol but
// local files.
var hardening = []string{
	"--no-pager",
	"-c", "core.hooksPath=/dev/null",
	"-c", "core.fsmonitor=false",
	"-c", "core.pager=cat",
	"-c", "core.editor=false",
	"-c", "core.sshCommand=false",
	"-c", "core.askPass=false",
	"-c", "credential.helper=",
	"-c", "diff.external=",
	"-c", "protocol.allow=never",
	"-c", "protocol.file.allow=always",
	"-c", "gc.auto=0",
	"-c", "maintenance.auto=false",
}

// hardEnv is the environment of every git command of this package: no
// system or global configuration, no terminal prompt, no optional locks,
// no replace objects, and a HOME of nothing.
var hardEnv = []string{
	"GIT_CONFIG_NOSYSTEM=1",
	"GIT_CONFIG_GLOBAL=/dev/null",
	"GIT_TERMINAL_PROMPT=0",
	"GIT_OPTIONAL_LOCKS=0",
	"GIT_NO_REPLACE_OBJECTS=1",
	"GIT_PAGER=cat",
	"LC_ALL=C",
	"HOME=/nonexistent",
}

// repo is a user's repository as the daemon's records name it: its .git
// directory and, where a command needs one, its main working tree. Every
// command runs with GIT_DIR (and GIT_WORK_TREE) set from these, never from
// what git would discover.
type repo struct {
	dir  string // the .git directory
	top  string // the main working tree, or "" for commands that need none
	path string // git's executable
}

// hostEnv is the environment of a host git command: the hardened one, and
// PATH (git's helpers) but nothing else of the daemon's.
func (r repo) hostEnv() []string {
	env := append([]string{"PATH=" + os.Getenv("PATH")}, hardEnv...)
	if r.dir != "" {
		env = append(env, "GIT_DIR="+r.dir)
	}
	if r.top != "" {
		env = append(env, "GIT_WORK_TREE="+r.top)
	}
	return env
}

// run runs git args against r on the host and returns its stdout; an error
// carries git's own message.
func (r repo) run(args ...string) (string, error) {
	return r.runIn(nil, args...)
}

// runIn is run with stdin.
func (r repo) runIn(stdin io.Reader, args ...string) (string, error) {
	if r.path == "" {
		return "", ErrNoGit
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.path, append(append([]string(nil), hardening...), args...)...)
	cmd.Env = r.hostEnv()
	cmd.Dir = r.top
	if cmd.Dir == "" {
		cmd.Dir = r.dir
	}
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), gitErr(args[0], errb.String(), err)
	}
	return out.String(), nil
}

func gitErr(sub, stderr string, err error) error {
	msg := strings.TrimSpace(stderr)
	if msg == "" {
		msg = err.Error()
	}
	return fmt.Errorf("git %s: %s", sub, msg)
}

// openRepo finds the repository at path (its main working tree, a
// subdirectory, or a linked worktree of it: then the main repository is
// the one used). It asks git only where the user pointed, with the
// hardened options, and checks what it finds: a .git directory (not a
// bare repository, not one that sends git elsewhere).
func openRepo(gitPath, path string) (repo, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return repo{}, err
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return repo{}, fmt.Errorf("%s is not a directory", path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, gitPath, append(append([]string(nil), hardening...),
		"rev-parse", "--path-format=absolute", "--git-common-dir")...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, hardEnv...)
	cmd.Dir = abs
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return repo{}, fmt.Errorf("%s is not a git repository (%v)", path, gitErr("rev-parse", errb.String(), err))
	}
	common, err := filepath.EvalSymlinks(strings.TrimSpace(out.String()))
	if err != nil {
		return repo{}, err
	}
	if filepath.Base(common) != ".git" {
		return repo{}, fmt.Errorf("%s: a bare repository (%s) has no working tree to branch from; use a clone", path, common)
	}
	r := repo{dir: common, top: filepath.Dir(common), path: gitPath}
	return r, r.check()
}

// check makes sure r's .git is what git would use by itself too: a
// directory with a HEAD, and no commondir or gitdir file that would send
// git to another directory's configuration.
func (r repo) check() error {
	if fi, err := os.Lstat(r.dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", r.dir)
	}
	if fi, err := os.Lstat(filepath.Join(r.dir, "HEAD")); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%s has no HEAD: not a git directory", r.dir)
	}
	for _, f := range []string{"commondir", "gitdir"} {
		if _, err := os.Lstat(filepath.Join(r.dir, f)); err == nil {
			return fmt.Errorf("%s holds a %s file, which sends git to another directory; remove it", r.dir, f)
		}
	}
	return nil
}

// resolve returns the commit rev names in r.
func (r repo) resolve(rev string) (string, error) {
	out, err := r.run("rev-parse", "--verify", "--end-of-options", rev+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("%q is not a commit of %s: %v", rev, r.top, err)
	}
	return strings.TrimSpace(out), nil
}

// branchAt returns the commit branch points at, or "" if it does not
// exist.
func (r repo) branchAt(branch string) string {
	out, err := r.run("rev-parse", "--verify", "--quiet", "refs/heads/"+branch)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// checkBranch checks name as a branch name (git check-ref-format) that
// does not exist yet in r.
func (r repo) checkBranch(name string) error {
	if name == "" || strings.HasPrefix(name, "-") {
		return fmt.Errorf("branch name %q is not valid", name)
	}
	if _, err := r.run("check-ref-format", "--branch", name); err != nil {
		return fmt.Errorf("branch name %q is not valid (git check-ref-format)", name)
	}
	if r.branchAt(name) != "" {
		return fmt.Errorf("branch %s already exists in %s; name another with --branch", name, r.top)
	}
	// A name that already means something (a tag, a remote-tracking
	// branch, a commit, HEAD) would be shadowed by the new branch, or
	// shadow it: git resolves refs/heads first, so the user's "origin/main"
	// would name the agent's commits.
	if strings.HasPrefix(name, "refs/") || hexName.MatchString(name) {
		return fmt.Errorf("branch name %q could be taken for a ref or a commit; name another", name)
	}
	if _, err := r.run("rev-parse", "--verify", "--quiet", "--end-of-options", name); err == nil {
		return fmt.Errorf("%q already names something in %s (a tag, a remote-tracking branch or a commit); name another branch", name, r.top)
	}
	return nil
}

// hexName is a name git could take for an abbreviated commit id.
var hexName = regexp.MustCompile(`^[0-9a-fA-F]{4,64}$`)

// has reports whether r has commit.
func (r repo) has(commit string) bool {
	_, err := r.run("cat-file", "-e", commit+"^{commit}")
	return err == nil
}

// isAncestor reports whether a is an ancestor of b (or b itself).
func (r repo) isAncestor(a, b string) bool {
	_, err := r.run("merge-base", "--is-ancestor", a, b)
	return err == nil
}

// updateBranch moves branch from old ("" if it must not exist) to commit.
func (r repo) updateBranch(branch, commit, old, why string) error {
	_, err := r.run("update-ref", "-m", why, "refs/heads/"+branch, commit, old)
	return err
}

// deleteBranch deletes branch; with old, only if it still points there.
func (r repo) deleteBranch(branch, old string) error {
	args := []string{"update-ref", "-d", "refs/heads/" + branch}
	if old != "" {
		args = append(args, old)
	}
	_, err := r.run(args...)
	return err
}

// status returns the paths git status shows in r's working tree.
func (r repo) status() ([]string, error) {
	out, err := r.run("status", "--porcelain", "--untracked-files=all")
	if err != nil {
		return nil, err
	}
	return porcelainPaths(out), nil
}

func porcelainPaths(out string) []string {
	var paths []string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if len(l) > 3 {
			paths = append(paths, l[3:])
		}
	}
	return paths
}

// unmerged returns the commits of branch that r's HEAD does not have.
func (r repo) unmerged(branch string) ([]string, error) {
	out, err := r.run("rev-list", "--oneline", "HEAD..refs/heads/"+branch, "--")
	if err != nil || strings.TrimSpace(out) == "" {
		return nil, err
	}
	return strings.Split(strings.TrimSpace(out), "\n"), nil
}

// importPack adds the objects of the pack on stdin to r, each checked
// (index-pack --strict), and returns nothing else of the pack.
func (r repo) importPack(pack io.Reader) error {
	_, err := r.runIn(pack, "index-pack", "--stdin", "--fix-thin", "--strict")
	return err
}
