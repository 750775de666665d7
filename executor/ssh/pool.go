package ssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// The pool: up to Options.MaxMasters master connections to the host,
// each carrying up to limit sessions (see the package doc).

// master is one master connection of the pool.
type master struct {
	sock     string        // its control socket
	cmd      *exec.Cmd     // its ssh, a child of this process
	done     chan struct{} // closed when that has exited
	sessions int           // counted against it, under Executor.pmu
}

// alive reports whether the master's ssh still runs.
func (m *master) alive() bool {
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// errClosed: a use of the executor after Close.
var errClosed = errors.New("ssh executor: closed")

// socket is the control socket of the master in slot i of the pool.
func (e *Executor) socket(i int) string { return filepath.Join(e.ctlDir, "m"+strconv.Itoa(i)) }

// acquire returns a running master with a session counted against it
// (release it): the first that has room for one, else a new one in a
// free slot of the pool (or in place of one that was lost), else, the
// pool full, the least busy (whose sshd may refuse the session: see
// the package doc).
func (e *Executor) acquire(ctx context.Context) (*master, error) {
	if m, err := e.take(false); m != nil || err != nil {
		return m, err
	}
	e.omu.Lock()
	defer e.omu.Unlock()
	if m, err := e.take(false); m != nil || err != nil {
		return m, err // opened meanwhile, or a session released
	}
	slot := e.freeSlot()
	if slot < 0 {
		return e.take(true)
	}
	m, err := e.open(ctx, slot)
	if err != nil {
		return nil, err
	}
	e.pmu.Lock()
	defer e.pmu.Unlock()
	if e.closed {
		m.cmd.Process.Kill() // its socket's directory is gone
		return nil, errClosed
	}
	m.sessions++
	e.masters[slot] = m
	return m, nil
}

// take counts a session against the first running master with room for
// it, or with any, the least busy; nil if there is none.
func (e *Executor) take(any bool) (*master, error) {
	e.pmu.Lock()
	defer e.pmu.Unlock()
	if e.closed {
		return nil, errClosed
	}
	var best *master
	for _, m := range e.masters {
		if m == nil || !m.alive() {
			continue
		}
		if !any && m.sessions < e.limit {
			best = m
			break
		}
		if any && (best == nil || m.sessions < best.sessions) {
			best = m
		}
	}
	if best != nil {
		best.sessions++
	}
	return best, nil
}

// freeSlot returns a slot of the pool with no running master, or -1.
func (e *Executor) freeSlot() int {
	e.pmu.Lock()
	defer e.pmu.Unlock()
	for i, m := range e.masters {
		if m == nil || !m.alive() {
			return i
		}
	}
	return -1
}

// release uncounts a session that acquire counted against m.
func (e *Executor) release(m *master) {
	e.pmu.Lock()
	m.sessions--
	e.pmu.Unlock()
}

// Refusals of a session by the host's sshd (MaxSessions), as OpenSSH's
// client prints them: the first of a session through a master, the
// other of a channel.
var refusals = [][]byte{[]byte("Session open refused by peer"), []byte("open failed: administratively prohibited")}

// watch learns the bound of sessions a master carries from what an ssh
// client through m printed first (its standard error): a refusal means
// that the sessions counted against m, but this one, are the most its
// sshd takes. It reports whether there was one.
func (e *Executor) watch(m *master, stderr []byte) bool {
	for _, r := range refusals {
		if bytes.Contains(stderr, r) {
			e.pmu.Lock()
			e.limit = max(1, min(e.limit, m.sessions-1))
			e.pmu.Unlock()
			return true
		}
	}
	return false
}

// watcher passes what it is written to w (nil: nowhere), and the first
// of it to Executor.watch.
type watcher struct {
	w    io.Writer
	e    *Executor
	m    *master
	head []byte
	done bool // seen a refusal, or enough
}

func (w *watcher) Write(p []byte) (int, error) {
	if !w.done {
		w.head = append(w.head, p[:min(len(p), 512)]...)
		w.done = w.e.watch(w.m, w.head) || len(w.head) >= 512
	}
	if w.w == nil {
		return len(p), nil
	}
	return w.w.Write(p)
}

// open starts the master of slot i and waits until it answers. The
// master is a child of this process of its own (not forked by a client,
// ControlMaster=auto, which would keep that client's output pipes
// open), in its own process group, with its output in a file, and
// killed by the kernel when this process dies (kill -9 included): it
// never outlives the daemon, with the forwardings it holds. It is not
// detached (no -f, no ControlPersist, which fork it away). A socket
// left by the slot's master that was lost (it is a child: its end is
// known) is removed first.
func (e *Executor) open(ctx context.Context, i int) (*master, error) {
	m := &master{sock: e.socket(i), done: make(chan struct{})}
	if err := os.Remove(m.sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	logf, err := os.OpenFile(m.sock+".log", os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	// No forwarding the user's ssh_config sets up for the host
	// (RemoteForward, LocalForward, DynamicForward), here nor through a
	// client of the master (client, rsh): a port of this machine
	// forwarded there would be reachable from a sandbox with the
	// network. Forward's (ssh -O forward) are still made.
	m.cmd = exec.Command("ssh", e.args(m.sock,
		"-o", "ClearAllForwardings=yes",
		"-o", "ControlMaster=yes",
		"-o", "ControlPersist=no",
		"-o", "ServerAliveInterval=15",
		"-o", "ServerAliveCountMax=4",
		"-N", "--", e.host)...)
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		return nil, fmt.Errorf("ssh %s: %v", e.host, err)
	}
	exited := make(chan error, 1)
	go func() { // reaps it whenever it ends
		exited <- m.cmd.Wait()
		close(m.done)
		e.lost(m)
	}()
	return m, e.ready(ctx, m, exited)
}

// ready waits until the master m that open started answers on its
// socket.
func (e *Executor) ready(ctx context.Context, m *master, exited <-chan error) error {
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		select {
		case err := <-exited:
			if err == nil {
				err = errors.New("the master connection ended")
			}
			msg, _ := os.ReadFile(m.sock + ".log")
			return fmt.Errorf("ssh %s: %v: %s", e.host, err, bytes.TrimSpace(msg))
		case <-ctx.Done():
			m.cmd.Process.Kill()
			return ctx.Err()
		case <-time.After(wait):
		}
		if exec.CommandContext(ctx, "ssh", e.args(m.sock, "-O", "check", "--", e.host)...).Run() == nil {
			return nil
		}
	}
}

// stop asks the master to exit (ssh -O exit), and kills it if it has
// not within a few seconds.
func (m *master) stop(e *Executor) {
	if !m.alive() {
		return
	}
	exec.Command("ssh", e.args(m.sock, "-O", "exit", "--", e.host)...).Run()
	select {
	case <-m.done:
	case <-time.After(5 * time.Second):
		m.cmd.Process.Kill()
		<-m.done
	}
}
