package worktools

import (
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

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/bwrap/launch"
	"github.com/substrat/substrat/executor"
	"github.com/substrat/substrat/provider"
)

// Shell limits.
const (
	// DefaultShellTimeout is how long a command may run unless the call
	// says otherwise; MaxShellTimeout is the most it may ask for.
	DefaultShellTimeout = 2 * time.Minute
	MaxShellTimeout     = 10 * time.Minute
	// Output beyond MaxShellOutput bytes is cut in the middle: the first
	// quarter and the last three quarters are kept.
	MaxShellOutput = 64 << 10
)

// Shell runs command with /bin/sh in the place: in the sandbox through
// launch.Shell, or in the directory, in the working directory and with the
// exported variables the previous call left. stdout and stderr are
// returned together, capped at MaxShellOutput with a note of what was
// cut, followed by the exit status. A command still running after timeout
// (DefaultShellTimeout if zero, at most MaxShellTimeout) is killed with
// its process group, and the output says so. An error means the command
// could not be started.
func (pl Place) Shell(ctx context.Context, command string, timeout time.Duration) (string, error) {
	if strings.TrimSpace(command) == "" {
		return "", fmt.Errorf("%w: empty command", ErrInvalid)
	}
	if timeout <= 0 {
		timeout = DefaultShellTimeout
	}
	timeout = min(timeout, MaxShellTimeout)
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := &capped{max: MaxShellOutput}
	run := pl.runLocal
	if pl.RemoteStart != nil {
		run = pl.runRemote
	}
	err := run(runCtx, command, out)
	var ns notStarted
	if errors.As(err, &ns) {
		return "", ns.error
	}
	text := out.String()
	if text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	var ee *exec.ExitError
	var re *executor.ExitError
	switch {
	case errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		text += fmt.Sprintf("[killed after %s: the command ran past its timeout]", timeout)
	case ctx.Err() != nil:
		return "", ctx.Err()
	case err == nil:
		text += "[exit status 0]"
	case errors.As(err, &ee):
		text += fmt.Sprintf("[exit status %d]", ee.ExitCode())
	case errors.As(err, &re):
		text += fmt.Sprintf("[exit status %d]", re.Code)
	case errors.Is(err, exec.ErrWaitDelay):
		text += "[exit status 0; a background process kept the output open and was killed]"
	default:
		return "", err
	}
	return text, nil
}

// notStarted is an error of a shell command that did not start.
type notStarted struct{ error }

// runLocal runs command here, in the sandbox or the directory, its
// output into out, until it ends or ctx is done.
func (pl Place) runLocal(ctx context.Context, command string, out io.Writer) error {
	cmd, err := pl.shellCommand(ctx, command)
	if err != nil {
		return notStarted{err}
	}
	if pl.Limit != nil {
		p := provider.Process{Path: cmd.Path, Args: cmd.Args}
		if err := pl.Limit(&p); err != nil {
			launch.CloseFiles(cmd)
			return notStarted{fmt.Errorf("resource limits: %w", err)}
		}
		cmd.Path, cmd.Args = p.Path, p.Args
	}
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Start()
	launch.CloseFiles(cmd)
	if err != nil {
		return notStarted{fmt.Errorf("starting the shell: %w", err)}
	}
	return cmd.Wait()
}

// runRemote runs command where the agent runs (another host, a pod)
// through RemoteSandbox and RemoteStart, as one of its provider's
// processes: /bin/sh with Shell's wrapper, in the sandbox's environment,
// the shell state a read-write need at its own path, named by
// $SUBSTRAT_SHELL_STATE (on a host, copied there and back with the
// agent's other files; the Sandbox hook of a pod, which has no such
// path, names one of the pod's). It is killed when ctx is done.
func (pl Place) runRemote(ctx context.Context, command string, out io.Writer) error {
	if pl.Sandbox == nil || pl.RemoteSandbox == nil {
		return notStarted{fmt.Errorf("%w: a shell on another host needs the agent's sandbox", ErrInvalid)}
	}
	state := pl.ShellState.Host
	if err := os.MkdirAll(state, 0o700); err != nil {
		return notStarted{fmt.Errorf("shell state directory: %w", err)}
	}
	p := provider.Process{Path: "/bin/sh", Args: []string{"/bin/sh", "-c", bwrap.ShellWrapperEnv(), "substrat-shell", command},
		Env: append(bwrap.Environ(*pl.Sandbox), bwrap.ShellStateEnv+"="+state)}
	p, err := pl.RemoteSandbox(ctx, p, provider.SandboxNeeds{ReadWrite: []string{state}})
	if err != nil {
		return notStarted{err}
	}
	r, err := pl.RemoteStart(ctx, p, provider.Stdio{Stdout: out, Stderr: out})
	if err != nil {
		return notStarted{fmt.Errorf("starting the shell: %w", err)}
	}
	stop := context.AfterFunc(ctx, func() { r.Kill() })
	defer stop()
	return r.Wait()
}

// shellCommand builds the command of Shell.
func (pl Place) shellCommand(ctx context.Context, command string) (*exec.Cmd, error) {
	if pl.Sandbox != nil {
		return launch.Shell(ctx, *pl.Sandbox, pl.ShellState, command)
	}
	if pl.Dir == "" {
		return nil, fmt.Errorf("%w: the agent has no working directory", ErrInvalid)
	}
	if err := os.MkdirAll(pl.ShellState.Host, 0o700); err != nil {
		return nil, fmt.Errorf("shell state directory: %w", err)
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", bwrap.ShellWrapper(pl.ShellState.Host), "substrat-shell", command)
	cmd.Dir = pl.Dir
	cmd.Env = pl.Env
	cmd = launch.Contain(ctx, cmd) // what it starts dies with it, setsid or not
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = launch.WaitDelay
	return cmd, nil
}

// capped keeps the first quarter and the last three quarters of max bytes
// of what is written to it, and counts what it drops.
type capped struct {
	max int

	mu   sync.Mutex // guards the fields below
	head []byte
	tail []byte // a window of the last bytes, up to 2x its size before a trim
	cut  int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	if room := c.max/4 - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	c.tail = append(c.tail, p...)
	if keep := c.max - c.max/4; len(c.tail) > 2*keep {
		c.cut += len(c.tail) - keep
		c.tail = append(c.tail[:0], c.tail[len(c.tail)-keep:]...)
	}
	return n, nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	tail, cut := c.tail, c.cut
	if keep := c.max - c.max/4; len(tail) > keep {
		cut += len(tail) - keep
		tail = tail[len(tail)-keep:]
	}
	if cut == 0 {
		return string(c.head) + string(tail)
	}
	return fmt.Sprintf("%s\n[... %d bytes of output cut ...]\n%s", c.head, cut, tail)
}
