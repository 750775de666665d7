package gitws

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/bwrap/launch"
	"github.com/substrat/substrat/supervisor/workspace"
)

// Limits on what git in a sandbox may hand the daemon.
const (
	// maxPack bounds the objects one publish copies into a repository.
	maxPack = 1 << 30
	// maxOutput bounds any other output (a diff, a status, a commit id):
	// past it the output is cut and says so.
	maxOutput = 4 << 20
)

// ErrTooLarge: git in a sandbox wrote more than the daemon takes.
var ErrTooLarge = errors.New("more output than the daemon takes")

var commitID = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

// sandboxed runs git in a read-only copy of w's sandbox: the clone, its
// git directory and the repository all read-only, no network, the
// hardened options and environment. Whatever the clone's own files make
// git do, it does there, as the agent could itself. stdout takes git's
// output, up to limit bytes (then ErrTooLarge).
func (d *Runner) sandboxed(w *workspace.Workspace, stdout io.Writer, limit int64, stdin io.Reader, args ...string) error {
	spec, err := w.ReadOnlySpec(d.layout)
	if err != nil {
		return err
	}
	spec.Network = false
	spec.Env = map[string]string{"GIT_DIR": workspace.GitDirTarget, "GIT_WORK_TREE": bwrap.DefaultWorkdir}
	for _, kv := range hardEnv {
		k, v, _ := strings.Cut(kv, "=")
		spec.Env[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd, err := launch.Command(ctx, spec, append(append([]string{"git"}, hardening...), args...))
	if err != nil {
		return err
	}
	lw := &limitWriter{w: stdout, n: limit}
	var errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, lw, &limitWriter{w: &errb, n: 64 << 10}
	err = cmd.Start()
	launch.CloseFiles(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	switch {
	case lw.over:
		return fmt.Errorf("git %s in workspace %s: %w (%d bytes)", args[0], w.Ref(), ErrTooLarge, limit)
	case err != nil:
		return fmt.Errorf("in workspace %s: %w", w.Ref(), gitErr(args[0], errb.String(), err))
	}
	return nil
}

// output is sandboxed with its output returned, cut at maxOutput.
func (d *Runner) output(w *workspace.Workspace, args ...string) (string, error) {
	var b bytes.Buffer
	err := d.sandboxed(w, &b, maxOutput, nil, args...)
	if errors.Is(err, ErrTooLarge) {
		return b.String() + fmt.Sprintf("\n[cut: more than %d bytes]\n", maxOutput), nil
	}
	return b.String(), err
}

// commit asks w's clone which commit rev names; the answer is checked for
// form only (it is what the agent says).
func (d *Runner) commit(w *workspace.Workspace, rev string) (string, error) {
	out, err := d.output(w, "rev-parse", "--verify", "--end-of-options", rev+"^{commit}")
	if err != nil {
		return "", err
	}
	c := strings.TrimSpace(out)
	if !commitID.MatchString(c) {
		return "", fmt.Errorf("workspace %s: git rev-parse %s gave %q, not a commit id", w.Ref(), rev, c)
	}
	return c, nil
}

// export copies the objects of commit (and what it reaches beyond base)
// from w's clone into its repository: git pack-objects in the sandbox
// writes a pack, and git index-pack --strict on the host checks every
// object as it adds it. A commit the repository has already is left as
// it is.
func (d *Runner) export(w *workspace.Workspace, r repo, commit string) error {
	if r.has(commit) {
		return nil
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := r.importPack(pr)
		pr.CloseWithError(err)
		done <- err
	}()
	revs := strings.NewReader(commit + "\n^" + w.Git.Base + "\n")
	err := d.sandboxed(w, pw, maxPack, revs, "pack-objects", "--revs", "--stdout", "--quiet")
	pw.CloseWithError(err)
	ierr := <-done
	if err != nil {
		return fmt.Errorf("copy the commits of workspace %s: %w", w.Ref(), err)
	}
	if ierr != nil {
		return fmt.Errorf("copy the commits of workspace %s into %s: %w", w.Ref(), w.Git.Repo, ierr)
	}
	if !r.has(commit) {
		return fmt.Errorf("workspace %s: commit %s is not in %s after the copy", w.Ref(), commit, w.Git.Repo)
	}
	return nil
}

// limitWriter passes on at most n bytes, and remembers that there were
// more.
type limitWriter struct {
	w    io.Writer
	n    int64
	over bool
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		l.over = true
		l.w.Write(p[:l.n])
		l.n = 0
		return 0, ErrTooLarge
	}
	l.n -= int64(len(p))
	return l.w.Write(p)
}
