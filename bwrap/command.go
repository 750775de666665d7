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
// It fails with ErrNotInstalled or ErrInvalidSpec.
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
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Env = Environ(s)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return killGroup(c.Process) }
	c.WaitDelay = WaitDelay
	return c, nil
}

// killGroup sends SIGKILL to the process group led by p.
func killGroup(p *os.Process) error {
	err := syscall.Kill(-p.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}
