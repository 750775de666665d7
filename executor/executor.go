package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Errors. Test for them with errors.Is.
var (
	// ErrInvalid: a Cmd that an executor refuses to start (no argv, a NUL
	// byte, a bad agent id, descriptors an executor cannot pass).
	ErrInvalid = errors.New("executor: invalid command")
)

// Executor starts an agent's processes (its provider process, its tool
// commands) where the agent runs: on this machine, or on another one.
// Its consumer is the daemon.
type Executor interface {
	// Start starts c and returns its Process. Cancelling ctx kills it,
	// as Kill does. It fails with ErrInvalid, or with the error of
	// whatever could not be started (the program, the connection).
	Start(ctx context.Context, c *Cmd) (Process, error)
}

// Cmd is a process to start for an agent.
type Cmd struct {
	// Agent is the agent's id, and Incarnation the daemon's current
	// incarnation of it: every process carries both, so that processes
	// of a stale incarnation can be found and killed (fencing).
	Agent, Incarnation string
	// Argv is the command to run, already sandboxed: the bwrap command
	// line the daemon built for the agent's place on the executor's
	// machine (bwrap ... -- program args), possibly behind a wrapper
	// that applies resource limits. The executor runs it as it is.
	Argv []string
	// Env is the command's whole environment ("NAME=value"); nothing of
	// the executor's own environment is added.
	Env []string
	// Dir is the command's working directory; "" is the executor's
	// default. bwrap changes into the sandbox's own (--chdir).
	Dir string
	// Stdin, Stdout and Stderr are the command's streams; nil is
	// /dev/null. They are copied as exec.Cmd copies them.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// ExtraFiles are descriptors 3, 4, ... of the command (bwrap's
	// --bind-fd sources). Only the local executor can pass them; a
	// remote one refuses a Cmd that has any.
	ExtraFiles []*os.File
}

// Process is a started command.
type Process interface {
	// Wait waits for the process to end and returns nil when it exited
	// with status 0, an *ExitError when it exited otherwise, or the
	// error that cut it off (a lost connection). Call it exactly once.
	Wait() error
	// Kill kills the process and everything it started. Wait still
	// must be called. Killing an ended process is not an error.
	Kill() error
	// Pid is the local process that stands for the command (the
	// command itself, or the ssh client that runs it remotely), for the
	// daemon's table of processes to reap after a crash.
	Pid() int
}

// ExitError is a process that ended with a status other than 0. Code is
// -1 when it was killed by a signal (a local process only: a remote
// one killed by signal N reads as 128+N, as a shell reports it).
type ExitError struct {
	Code int
}

func (e *ExitError) Error() string {
	if e.Code < 0 {
		return "executor: process killed by a signal"
	}
	return fmt.Sprintf("executor: process exited with status %d", e.Code)
}

// WaitDelay bounds how long Wait waits for a process's output streams
// once it has ended or been killed, if something still holds them open.
const WaitDelay = 2 * time.Second

// Local runs processes on this machine, each in a process group of its
// own which Kill kills whole. It is what the daemon does without an
// executor.
type Local struct{}

// Start starts c on this machine.
func (Local) Start(ctx context.Context, c *Cmd) (Process, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	cmd.Env = c.Env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.Dir = c.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Stdin, c.Stdout, c.Stderr
	cmd.ExtraFiles = c.ExtraFiles
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd.Process) }
	cmd.WaitDelay = WaitDelay
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &localProcess{cmd: cmd}, nil
}

type localProcess struct{ cmd *exec.Cmd }

func (p *localProcess) Pid() int    { return p.cmd.Process.Pid }
func (p *localProcess) Kill() error { return killGroup(p.cmd.Process) }
func (p *localProcess) Wait() error { return ExitStatus(p.cmd.Wait()) }

// ExitStatus turns the error of exec.Cmd.Wait into Process.Wait's: an
// *exec.ExitError becomes an *ExitError, others are kept.
func ExitStatus(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &ExitError{Code: ee.ExitCode()}
	}
	return err
}

// killGroup kills p's process group (p leads it).
func killGroup(p *os.Process) error {
	err := syscall.Kill(-p.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// Validate checks the form of c: an argv, no NUL byte in it or in the
// environment, and environment entries of the form NAME=value.
func (c *Cmd) Validate() error {
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return fmt.Errorf("%w: empty argv", ErrInvalid)
	}
	for _, a := range c.Argv {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("%w: argument %q contains a NUL byte", ErrInvalid, a)
		}
	}
	for _, kv := range c.Env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || !validName(name) || strings.ContainsRune(kv, 0) {
			return fmt.Errorf("%w: environment entry %q is not NAME=value", ErrInvalid, kv)
		}
	}
	return nil
}

// validName reports whether s is a portable environment variable name,
// one a POSIX shell can export: a letter or '_', then letters, digits
// and '_'.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
