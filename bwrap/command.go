package bwrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// InstallHint is the fix for ErrNotInstalled.
const InstallHint = "install bubblewrap: sudo apt-get install bubblewrap"

// WaitDelay bounds how long Wait waits for the output pipes of a sandboxed
// process after its context is cancelled and its process group killed.
const WaitDelay = 2 * time.Second

// LookPath finds the bwrap executable in PATH. When there is none it
// returns an error wrapping ErrNotInstalled whose message carries
// InstallHint.
func LookPath() (string, error) {
	p, err := exec.LookPath("bwrap")
	if err != nil {
		return "", fmt.Errorf("%w (%v); %s", ErrNotInstalled, err, InstallHint)
	}
	return p, nil
}

// Command returns a command that runs cmd inside the sandbox s; the caller
// sets its standard streams and starts it. bwrap runs with the sandbox's
// environment (Environ) and nothing else, which it hands on to cmd, in a
// process group of its own. Cancelling ctx kills the whole group with
// SIGKILL, and bwrap's death kills everything in the sandbox; Wait then
// returns within WaitDelay even if a pipe is still held open.
//
// Command opens the source of every bind now (Open) and puts the
// descriptors in the command's ExtraFiles, where bwrap finds them
// (--bind-fd); bwrap closes its copies before it runs cmd. The caller
// closes the command's copies once it has started, or failed to start
// (CloseFiles); until then they hold what the sandbox will see.
//
// It fails with ErrNotInstalled, ErrInvalidSpec, or an error of Open
// (ErrSymlink, ErrLeaves, a missing path), or when the root is not a
// directory.
func Command(ctx context.Context, s Spec, cmd []string) (*exec.Cmd, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	return command(ctx, s, nil, cmd)
}

// command builds the exec.Cmd for s plus extra mounts; s is validated.
func command(ctx context.Context, s Spec, extra []Mount, cmd []string) (*exec.Cmd, error) {
	path, err := LookPath()
	if err != nil {
		return nil, err
	}
	argv, err := build(path, s, extra, cmd)
	if err != nil {
		return nil, err
	}
	files, err := openAll(append(s.Grants(), extra...))
	if err != nil {
		return nil, err
	}
	if ok, err := IsDir(files[0]); err != nil || !ok {
		closeAll(files)
		if err == nil {
			err = errors.New("not a directory")
		}
		return nil, fmt.Errorf("sandbox root %s: %w", s.Root.Host, err)
	}
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.ExtraFiles = files
	c.Env = Environ(s)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return killGroup(c.Process) }
	c.WaitDelay = WaitDelay
	return c, nil
}

// openAll opens the source of each mount, in order.
func openAll(ms []Mount) ([]*os.File, error) {
	files := make([]*os.File, 0, len(ms))
	for _, m := range ms {
		f, err := Open(m.Source)
		if err != nil {
			closeAll(files)
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
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
