// Package proc runs one turn of a provider CLI as a child process: in its
// own process group (killed whole when the turn's context ends, and when
// the turn is over), with stdout read line by line under a size limit, the
// tail of stderr kept for error messages, and Wait called exactly once.
// The pattern is that of provider/script's model mode.
package proc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/substrat/substrat/bwrap/launch"
	"github.com/substrat/substrat/provider"
)

// ErrLineTooLong is returned by Line for a line over the limit.
var ErrLineTooLong = errors.New("line too long")

const (
	stderrKeep  = 64 << 10
	readBufSize = 64 << 10
	// waitDelay bounds how long Wait waits for output pipes held open by
	// processes that left the group.
	waitDelay = 2 * time.Second
)

// Command is what to run.
type Command struct {
	Path  string
	Args  []string // without the program name
	Env   []string // the whole environment
	Dir   string
	Stdin string // written to stdin, which is then closed
	// Wrap, if set, turns the process into the one to start (a sandbox:
	// provider.Config.Sandbox). The Files of the process it returns are
	// closed once it has started. Without it the process is contained
	// (launch.Contain).
	Wrap func(ctx context.Context, p provider.Process) (provider.Process, error)
	// Limit, if set, puts the process to start (wrapped, or contained)
	// under the agent's resource limits (provider.Config.Limit).
	Limit provider.LimitFunc
	// Start, if set, starts the process where the agent runs
	// (provider.Config.Start) instead of on this machine.
	Start provider.StartFunc
}

// String is the command line, for messages.
func (c Command) String() string {
	return strings.Join(append([]string{c.Path}, c.Args...), " ")
}

// Proc is a running command.
type Proc struct {
	h       Handle
	ctx     context.Context
	kill    context.CancelFunc // kills the group through cmd.Cancel
	out     *os.File
	br      *bufio.Reader
	stderr  *TailBuffer
	maxLine int
	unblock func() bool
	done    bool
}

