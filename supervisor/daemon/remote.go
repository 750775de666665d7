package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/executor"
	"github.com/substrat/substrat/executor/ssh"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
)

// remotes run the provider processes of agents whose executor is
// ssh://HOST on that host (package executor/ssh), one executor (one
// master connection) per host.
//
// A turn's process there goes as follows. The sandbox hook (sandboxFor)
// fences the agent's processes of other incarnations on the host (left
// by a daemon that died), salvages what such a process, or one whose
// place did not come back, left in the place (newer files only, nothing
// deleted), then pushes the agent's workspace root to its place (rsync,
// an exact copy, no .git), forwards its tool socket there when the
// provider needs it, and builds the bwrap command line with the host's
// paths. The start hook (Start) runs it through the executor with the
// daemon's incarnation; when it has ended, however it ended, the place
// comes back into the workspace root (Pull: what the agent wrote is
// hostile, see executor/ssh) before Wait returns, so a turn never ends
// before its files are back. A process cut off (a lost connection, the
// host's kill) fails the turn, which is retried as any cut-short turn.
//
// What else the process sees of this machine goes with the place, as
// extras beside it on the host: from the Substrat home, at the same path
// relative to it (a git workspace's clone's git directory, read-write,
// with its config, hooks and info read-only over it; a CLI's own HOME,
// read-write; its MCP config), and the workspace's read-only binds
// outside the home by their absolute path under hostPaths (a git
// workspace's repository, which the clone's alternates and origin name;
// a read-only link). The read-write ones come back after the process,
// under Pull's rules, except the read-only ones inside them: a clone's
// config, hooks and info on this machine are never replaced by what the
// host holds (notes on git: what an agent writes is data). The program
// and the package a provider runs are expected at the same paths on the
// host. A read-write link is refused, and so is a read-write extra in the
// store's agents/.
//
// The daemon is the only writer of the store: the host gets copies, and
// what comes back lands in workspaces and the providers' own state,
// never in the store's agents/. Resource limits are this machine's and
// are not applied on the host yet; the work tools are refused.
type remotes struct {
	log *slog.Logger
	// incarnation is this daemon's: every remote process carries it,
	// and a later daemon's Fence kills those that carry another.
	incarnation string

	mu     sync.Mutex // guards the fields below
	closed bool
	byHost map[string]*ssh.Executor
	agents map[string]*remoteAgent
}

// remoteAgent is what the daemon knows of one agent's place on its host.
type remoteAgent struct {
	mu sync.Mutex // held while its place is copied either way; guards the fields below
	// synced: the place came back after the last process, in this
	// daemon's life. Until then it may hold work not brought back, and
	// is salvaged before the next push.
	synced bool
	// local is the workspace root its place is a copy of, and rw the
	// read-write extras of the last process: what comes back after it.
	local string
	rw    []extra
}

// extra is a file or directory in the Substrat home that a provider
// process sees besides the workspace (a CLI's own HOME, its MCP
// config): copied to the host beside the place, at the same path
// relative to the home, and back after the process if read-write.
type extra struct {
	rel, local string
	rw         bool
	keep       []string // a read-write one's excludes
}

func newRemotes(log *slog.Logger) *remotes {
	id, err := uuid.NewV7()
	if err != nil {
		panic(err) // only if the system's random source fails
	}
	return &remotes{log: log, incarnation: id.String(), byHost: map[string]*ssh.Executor{}, agents: map[string]*remoteAgent{}}
}

// executor returns the executor of host, made on first use.
func (r *remotes) executor(host string) (*ssh.Executor, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("the daemon is stopping")
	}
	if e := r.byHost[host]; e != nil {
		return e, nil
	}
	e, err := ssh.New(host, ssh.Options{})
	if err != nil {
		return nil, err
	}
	r.byHost[host] = e
	return e, nil
}

// agent returns what is known of agent's place.
func (r *remotes) agent(id string) *remoteAgent {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.agents[id]
	if a == nil {
		a = &remoteAgent{}
		r.agents[id] = a
	}
	return a
}

// close stops every host's master connection: what still runs through
// them dies on the hosts.
func (r *remotes) close() {
	r.mu.Lock()
	r.closed = true
	all := r.byHost
	r.byHost = map[string]*ssh.Executor{}
	r.mu.Unlock()
	for _, e := range all {
		e.Close()
	}
}

