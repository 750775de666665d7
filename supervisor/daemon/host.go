package daemon

import (
	"log/slog"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor"
)

// host is the core's Host in the daemon: the pid table of provider
// processes, their bwrap sandboxes, and the agents' tool sockets.
type host struct {
	core    *supervisor.Core // set once the core exists
	store   *fsstore.Store
	log     *slog.Logger
	procs   *procTable
	sockets toolSockets
	notify  *notifier
}

func newHost(store *fsstore.Store, log *slog.Logger) *host {
	h := &host{store: store, log: log, procs: newProcTable(store.FS(), store.Layout().Procs(), log)}
	h.notify = newNotifier(store.Layout().Home, log, func() int {
		if h.core == nil {
			return supervisor.DefaultSettings().NotifyConcurrency
		}
		return h.core.Settings().NotifyConcurrency
	})
	return h
}

// Track implements supervisor.Host.
func (h *host) Track(agent string) func(pid int) func() { return h.procs.track(agent) }

// Sandbox implements supervisor.Host.
func (h *host) Sandbox(sess *fsstore.Session) provider.SandboxFunc { return h.sandboxFor(sess) }

// CloseToolSocket implements supervisor.Host.
func (h *host) CloseToolSocket(id string) {
	if id == "" {
		h.closeToolSockets()
		return
	}
	h.closeToolSocket(id)
}

// Reap implements supervisor.Host.
func (h *host) Reap() []string { return reap(h.store.Layout().Procs(), h.log) }

// Notify implements supervisor.Host: argv runs for m, at most
// Settings.NotifyConcurrency at a time, a burst coalesced (notify.go).
// Nothing waits for it.
func (h *host) Notify(argv []string, m *fsstore.Message) { h.notify.notify(argv, m) }
