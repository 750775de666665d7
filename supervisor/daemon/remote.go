package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/executor"
	"github.com/substrat/substrat/executor/ssh"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor"
	"github.com/substrat/substrat/supervisor/daemon/limits"
)

// remotes run the provider processes of agents whose executor is
// ssh://HOST on that host (package executor/ssh), one executor (one
// master connection) per host.
//
// A workspace has one copy on each host its agents run on (a place,
// keyed by the workspace root's path), which they share as they share
// the root here; an agent's own extras (below) have a copy of their own.
// A copy is pushed when its first process starts and comes back when
// its last ends (Pull: what the agent wrote is hostile, see
// executor/ssh; a workspace's root only if one of them could write it,
// so that a read-only view's turn undoes nothing made here meanwhile),
// so that agents at work in the same workspace on the host see each
// other's files, as they do here. A change made here
// meanwhile (by the user, by an agent running here) reaches the host at
// the next push, and is replaced by the host's copy at the next pull
// (the copy is a mirror): one workspace is best kept on one machine.
//
// A turn's process there goes as follows. The sandbox hook (sandboxFor)
// fences the agent's processes of other incarnations on the host (left
// by a daemon that died), then readies the copies (begin): a copy not
// brought back since this daemon started, or since a process whose copy
// did not come back, is salvaged first (newer files only, nothing
// deleted), then pushed (rsync, an exact copy, no .git). It forwards the
// agent's tool socket there when the provider needs it, and builds the
// bwrap command line with the host's paths. The start hook (Start) runs
// it through the executor with the daemon's incarnation; when it has
// ended, however it ended, its copies are released (end): the agent's
// own come back, and the workspace's if no other process uses it, before
// Wait returns; the turn waits for that. A process cut off (a lost
// connection, the host's kill) fails the turn, which is retried as any
// cut-short turn.
//
// What else the process sees of this machine goes as extras beside the
// place on the host: from the Substrat home, at the same path relative
// to it (a git workspace's clone's git directory, read-write, with its
// config, hooks and info read-only over it; a CLI's own HOME,
// read-write; its MCP config), and the workspace's read-only binds
// outside the home by their absolute path under hostPaths (a git
// workspace's repository, which the clone's alternates and origin name;
// a read-only link). The workspace's are in its copy, the provider's in
// the agent's. The read-write ones come back, under Pull's rules, except
// the read-only ones inside them: a clone's config, hooks and info on
// this machine are never replaced by what the host holds (notes on git:
// what an agent writes is data). The program and the package a provider
// runs are expected at the same paths on the host. A read-write link is
// refused, and so is a read-write extra in the store's agents/.
//
// On the host, the copies are under a directory named by this home's id
// (fsstore.HomeID, ssh.Options.Home), apart from other homes' under the
// same root. They go with what they copy: an agent's own when it leaves
// the tree or ends (forget), a workspace's when it is deleted
// (forgetWorkspace). What was removed while no daemon ran is caught up
// with by a sweep of each host (remote_sweep.go), at the daemon's start
// for the hosts of its tree, else at a host's first use in its life,
// which its first process waits for: the home's copies whose agent the
// tree does not have (or has terminated) and whose workspace the store
// does not have are removed, never one a process uses, nor another
// home's, nor one of the old layout (directly under the root; see
// executor/ssh).
//
// The daemon is the only writer of the store: the host gets copies, and
// what comes back lands in workspaces and the providers' own state,
// never in the store's agents/. Resource limits apply there as rlimits
// (memory as the data segment, processes as the login user's); the work
// tools are refused.
type remotes struct {
	log   *slog.Logger
	store *fsstore.Store // the home's: its id names its copies on hosts
	// incarnation is this daemon's: every remote process carries it,
	// and a later daemon's Fence kills those that carry another.
	incarnation string

	mu      sync.Mutex // guards the fields below
	closed  bool
	byHost  map[string]*ssh.Executor
	copies  map[string]*remoteCopy   // by host and key
	pending map[string]*remoteRun    // by agent: readied by its sandbox hook, for its Start hook
	core    *supervisor.Core         // set by start: what the store has, for the sweeps
	swept   map[string]chan struct{} // by host: closed when its sweep is done
}

