// Package daemon is the Substrat daemon process around the core
// (package supervisor): it takes the home's lock, serves daemon.sock,
// schedules turns, ticks reminders, watches the agent directories with
// fsnotify, and is the core's Host: provider processes in their bwrap
// sandboxes, the pid table, and the agents' tool sockets.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/substrat/substrat/supervisor"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/workspace"

	"golang.org/x/sys/unix"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/rpc"
)

// Options configure a daemon.
type Options struct {
	Home      string
	Providers supervisor.Providers
	Version   string
	// LogOutput receives the structured log; default daemon.log in Home.
	LogOutput io.Writer
	// Ready, if set, is called once the socket accepts connections.
	Ready func()
	// Grace is how long a stop waits for running turns; default 10 s.
	Grace time.Duration
	// Flags are the settings given on the command line, by their key in
	// config.json (they win over the environment and the file): the one
	// way a program sets what config.json sets ("max_slots": "2").
	Flags map[string]string
	// Getenv reads the environment; default os.Getenv.
	Getenv func(string) string
}

// Daemon is a running Substrat daemon.
type Daemon struct {
	opts     Options
	store    *fsstore.Store
	core     *supervisor.Core
	host     *host
	settings *settings
	maxSlots int // turns at once, as the settings said at start
	log      *slog.Logger
	srv      *rpc.Server
	started  time.Time
	report   *api.Report

	stopOnce sync.Once
	stopCh   chan struct{}
}

// raiseNoFile raises the soft RLIMIT_NOFILE to the hard limit and returns
// the soft limit in force.
func raiseNoFile() int {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 1024
	}
	if lim.Cur < lim.Max {
		want := lim
		want.Cur = lim.Max
		if unix.Setrlimit(unix.RLIMIT_NOFILE, &want) == nil {
			lim = want
		}
	}
	return int(min(lim.Cur, 1<<20))
}

