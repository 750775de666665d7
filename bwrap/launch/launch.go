// Package launch runs processes with bubblewrap: a command or a shell
// inside a sandbox that package bwrap describes (Command, Shell, from a
// bwrap.Plan), or a process without a sandbox contained in a PID
// namespace of its own (Contain). Package bwrap works the sandbox out as
// data; this package is where it meets os/exec.
package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/substrat/substrat/bwrap"
)

// WaitDelay bounds how long Wait waits for the output pipes of a sandboxed
// process after its context is cancelled and its process group killed.
const WaitDelay = 2 * time.Second

// LookPath finds the bwrap executable in PATH. When there is none it
// returns an error wrapping bwrap.ErrNotInstalled whose message carries
// bwrap.InstallHint.
func LookPath() (string, error) {
	p, err := exec.LookPath("bwrap")
	if err != nil {
		return "", fmt.Errorf("%w (%v); %s", bwrap.ErrNotInstalled, err, bwrap.InstallHint)
	}
	return p, nil
}

// Command returns a command that runs cmd inside the sandbox s; the caller
// sets its standard streams and starts it. bwrap runs with the sandbox's
// environment (bwrap.Environ) and nothing else, which it hands on to cmd,
// in a process group of its own. Cancelling ctx kills the whole group
// with SIGKILL, and bwrap's death kills everything in the sandbox; Wait
// then returns within WaitDelay even if a pipe is still held open.
//
// Command opens the source of every bind now (bwrap.Open) and puts the
// descriptors in the command's ExtraFiles, where bwrap finds them
// (--bind-fd); bwrap closes its copies before it runs cmd. The caller
// closes the command's copies once it has started, or failed to start
// (CloseFiles); until then they hold what the sandbox will see.
//
// It fails with bwrap.ErrNotInstalled, bwrap.ErrInvalidSpec, or an error
// of bwrap.Open (ErrSymlink, ErrLeaves, a missing path), or when the root
// is not a directory.
func Command(ctx context.Context, s bwrap.Spec, cmd []string) (*exec.Cmd, error) {
	path, err := LookPath()
	if err != nil {
		return nil, err
	}
	p, err := bwrap.PlanCommand(path, s, cmd)
	if err != nil {
		return nil, err
	}
	return start(ctx, p)
}

// Open opens the source of every bind of p, in order, as bwrap finds
// them (--bind-fd 3, 4, ...); the first, the sandbox's root, must be a
// directory. The caller closes them once the process has started, or
// will not.
func Open(p bwrap.Plan) ([]*os.File, error) {
	files := make([]*os.File, 0, len(p.Binds))
	for _, m := range p.Binds {
		f, err := bwrap.Open(m.Source)
		if err != nil {
			closeAll(files)
			return nil, err
		}
		files = append(files, f)
	}
	if ok, err := bwrap.IsDir(files[0]); err != nil || !ok {
		closeAll(files)
		if err == nil {
			err = errors.New("not a directory")
		}
		return nil, fmt.Errorf("sandbox root %s: %w", p.Binds[0].Host, err)
	}
	return files, nil
}

// start returns the command of plan p, its binds opened.
func start(ctx context.Context, p bwrap.Plan) (*exec.Cmd, error) {
	files, err := Open(p)
	if err != nil {
		return nil, err
	}
	c := exec.CommandContext(ctx, p.Argv[0], p.Argv[1:]...)
	c.ExtraFiles = files
	c.Env = p.Env
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return killGroup(c.Process) }
	c.WaitDelay = WaitDelay
	return c, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// CloseFiles closes the descriptors a command of this package carries for
// bwrap (its ExtraFiles). Call it once the command has started, or will
// not be started; the running sandbox keeps what it bound.
func CloseFiles(c *exec.Cmd) {
	closeAll(c.ExtraFiles)
	c.ExtraFiles = nil
}

// killGroup sends SIGKILL to the process group led by p.
func killGroup(p *os.Process) error {
	err := syscall.Kill(-p.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}