// remoteCopy is a copy on a host: of a workspace (its root and its
// extras), or of an agent's own extras.
type remoteCopy struct {
	e   *ssh.Executor
	key string // the place's key on the host (an id)

	mu sync.Mutex // held while it is copied either way; guards the fields below
	// running counts the processes that use it.
	running int
	// written: a process that used it since its push could write its
	// root (else it has nothing to bring back, and bringing it back
	// would undo what changed here meanwhile).
	written bool
	// synced: it came back after the last process that used it, in
	// this daemon's life. Until then it may hold work not brought back,
	// and is salvaged before the next push.
	synced bool
	// local is the workspace root it copies ("" for an agent's own),
	// and extras what goes with it, as of its last push; opened names
	// the directory local was found to be then (openLocal), open until
	// it comes back, and done closes it and the extras'.
	local  string
	opened string
	extras []extra
	done   []func()
}

// close closes what c's last push opened.
func (c *remoteCopy) close() {
	for _, f := range c.done {
		f()
	}
	c.done = nil
}

// extra is a file or directory of this machine that a provider process
// sees besides the workspace root: copied to the host beside the place
// (rel: its path there, relative to the copy's), and back after the
// process if read-write, but for keep.
type extra struct {
	rel, local string
	src        bwrap.Source // how local is found, as bwrap binds it here
	opened     string       // local opened (openLocal), while it is in use
	rw         bool
	keep       []string // a read-write one's excludes
}

// openLocal opens src as a local sandbox's bind would be (bwrap.Open: no
// symlink where none may be, none out of where it must stay) and returns
// the path that names what it opened for the executor (ssh.FDPrefix),
// and the closer of it. A copy either way goes to or from that very
// directory: one that an agent swapped for a symlink (a view's subdir,
// a link's parent) since the sandbox was checked is not followed.
func openLocal(src bwrap.Source) (string, func(), error) {
	f, err := bwrap.Open(src)
	if err != nil {
		return "", nil, err
	}
	p := ssh.FDPrefix + strconv.Itoa(int(f.Fd()))
	if dir, _ := bwrap.IsDir(f); dir {
		p += "/"
	}
	return p, func() { f.Close() }, nil
}

// remoteRun is a process readied on a host: the copies it uses.
type remoteRun struct {
	e        *ssh.Executor
	ws, self *remoteCopy
}

func newRemotes(log *slog.Logger, store *fsstore.Store) *remotes {
	id, err := uuid.NewV7()
	if err != nil {
		panic(err) // only if the system's random source fails
	}
	return &remotes{log: log, store: store, incarnation: id.String(), byHost: map[string]*ssh.Executor{},
		copies: map[string]*remoteCopy{}, pending: map[string]*remoteRun{}, swept: map[string]chan struct{}{}}
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
	home, err := fsstore.HomeID(r.store.Layout().Home)
	if err != nil {
		return nil, err
	}
	if home == "" {
		return nil, fmt.Errorf("the home %s has no id yet", r.store.Layout().Home)
	}
	e, err := ssh.New(host, ssh.Options{Home: home})
	if err != nil {
		return nil, err
	}
	r.byHost[host] = e
	r.sweepLocked(e)
	return e, nil
}

// copyOf returns the copy key on e's host.
func (r *remotes) copyOf(e *ssh.Executor, key string) *remoteCopy {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := e.Host() + " " + key
	c := r.copies[k]
	if c == nil {
		c = &remoteCopy{e: e, key: key}
		r.copies[k] = c
	}
	return c
}