// remoteSandbox is the Sandbox hook of an agent that runs on host: see
// remotes.
func (h *host) remoteSandbox(sess *fsstore.Session, hostName string) provider.SandboxFunc {
	return func(ctx context.Context, p provider.Process, needs provider.SandboxNeeds) (provider.Process, error) {
		base, err := h.core.AgentSpec(sess)
		if err != nil {
			return provider.Process{}, err
		}
		ofWorkspace := map[string]bool{} // the targets of the workspace's own binds
		for _, m := range base.Mounts {
			ofWorkspace[m.Target] = true
		}
		spec, argv, err := h.sandboxSpec(sess, p, needs)
		if err != nil {
			return provider.Process{}, err
		}
		e, err := h.remotes.executor(hostName)
		if err != nil {
			return provider.Process{}, err
		}
		local := spec.Root.Host
		place, err := e.Place(ctx, sess.ID)
		if err != nil {
			return provider.Process{}, err
		}
		home := h.store.Layout().Home
		sock := ""
		if needs.ToolSocket {
			if sock, err = h.toolSocket(sess.ID); err != nil {
				return provider.Process{}, err
			}
		}
		spec.Root = bwrap.Source{Host: place}
		var extras []extra
		for i, m := range spec.Mounts {
			var x extra
			switch {
			case sock != "" && m.Host == sock:
				remote, err := e.Forward(ctx, sess.ID, "tool-"+h.remotes.incarnation+".sock", sock)
				if err != nil {
					return provider.Process{}, fmt.Errorf("the tool socket of %s on %s: %w", sess.Name, hostName, err)
				}
				spec.Mounts[i].Source = bwrap.Source{Host: remote}
				continue
			case strings.HasPrefix(m.Host, home+"/"):
				// The home's: a git workspace's git directory, a CLI's
				// own HOME, its MCP config.
				x = extra{rel: strings.TrimPrefix(m.Host, home+"/"), local: m.Host, rw: !m.ReadOnly}
			case ofWorkspace[m.Target] && m.ReadOnly:
				// The workspace's, read-only, outside the home: a git
				// workspace's repository (its clone's alternates and
				// origin), a read-only link. A copy goes to the host.
				x = extra{rel: filepath.Join(hostPaths, m.Host), local: m.Host}
			case ofWorkspace[m.Target]:
				return provider.Process{}, fmt.Errorf("%s runs on %s, and its workspace %s links %s read-write: not on an ssh executor",
					sess.Name, hostName, sess.Workspace, m.Host)
			default:
				// The program and its package, at the same path on
				// the host: installed there as here.
				spec.Mounts[i].Source = bwrap.Source{Host: m.Host}
				continue
			}
			if x.rw {
				// What comes back is the agent's: a directory of its own
				// (a CLI's HOME, a clone's git directory), never the
				// store's.
				if strings.HasPrefix(m.Host, h.store.Layout().AgentsDir()+"/") {
					return provider.Process{}, fmt.Errorf("%s runs on %s, and its provider would write %s of the store there", sess.Name, hostName, m.Host)
				}
				if fi, err := os.Lstat(m.Host); err != nil || !fi.IsDir() {
					return provider.Process{}, fmt.Errorf("%s runs on %s, and it needs %s read-write there: only a directory can be", sess.Name, hostName, m.Host)
				}
			}
			remote, err := e.Extra(ctx, sess.ID, x.rel)
			if err != nil {
				return provider.Process{}, err
			}
			extras = append(extras, x)
			spec.Mounts[i].Source = bwrap.Source{Host: remote}
		}
		if err := h.remotes.prepare(ctx, e, sess.ID, local, extras); err != nil {
			return provider.Process{}, err
		}
		// bwrap as the host's PATH finds it (the sandbox's PATH).
		args, err := bwrap.PathArgv("bwrap", spec, argv)
		if err != nil {
			return provider.Process{}, err
		}
		return provider.Process{Path: args[0], Args: args, Env: bwrap.Environ(spec)}, nil
	}
}

// hostPaths is where, among an agent's extras on its host, the copies of
// paths of this machine outside the Substrat home are kept, by their
// absolute path.
const hostPaths = "host-paths"

// excludes are the paths, relative to x, of the read-only extras inside
// read-write x (a clone's config, hooks and info): what the sandbox
// shows read-only is never brought back.
func excludes(x extra, all []extra) []string {
	var out []string
	for _, y := range all {
		if !y.rw && strings.HasPrefix(y.rel, x.rel+"/") {
			out = append(out, "/"+strings.TrimPrefix(y.rel, x.rel+"/"))
		}
	}
	return out
}