// Run runs a daemon on opts.Home until ctx is done or a client asks it to
// stop, then stops it gracefully. It returns a *RunningError if another
// daemon holds the home.
func Run(ctx context.Context, opts Options) (err error) {
	opts = opts.withDefaults()
	// Descriptors: the soft limit up to the hard one (systemd and most
	// shells give 1024 soft); open logs get a quarter of it, the
	// connections a quarter, the rest is for providers and sandboxes.
	nofile := raiseNoFile()
	store, err := fsstore.Open(opts.Home, fsstore.Options{MaxOpenLogs: max(64, min(nofile/4, 4096)), NoCopy: fsstore.NoCopy(opts.Home)})
	if err != nil {
		return err
	}
	layout := store.Layout()
	if err := os.Chmod(layout.Home, 0o700); err != nil {
		return err
	}
	lock, err := TryLock(layout.Lock(), layout.Home)
	if err != nil {
		return err
	}
	defer lock.Unlock()
	// The home's identity, made at its first start (a started copy of a
	// home gets one of its own): see fsstore/home.go.
	homeID, err := fsstore.EnsureHomeID(layout.Home)
	if err != nil {
		return err
	}
	logOut := opts.LogOutput
	if logOut == nil {
		f, err := fsstore.OpenAppendRegular(layout.Log(), 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		logOut = f
	}
	log := slog.New(slog.NewJSONHandler(logOut, nil))

	unclean, err := markStarted(store)
	if err != nil {
		return err
	}
	defer func() {
		// A start that failed before serving changed nothing; keep the
		// record of how the previous daemon ended.
		if err != nil && !unclean {
			os.Remove(layout.Pid())
		}
	}()
	d, err := newDaemon(opts, store, log)
	if err != nil {
		return err
	}
	log.Info("daemon starting", "pid", os.Getpid(), "home", layout.Home, "home_id", homeID, "unclean", unclean, "version", opts.Version)
	// Watches first, then the scan: what changes during the scan is seen.
	watcher, err := NewWatcher(d.core, layout.AgentsDir(), log)
	if err != nil {
		return err
	}
	if err := d.recover(ctx, unclean); err != nil {
		return err
	}
	// Pods on Kubernetes executors agree with the store (kube.go).
	d.host.kubes.reconcile(d.core)
	// Copies on ssh hosts of what is gone from the store (remote_sweep.go).
	d.host.remotes.start(d.core)
	ln, err := d.listen(nofile)
	if err != nil {
		return err
	}
	d.serve(ctx, ln, watcher)
	return nil
}

// withDefaults fills in what opts leaves out.
func (opts Options) withDefaults() Options {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.Grace == 0 {
		opts.Grace = 10 * time.Second
	}
	return opts
}

// markStarted writes the pid file, and reports whether one was left
// behind: the last daemon did not stop cleanly. It removes the socket of
// a dead daemon, which is stale (only the lock holder may).
func markStarted(store *fsstore.Store) (unclean bool, err error) {
	layout := store.Layout()
	_, perr := os.Stat(layout.Pid())
	unclean = perr == nil
	if err := fsstore.ReplaceFile(store.FS(), layout.Pid(), []byte(fmt.Sprintf("%d\n", os.Getpid()))); err != nil {
		return unclean, err
	}
	if err := os.Remove(layout.Socket()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return unclean, err
	}
	return unclean, nil
}

// newDaemon loads the settings and makes the daemon's host and core.
func newDaemon(opts Options, store *fsstore.Store, log *slog.Logger) (*Daemon, error) {
	d := &Daemon{opts: opts, store: store, log: log, started: time.Now(), stopCh: make(chan struct{})}
	var err error
	if d.settings, err = loadSettings(store.Layout().Config(), opts.Getenv, opts.Flags); err != nil {
		return nil, err
	}
	eff := d.settings.effective()
	if eff.FileError != "" {
		log.Error("config.json refused; starting with the other settings", "err", eff.FileError)
	}
	d.maxSlots = eff.MaxSlots
	set := eff.Settings
	d.host = newHost(store, log)
	d.core = supervisor.New(supervisor.Config{Store: store, Providers: opts.Providers, Log: log, Host: d.host, Settings: &set})
	d.host.core = d.core
	return d, nil
}

// recover runs the core's recovery and logs what it found.
func (d *Daemon) recover(ctx context.Context, unclean bool) error {
	rep, err := d.core.Recover(ctx, unclean)
	if err != nil {
		d.log.Error("recovery failed", "err", err)
		return fmt.Errorf("recovery: %w", err)
	}
	d.report = rep
	layout := d.store.Layout()
	for _, p := range workspace.NewStore(layout, d.store.FS()).GitProblems() {
		d.log.Warn("git workspace: "+p, "hint", "substrat fsck lists these; delete the workspace, or put the repository back")
	}
	d.log.Info("recovery done", "agents", rep.Agents, "kept_out", len(rep.KeptOut), "suspended", len(rep.Suspended),
		"redelivered", len(rep.Redelivered), "ms", rep.DurationMS)
	return nil
}

// listen opens the daemon's socket, for the owner only.
func (d *Daemon) listen(nofile int) (net.Listener, error) {
	layout := d.store.Layout()
	if n := len(layout.Socket()); n > maxSocketPath {
		return nil, fmt.Errorf("the home %s is too long for its Unix socket (%s is %d bytes; the kernel takes at most %d): use a shorter --home",
			layout.Home, layout.Socket(), n, maxSocketPath)
	}
	if n := len(layout.ToolSocket(fsstore.NewID())); n > maxSocketPath {
		d.log.Warn("the home is too long for the tool sockets of sandboxed agents; they will fail to start: use a shorter --home",
			"home", layout.Home, "socket_bytes", n, "max", maxSocketPath)
	}
	ln, err := net.Listen("unix", layout.Socket())
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(layout.Socket(), 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	d.srv = rpc.NewServer(d.log)
	d.srv.MaxConns = max(64, min(nofile/4, 4096))
	d.srv.SamePIDNamespace = true // no client from inside a sandbox
	d.register()
	return ln, nil
}

// serve serves ln and runs the scheduler, the ticker and the watcher
// until ctx ends, a stop is asked for, or the socket fails; then it stops
// gracefully: no new connections, running turns finish (or are cancelled
// after the grace period), every live session is suspended.
func (d *Daemon) serve(ctx context.Context, ln net.Listener, watcher *Watcher) {
	serveErr := make(chan error, 1)
	go func() { serveErr <- d.srv.Serve(ln) }()
	sctx, stopSched := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); d.schedule(sctx) }()
	go func() { defer wg.Done(); d.tick(sctx) }()
	go func() { defer wg.Done(); watcher.Run(sctx) }()
	if d.opts.Ready != nil {
		d.opts.Ready()
	}
	select {
	case <-ctx.Done():
		d.log.Info("stopping: signal")
	case <-d.stopCh:
		d.log.Info("stopping: requested")
	case err := <-serveErr:
		d.log.Error("socket failed", "err", err)
	}
	ln.Close()
	d.core.Shutdown(context.Background(), d.opts.Grace)
	stopSched()
	wg.Wait()
	d.srv.Close()
	layout := d.store.Layout()
	os.Remove(layout.Socket())
	os.Remove(layout.Pid())
	d.store.FS().SyncDir(layout.Home)
	d.log.Info("daemon stopped")
}

func (d *Daemon) requestStop() {
	d.stopOnce.Do(func() { close(d.stopCh) })
}

// tick fires due reminders once a second, and once a minute removes the
// agents/<id> copies of agents archived more than fsstore.ArchiveGrace ago.
func (d *Daemon) tick(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	d.core.Tick(time.Now())
	var swept time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			d.core.Tick(now)
			d.checkConfig()
			if now.Sub(swept) >= time.Minute {
				swept = now
				ids, err := d.store.SweepArchived(now)
				if err != nil {
					d.log.Warn("sweeping archived agents' copies in agents/", "err", err)
				} else if len(ids) > 0 {
					d.log.Info("removed the agents/ copies of archived agents", "count", len(ids))
				}
			}
		}
	}
}

// schedule runs turns for runnable agents, at most MaxSlots at once.
func (d *Daemon) schedule(ctx context.Context) {
	sem := make(chan struct{}, d.maxSlots)
	var mu sync.Mutex
	inflight := map[string]bool{}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
	dispatch:
		for _, id := range d.core.Runnable() {
			mu.Lock()
			busy := inflight[id]
			mu.Unlock()
			if busy {
				continue
			}
			select {
			case sem <- struct{}{}:
			default:
				// Every slot is taken. A turn that ends signals, and the
				// runnable agents are read afresh then: an agent that
				// became runnable meanwhile is not held behind the rest
				// of this list (a thousand agents resuming at one reset).
				break dispatch
			}
			mu.Lock()
			inflight[id] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := d.core.RunTurn(ctx, id); err != nil {
					d.log.Error("turn error", "agent", id, "err", err)
				}
				mu.Lock()
				delete(inflight, id)
				mu.Unlock()
				<-sem
				d.core.Signal()
			}()
		}
		select {
		case <-ctx.Done():
			return
		case <-d.core.Wake():
		}
	}
}
