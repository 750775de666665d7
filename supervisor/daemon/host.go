package daemon

import (
	"context"
	"log/slog"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/daemon/limits"
	"github.com/substrat/substrat/supervisor/workspace"
	"github.com/substrat/substrat/supervisor/workspace/gitws"
	"github.com/substrat/substrat/supervisor/worktools"
)

// host is the core's Host in the daemon: the pid table of provider
// processes, their bwrap sandboxes, their resource limits (a cgroup per
// agent), and the agents' tool sockets.
type host struct {
	core    *supervisor.Core // set once the core exists
	store   *fsstore.Store
	log     *slog.Logger
	procs   *procTable
	sockets toolSockets
	git     *gitws.Runner
	notify  *notifier
	limits  *limits.Manager
	remotes *remotes
	kubes   *kubes
}

func newHost(store *fsstore.Store, log *slog.Logger) *host {
	h := &host{store: store, log: log, procs: newProcTable(store.FS(), store.Layout().Procs(), log), git: gitws.New(store.Layout()),
		limits: limits.New(store.Layout().Home, log), remotes: newRemotes(log, store)}
	h.kubes = newKubes(log, h.remotes.incarnation, store.Layout().Home)
	h.notify = newNotifier(store.Layout().Home, log, func() int {
		if h.core == nil {
			return supervisor.DefaultSettings().NotifyConcurrency
		}
		return h.core.Settings().NotifyConcurrency
	})
	return h
}

// Work implements supervisor.Host.
func (h *host) Work() supervisor.WorkTools { return workTools{h} }

// Limit implements supervisor.Host.
func (h *host) Limit(agent string, l fsstore.Limits) provider.LimitFunc {
	if l.IsZero() {
		return nil
	}
	return func(p *provider.Process) error { return h.limits.Wrap(agent, l, p) }
}

// LimitReached implements supervisor.Host.
func (h *host) LimitReached(agent string) string { return h.limits.Reached(agent) }

// workTools are the core's work tools: package worktools. The file
// tools work on a workspace's root here, and refuse while a copy of it is
// in use on a host or in a pod (inUse): what they wrote would be
// replaced when the copy comes back, and what they read may be old. A
// shell in a pod waits for no other process there: it refuses too.
type workTools struct{ h *host }

func (w workTools) Shell(ctx context.Context, pl supervisor.Workplace, command string, timeout time.Duration) (string, error) {
	if pl.RemoteStart != nil {
		if err := w.h.kubes.inUse(pl); err != nil {
			return "", err
		}
	}
	return worktools.Place(pl).Shell(ctx, command, timeout)
}

func (w workTools) ReadFile(pl supervisor.Workplace, p string, from, to int) (string, error) {
	if err := w.inUse(pl); err != nil {
		return "", err
	}
	return worktools.Place(pl).ReadFile(p, from, to)
}

func (w workTools) WriteFile(pl supervisor.Workplace, p, content string) (string, error) {
	if err := w.inUse(pl); err != nil {
		return "", err
	}
	return worktools.Place(pl).WriteFile(p, content)
}

func (w workTools) EditFile(pl supervisor.Workplace, p, old, new string) (string, error) {
	if err := w.inUse(pl); err != nil {
		return "", err
	}
	return worktools.Place(pl).EditFile(p, old, new)
}

// inUse says, as an error, whether pl's workspace root is in use on a
// host or in a pod.
func (w workTools) inUse(pl supervisor.Workplace) error {
	if err := w.h.remotes.inUse(pl); err != nil {
		return err
	}
	return w.h.kubes.inUse(pl)
}

// Git implements supervisor.Host.
func (h *host) Git() workspace.GitRunner { return h.git }

// Track implements supervisor.Host.
func (h *host) Track(agent string) func(pid int) func() { return h.procs.track(agent) }

// Sandbox implements supervisor.Host.
func (h *host) Sandbox(sess *fsstore.Session) provider.SandboxFunc { return h.sandboxFor(sess) }

// Start implements supervisor.Host: an agent on an ssh executor runs
// its processes there (remote.go), one on a Kubernetes executor in its
// pod (kube.go).
func (h *host) Start(sess *fsstore.Session, l fsstore.Limits) provider.StartFunc {
	if target := fsstore.ExecutorKubernetes(sess.Executor); target != "" {
		return h.k8sStart(sess, l, target)
	}
	return h.startFor(sess, l)
}

// ToolSocket implements supervisor.Host: on a Kubernetes executor, the
// path in the agent's pod that a relay ties to the socket (kube_cli.go).
func (h *host) ToolSocket(sess *fsstore.Session) (string, error) {
	path, err := h.toolSocket(sess.ID)
	if err != nil || fsstore.ExecutorKubernetes(sess.Executor) == "" {
		return path, err
	}
	return podToolSocket(sess.ID), nil
}

// CloseToolSocket implements supervisor.Host.
// The agent's cgroup goes with its socket, and its own copy on a host
// (remote.go): it runs nothing more.
func (h *host) CloseToolSocket(id string) {
	if id == "" {
		h.closeToolSockets()
		h.limits.Close()
		h.remotes.close()
		return
	}
	h.closeToolSocket(id)
	h.remotes.forget(id)
	h.kubes.forget(id)
	if err := h.limits.Remove(id); err != nil {
		h.log.Warn("agent cgroup not removed", "agent", id, "err", err)
	}
}

// Reap implements supervisor.Host.
// The groups of agents' processes a daemon that died left behind are
// emptied and removed too.
func (h *host) Reap() []string {
	return append(reap(h.store.Layout().Procs(), h.log), h.limits.RemoveAll()...)
}

// Notify implements supervisor.Host: argv runs for n, at most
// Settings.NotifyConcurrency at a time, a burst coalesced (notify.go).
// Nothing waits for it.
func (h *host) Notify(argv []string, n api.Notification) { h.notify.notify(argv, n) }
