package proc

import (
	"context"
	"io"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/substrat/substrat/provider"
)

// Handle is a started process, on this machine or started by a
// provider.StartFunc elsewhere: what a turn needs of it.
type Handle interface {
	// Pid is the local process that stands for it (for Config.Track).
	Pid() int
	// Exited blocks until the process has ended (a local one is not
	// reaped yet, so its pid still names its group).
	Exited()
	// Kill kills the process and everything it started.
	Kill()
	// Wait waits for it and returns its error; call it exactly once.
	Wait() error
}

// Launch starts p, already sandboxed and limited, with the streams of
// stdio. With start nil it runs on this machine as a turn's process
// always has: in a process group of its own, killed whole when ctx ends,
// and killed by the kernel if the daemon dies first (Pdeathsig); Wait
// returns within WaitDelay once it has ended even if an escaped
// grandchild holds a pipe. With start set, start runs it where the agent
// runs (provider.Config.Start). Either way p.Files are the caller's to
// close, and so are stdio's files, once Launch has returned.
func Launch(ctx context.Context, p provider.Process, stdio provider.Stdio, start provider.StartFunc) (Handle, error) {
	if start == nil {
		cmd := Cmd(ctx, p)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdio.Stdin, stdio.Stdout, stdio.Stderr
		// Its own group, so that everything it starts is killed with
		// it; and killed if the daemon dies first.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		cmd.Cancel = func() error { return KillGroup(cmd.Process) }
		cmd.WaitDelay = waitDelay
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		return local{cmd}, nil
	}
	// A starter may read the input after Launch returns (ssh relays it
	// from a goroutine of its own), when the caller has closed its file:
	// it reads a copy of its own, closed once the process is waited for.
	var dup *os.File
	if f, ok := stdio.Stdin.(*os.File); ok {
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		dup = os.NewFile(uintptr(fd), f.Name())
		stdio.Stdin = dup
	}
	r, err := start(ctx, p, stdio)
	if err != nil {
		if dup != nil {
			dup.Close()
		}
		return nil, err
	}
	h := &remote{r: r, in: dup, done: make(chan struct{})}
	go func() {
		h.err = r.Wait()
		if h.in != nil {
			h.in.Close()
		}
		close(h.done)
	}()
	return h, nil
}

// local is a process of this machine.
type local struct{ cmd *exec.Cmd }

func (l local) Pid() int    { return l.cmd.Process.Pid }
func (l local) Exited()     { WaitExited(l.cmd.Process.Pid) }
func (l local) Kill()       { KillGroup(l.cmd.Process) }
func (l local) Wait() error { return l.cmd.Wait() }

// remote is a process a StartFunc started. Its Wait runs at once, in a
// goroutine of its own, so that Exited can wait for its end.
type remote struct {
	r    provider.Running
	in   io.Closer
	done chan struct{}
	err  error // set before done is closed
}

func (h *remote) Pid() int { return h.r.Pid() }
func (h *remote) Exited()  { <-h.done }
func (h *remote) Kill()    { h.r.Kill() }

func (h *remote) Wait() error {
	<-h.done
	return h.err
}