// prepare readies agent's place on e's host for a process: stale
// processes fenced, unsynced work salvaged, local and the extras pushed.
func (r *remotes) prepare(ctx context.Context, e *ssh.Executor, agent, local string, extras []extra) error {
	a := r.agent(agent)
	a.mu.Lock()
	defer a.mu.Unlock()
	pids, err := e.Fence(ctx, agent, r.incarnation)
	if err != nil {
		return err
	}
	if len(pids) > 0 {
		r.log.Warn("fenced processes of an earlier incarnation on the host", "agent", agent, "host", e.Host(), "pids", pids)
		a.synced = false
	}
	if !a.synced {
		if err := e.Salvage(ctx, agent, local); err != nil {
			return fmt.Errorf("bringing back what %s left on %s: %w", agent, e.Host(), err)
		}
		for _, x := range extras {
			if !x.rw {
				continue
			}
			if err := e.PullExtra(ctx, agent, x.rel, x.local, true, excludes(x, extras)...); err != nil {
				return fmt.Errorf("bringing back what %s left on %s: %w", agent, e.Host(), err)
			}
		}
	}
	a.synced = false // until the process's place is back
	a.local, a.rw = local, nil
	for _, x := range extras {
		if err := e.PushExtra(ctx, agent, x.rel, x.local); err != nil {
			return err
		}
		if x.rw {
			x.keep = excludes(x, extras)
			a.rw = append(a.rw, x)
		}
	}
	return e.Push(ctx, agent, local)
}

// startFor returns the Start hook of an agent: nil on this machine,
// else through its host's executor (remotes).
func (h *host) startFor(sess *fsstore.Session) provider.StartFunc {
	hostName := fsstore.ExecutorHost(sess.Executor)
	if hostName == "" {
		return nil
	}
	return func(ctx context.Context, p provider.Process, stdio provider.Stdio) (provider.Running, error) {
		if sess.Workspace == "" {
			// Without a sandbox the process would run in a directory of
			// this machine.
			return nil, fmt.Errorf("%s runs on %s, which needs a workspace (substrat agent create --workspace)", sess.Name, hostName)
		}
		e, err := h.remotes.executor(hostName)
		if err != nil {
			return nil, err
		}
		proc, err := e.Start(ctx, &executor.Cmd{Agent: sess.ID, Incarnation: h.remotes.incarnation,
			Argv: append([]string{p.Path}, p.Args[1:]...), Env: p.Env, Dir: p.Dir,
			Stdin: stdio.Stdin, Stdout: stdio.Stdout, Stderr: stdio.Stderr, ExtraFiles: p.Files})
		if err != nil {
			return nil, err
		}
		return &remoteProcess{Process: proc, r: h.remotes, e: e, agent: sess.ID}, nil
	}
}

// pullTimeout bounds the copy back of a place after its process.
const pullTimeout = 10 * time.Minute

// remoteProcess is a process on a host whose Wait brings its place back.
type remoteProcess struct {
	executor.Process
	r     *remotes
	e     *ssh.Executor
	agent string
}

// Wait waits for the process, then pulls the place back; a place that
// does not come back fails a process that succeeded (its turn is
// retried, and the place salvaged before it).
func (p *remoteProcess) Wait() error {
	err := p.Process.Wait()
	if ee, ok := err.(*executor.ExitError); ok && ee.Code == 255 {
		err = fmt.Errorf("%w: the connection to %s was lost (or the process exited with 255)", err, p.e.Host())
	}
	a := p.r.agent(p.agent)
	a.mu.Lock()
	defer a.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), pullTimeout)
	defer cancel()
	perr := p.e.Pull(ctx, p.agent, a.local)
	for _, x := range a.rw {
		if perr != nil {
			break
		}
		perr = p.e.PullExtra(ctx, p.agent, x.rel, x.local, false, x.keep...)
	}
	if perr != nil {
		p.r.log.Warn("an agent's place did not come back from its host", "agent", p.agent, "host", p.e.Host(), "err", perr)
		if err == nil {
			err = fmt.Errorf("%w: from %s: %w", provider.ErrNotBack, p.e.Host(), perr)
		}
		return err
	}
	a.synced = true
	return err
}