// Start starts c. Lines longer than maxLine bytes fail Line. Cancelling ctx
// kills the process group and makes Line return at once.
func Start(ctx context.Context, c Command, maxLine int) (*Proc, error) {
	runCtx, kill := context.WithCancel(ctx)
	outR, outW, err := os.Pipe()
	if err != nil {
		kill()
		return nil, err
	}
	stderr := &TailBuffer{Max: stderrKeep}
	process := provider.Process{Path: c.Path, Args: append([]string{c.Path}, c.Args...), Env: c.Env, Dir: c.Dir}
	if c.Wrap != nil {
		if process, err = c.Wrap(runCtx, process); err != nil {
			outR.Close()
			outW.Close()
			kill()
			return nil, fmt.Errorf("sandbox: %w", err)
		}
	} else {
		// The turn's processes die with it, setsid or not.
		process.Args = launch.ContainArgv(process.Args, process.Dir)
		process.Path = process.Args[0]
	}
	if err := Limit(&process, c.Limit); err != nil {
		outR.Close()
		outW.Close()
		kill()
		return nil, err
	}
	h, err := Launch(runCtx, process, provider.Stdio{Stdin: strings.NewReader(c.Stdin), Stdout: outW, Stderr: stderr}, c.Start)
	outW.Close()
	CloseFiles(process)
	if err != nil {
		outR.Close()
		kill()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	p := &Proc{h: h, ctx: runCtx, kill: kill, out: outR, br: bufio.NewReaderSize(outR, readBufSize),
		stderr: stderr, maxLine: maxLine}
	// Unblock reads when the turn ends, even if an escaped grandchild
	// holds the pipe open.
	p.unblock = context.AfterFunc(runCtx, func() { outR.SetReadDeadline(time.Unix(1, 0)) })
	return p, nil
}

// Limit puts p under the resource limits of limit, if set
// (provider.Config.Limit); if that fails, it closes p's files.
func Limit(p *provider.Process, limit provider.LimitFunc) error {
	if limit == nil {
		return nil
	}
	if err := limit(p); err != nil {
		CloseFiles(*p)
		return fmt.Errorf("resource limits: %w", err)
	}
	return nil
}

// Cmd returns the command that starts p, under ctx.
func Cmd(ctx context.Context, p provider.Process) *exec.Cmd {
	cmd := exec.CommandContext(ctx, p.Path)
	cmd.Args, cmd.Env, cmd.Dir, cmd.ExtraFiles = p.Args, p.Env, p.Dir, p.Files
	return cmd
}

// CloseFiles closes the descriptors a sandbox put in p.Files for bwrap
// to bind (provider.Config.Sandbox); call it once p has started or
// failed to: the started process has its own copies.
func CloseFiles(p provider.Process) {
	for _, f := range p.Files {
		f.Close()
	}
}

// Pid is the process id of the command (and, on this machine, its
// process group id), or of the ssh client that stands for it.
func (p *Proc) Pid() int { return p.h.Pid() }

// Line returns the next line of stdout without its end of line. At the
// end it returns io.EOF; a line over the limit returns ErrLineTooLong and
// its start. After the context ends, reads fail at once.
func (p *Proc) Line() ([]byte, error) {
	var line []byte
	for {
		frag, err := p.br.ReadSlice('\n')
		line = append(line, frag...)
		if len(bytes.TrimSuffix(line, []byte("\n"))) > p.maxLine {
			return line[:p.maxLine], ErrLineTooLong
		}
		switch {
		case err == nil:
			return bytes.TrimSuffix(line[:len(line)-1], []byte("\r")), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return bytes.TrimSuffix(line, []byte("\r")), nil
		default:
			return line, err
		}
	}
}

// Finish ends the command: it gives the process grace to exit by itself
// (zero: none), then kills what is left of its group and waits for it. It
// returns Wait's error. Call it exactly once.
func (p *Proc) Finish(grace time.Duration) error {
	if p.done {
		panic("proc: Finish called twice")
	}
	p.done = true
	defer p.unblock()
	defer p.out.Close()
	if grace > 0 && p.ctx.Err() == nil {
		t := time.AfterFunc(grace, p.kill)
		p.h.Exited()
		t.Stop()
	}
	// A local leader is not reaped yet, so its pid still names the group.
	p.h.Kill()
	err := p.h.Wait()
	p.kill()
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil
	}
	return err
}

// Stderr returns at most the last n bytes of stderr, trimmed and quoted;
// "" if there were none.
func (p *Proc) Stderr(n int) string { return p.stderr.Tail(n) }

// KillGroup kills the process group led by p, unless p has been reaped
// (its pid, and so the group id, could then name someone else).
func KillGroup(p *os.Process) error {
	if err := p.Signal(syscall.Signal(0)); err != nil {
		return err // os.ErrProcessDone once reaped
	}
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// WaitExited blocks until process pid has exited, without reaping it.
func WaitExited(pid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// TailBuffer keeps the last bytes written to it.
type TailBuffer struct {
	Max int

	mu  sync.Mutex // guards the fields below
	buf []byte
	cut bool // bytes were dropped from the front
}

func (b *TailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > 2*b.Max {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.Max:]...)
		b.cut = true
	}
	return len(p), nil
}

// Tail returns at most the last n bytes, trimmed and quoted; "" if empty.
func (b *TailBuffer) Tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.buf
	cut := b.cut
	if len(t) > n {
		t, cut = t[len(t)-n:], true
	}
	t = bytes.TrimSpace(t)
	if len(t) == 0 {
		return ""
	}
	s := fmt.Sprintf("%q", t)
	if cut {
		s = "..." + s
	}
	return s
}

// Quote returns b quoted, cut to n bytes.
func Quote(b []byte, n int) string {
	if len(b) > n {
		return fmt.Sprintf("%q...", b[:n])
	}
	return fmt.Sprintf("%q", b)
}