// workspaceKey is the key of the copy of the workspace root local: the
// same root, the same copy.
func workspaceKey(local string) string {
	sum := sha256.Sum256([]byte(local))
	return "ws-" + hex.EncodeToString(sum[:16])
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
		local, rootSrc, rootRW := spec.Root.Host, spec.Root, !spec.RootReadOnly
		place, err := e.Place(ctx, workspaceKey(local))
		if err != nil {
			return provider.Process{}, err
		}
		home := h.store.Layout().Home
		wsScope, wsName, _ := strings.Cut(sess.Workspace, "/")
		gitDir := h.store.Layout().WorkspaceGitDir(wsScope, wsName) // a git workspace's, read-write
		sock := ""
		if needs.ToolSocket {
			if sock, err = h.toolSocket(sess.ID); err != nil {
				return provider.Process{}, err
			}
		}
		spec.Root = bwrap.Source{Host: place}
		var shared, own []extra // the workspace's extras, the agent's
		for i, m := range spec.Mounts {
			var x extra
			switch {
			case sock != "" && m.Host == sock:
				// A short name: the path of a Unix socket is.
				remote, err := e.Forward(ctx, sess.ID, "tool.sock", sock)
				if err != nil {
					return provider.Process{}, fmt.Errorf("the tool socket of %s on %s: %w", sess.Name, hostName, err)
				}
				spec.Mounts[i].Source = bwrap.Source{Host: remote}
				continue
			case ofWorkspace[m.Target] && !m.ReadOnly && m.Host != gitDir:
				// A read-write link, into the home or not (a
				// directory of another workspace, link_from's).
				return provider.Process{}, fmt.Errorf("%s runs on %s, and its workspace %s links %s read-write: not on an ssh executor",
					sess.Name, hostName, sess.Workspace, m.Host)
			case strings.HasPrefix(m.Host, home+"/"):
				// The home's: a git workspace's git directory, a CLI's
				// own HOME, its MCP config.
				x = extra{rel: strings.TrimPrefix(m.Host, home+"/"), local: m.Host, src: m.Source, rw: !m.ReadOnly}
			case ofWorkspace[m.Target] && m.ReadOnly:
				// The workspace's, read-only, outside the home: a git
				// workspace's repository (its clone's alternates and
				// origin), a read-only link. A copy goes to the host.
				x = extra{rel: filepath.Join(hostPaths, m.Host), local: m.Host, src: m.Source}
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
			key := sess.ID
			if ofWorkspace[m.Target] {
				key = workspaceKey(local)
				shared = append(shared, x)
			} else {
				own = append(own, x)
			}
			remote, err := e.Extra(ctx, key, x.rel)
			if err != nil {
				return provider.Process{}, err
			}
			spec.Mounts[i].Source = bwrap.Source{Host: remote}
		}
		if err := h.remotes.ready(ctx, e, sess.ID, local, rootSrc, rootRW, shared, own); err != nil {
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

// ready fences agent's stale processes on e's host and begins its
// copies (the workspace root local with shared, its own extras own), for
// its Start hook to take.
func (r *remotes) ready(ctx context.Context, e *ssh.Executor, agent, local string, root bwrap.Source, rootRW bool, shared, own []extra) error {
	if err := r.waitSwept(ctx, e.Host()); err != nil {
		return err
	}
	r.mu.Lock()
	stale := r.pending[agent]
	delete(r.pending, agent)
	r.mu.Unlock()
	if stale != nil {
		stale.release() // readied, never started
	}
	ws, self := r.copyOf(e, workspaceKey(local)), r.copyOf(e, agent)
	pids, err := e.Fence(ctx, agent, r.incarnation)
	if err != nil {
		return err
	}
	if len(pids) > 0 {
		r.log.Warn("fenced processes of an earlier incarnation on the host", "agent", agent, "host", e.Host(), "pids", pids)
		ws.unsync()
		self.unsync()
	}
	if err := self.begin(ctx, "", bwrap.Source{}, false, own); err != nil {
		return err
	}
	if err := ws.begin(ctx, local, root, rootRW, shared); err != nil {
		self.end(ctx)
		return err
	}
	r.mu.Lock()
	r.pending[agent] = &remoteRun{e: e, ws: ws, self: self}
	r.mu.Unlock()
	return nil
}

// take returns the run agent's sandbox hook readied.
func (r *remotes) take(agent string) *remoteRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	run := r.pending[agent]
	delete(r.pending, agent)
	return run
}

// release ends the run's copies, and returns what kept them from coming
// back.
func (run *remoteRun) release() error {
	ctx, cancel := context.WithTimeout(context.Background(), pullTimeout)
	defer cancel()
	err := run.self.end(ctx)
	if werr := run.ws.end(ctx); err == nil {
		err = werr
	}
	return err
}

// unsync marks c as holding work not brought back.
func (c *remoteCopy) unsync() {
	c.mu.Lock()
	c.synced = false
	c.mu.Unlock()
}

// begin counts a process that uses c, and can write its root if rw;
// the first pushes it (local, if not "", found as root says, to the
// place; extras beside it), after a salvage if it is not synced.
func (c *remoteCopy) begin(ctx context.Context, local string, root bwrap.Source, rw bool, extras []extra) (err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running > 0 {
		c.running++
		c.written = c.written || rw
		return nil
	}
	// What is copied either way, until it comes back, is what is found
	// now as the sandbox would find it: opened once, so that a
	// directory swapped for a symlink meanwhile is not followed.
	c.close()
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	opened := ""
	if local != "" {
		p, done, err := openLocal(root)
		if err != nil {
			return err
		}
		c.done = append(c.done, done)
		opened = p
	}
	for i, x := range extras {
		p, done, err := openLocal(x.src)
		if err != nil {
			return err
		}
		c.done = append(c.done, done)
		extras[i].opened = p
		if x.rw {
			extras[i].keep = excludes(x, extras)
		}
	}
	if !c.synced {
		if local != "" {
			if err := c.e.Salvage(ctx, c.key, opened); err != nil {
				return fmt.Errorf("bringing back what was left on %s: %w", c.e.Host(), err)
			}
		}
		for _, x := range extras {
			if x.rw {
				if err := c.e.PullExtra(ctx, c.key, x.rel, x.opened, true, x.keep...); err != nil {
					return fmt.Errorf("bringing back what was left on %s: %w", c.e.Host(), err)
				}
			}
		}
	}
	c.synced = false // until it comes back
	c.local, c.opened, c.extras = local, opened, extras
	for _, x := range extras {
		if err := c.e.PushExtra(ctx, c.key, x.rel, x.opened); err != nil {
			return err
		}
	}
	if local != "" {
		if err := c.e.Push(ctx, c.key, opened); err != nil {
			return err
		}
	}
	c.running = 1
	c.written = rw
	return nil
}

// end counts a process that used c out; after the last, c comes back:
// the place into its root, the read-write extras into theirs.
func (c *remoteCopy) end(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running--; c.running > 0 {
		return nil
	}
	defer c.close()
	var err error
	if c.local != "" && c.written {
		err = c.e.Pull(ctx, c.key, c.opened)
	}
	for _, x := range c.extras {
		if err != nil {
			break
		}
		if x.rw {
			err = c.e.PullExtra(ctx, c.key, x.rel, x.opened, false, x.keep...)
		}
	}
	c.synced = err == nil
	return err
}

// startFor returns the Start hook of an agent: nil on this machine,
// else through its host's executor (remotes), under limits l as
// rlimits (limits.Rlimits: the host's cgroups are not the daemon's to
// write).
func (h *host) startFor(sess *fsstore.Session, l fsstore.Limits) provider.StartFunc {
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
		run := h.remotes.take(sess.ID)
		if run == nil {
			return nil, fmt.Errorf("%s: no process was readied on %s", sess.Name, hostName)
		}
		limits.Rlimits(l, &p)
		proc, err := run.e.Start(ctx, &executor.Cmd{Agent: sess.ID, Incarnation: h.remotes.incarnation,
			Argv: append([]string{p.Path}, p.Args[1:]...), Env: p.Env, Dir: p.Dir,
			Stdin: stdio.Stdin, Stdout: stdio.Stdout, Stderr: stdio.Stderr, ExtraFiles: p.Files})
		if err != nil {
			run.release()
			return nil, err
		}
		return &remoteProcess{Process: proc, run: run, log: h.remotes.log, agent: sess.ID}, nil
	}
}

// pullTimeout bounds the copy back after a process.
const pullTimeout = 10 * time.Minute

// remoteProcess is a process on a host whose Wait releases its copies.
type remoteProcess struct {
	executor.Process
	run   *remoteRun
	log   *slog.Logger
	agent string
}

// Wait waits for the process, then releases its copies; a copy that
// does not come back fails a process that succeeded with
// provider.ErrNotBack (its turn is retried, and the copy salvaged
// before it).
func (p *remoteProcess) Wait() error {
	err := p.Process.Wait()
	host := p.run.e.Host()
	if ee, ok := err.(*executor.ExitError); ok && ee.Code == 255 {
		err = fmt.Errorf("%w: the connection to %s was lost (or the process exited with 255)", err, host)
	}
	if perr := p.run.release(); perr != nil {
		p.log.Warn("an agent's files did not come back from its host", "agent", p.agent, "host", host, "err", perr)
		if err == nil {
			err = fmt.Errorf("%w: from %s: %w", provider.ErrNotBack, host, perr)
		}
	}
	return err
}
