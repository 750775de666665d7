package ssh

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// maxSocketPath bounds a Unix socket's path (sun_path, its NUL
// included).
const maxSocketPath = 108

// Forward makes a Unix socket on the host, under the root's sockets/
// (socketPath: short, since a Unix socket's path is at most 107 bytes
// and the root may be a long home's), that reaches the local Unix socket local
// through the master connection (ssh -R, a remote stream-local
// forwarding), and returns its path on the host. name tells the
// agent's sockets apart. The socket is a file of the host: a process
// through any master of the pool reaches it, while the one master that
// holds the forwarding runs. A socket left there (by a master that
// died, or a daemon) is removed first, and a forwarding of the same
// path by the executor cancelled, so that the new one listens: call it
// before each turn, as a new master (after a lost connection) has none. sshd
// creates the socket as the login user, mode 0600 under its umask; its
// AllowStreamLocalForwarding must not be off.
func (e *Executor) Forward(ctx context.Context, agent, name, local string) (string, error) {
	if !idRE.MatchString(agent) || !idRE.MatchString(name) {
		return "", fmt.Errorf("%w: agent %q, socket %q", ErrID, agent, name)
	}
	if !filepath.IsAbs(local) || strings.ContainsAny(local, ": \n") {
		return "", fmt.Errorf("ssh executor: cannot forward to %q (an absolute path without ':' or blanks)", local)
	}
	if _, err := e.copyDir(ctx, agent); err != nil {
		return "", err
	}
	root, err := e.Root(ctx)
	if err != nil {
		return "", err
	}
	if strings.ContainsAny(root, ": \n") {
		return "", fmt.Errorf("ssh executor: cannot forward from under %q (':' or blanks); set the executor's root", root)
	}
	remote := socketPath(root, e.opts.Home, agent, name)
	if len(remote) >= maxSocketPath {
		return "", fmt.Errorf("ssh executor: the socket %s on %s would have a path too long for a Unix socket; set a shorter root", remote, e.host)
	}
	if err := e.forward(ctx, remote, remote+":"+local); err != nil {
		return "", err
	}
	return remote, nil
}

// forward makes the forwarding spec (remote:local) on a master of the
// pool, after the executor's of remote, if any, is cancelled and a
// socket left at remote removed.
func (e *Executor) forward(ctx context.Context, remote, spec string) error {
	e.fmu.Lock()
	defer e.fmu.Unlock()
	e.pmu.Lock()
	old := e.fwds[remote]
	e.pmu.Unlock()
	if old.m != nil && old.m.alive() {
		exec.CommandContext(ctx, "ssh", e.args(old.m.sock, "-O", "cancel", "-R", old.spec, "--", e.host)...).Run()
	}
	if _, err := e.run(ctx, `mkdir -p -- "$1" && rm -f -- "$2"`, filepath.Dir(remote), remote); err != nil {
		return err
	}
	m, err := e.acquire(ctx)
	if err != nil {
		return err
	}
	e.release(m) // a forwarding is no session
	out, err := exec.CommandContext(ctx, "ssh", e.args(m.sock, "-O", "forward", "-R", spec, "--", e.host)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ssh %s: forwarding %s: %v: %s", e.host, spec, err, bytes.TrimSpace(out))
	}
	e.pmu.Lock()
	e.fwds[remote] = forwarding{m, spec}
	e.pmu.Unlock()
	return nil
}

// lost makes again, on another master, the forwardings that the master
// m held, now that it has exited (a lost connection): processes on the
// other masters keep reaching their sockets, after a moment without.
func (e *Executor) lost(m *master) {
	e.pmu.Lock()
	var again []forwarding
	for remote, f := range e.fwds {
		if f.m == m && !e.closed {
			again = append(again, forwarding{spec: f.spec})
			delete(e.fwds, remote)
		}
	}
	e.pmu.Unlock()
	for _, f := range again {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		remote, _, _ := strings.Cut(f.spec, ":")
		e.forward(ctx, remote, f.spec) // else the next Forward
		cancel()
	}
}

// forwarding is a socket that Forward made: the master that holds it,
// and its ssh -R spec.
type forwarding struct {
	m    *master
	spec string
}

// socketsDir is the directory of the root that holds the forwarded
// sockets of every home and agent.
const socketsDir = "sockets"

// socketPath is where, under root, the socket name of agent of home is
// forwarded: a hash of the three, so that its path stays 38 bytes longer
// than the root's whatever they are.
func socketPath(root, home, agent, name string) string {
	sum := sha256.Sum256([]byte(home + "\x00" + agent + "\x00" + name))
	return filepath.Join(root, socketsDir, hex.EncodeToString(sum[:12])+".sock")
}
