package daemon

import (
	"context"
	"log/slog"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor"
	"github.com/substrat/substrat/supervisor/workspace"
	"github.com/substrat/substrat/supervisor/workspace/gitws"
	"github.com/substrat/substrat/supervisor/worktools"
)

// host is the core's Host in the daemon: the pid table of provider
// processes, their bwrap sandboxes, and the agents' tool sockets.
type host struct {
	core    *supervisor.Core // set once the core exists
	store   *fsstore.Store
	log     *slog.Logger
	procs   *procTable
	sockets toolSockets
	git     *gitws.Runner
	notify  *notifier
}

func newHost(store *fsstore.Store, log *slog.Logger) *host {
	h := &host{store: store, log: log, procs: newProcTable(store.FS(), store.Layout().Procs(), log), git: gitws.New(store.Layout())}
	h.notify = newNotifier(store.Layout().Home, log, func() int {
		if h.core == nil {
			return supervisor.DefaultSettings().NotifyConcurrency
		}
		return h.core.Settings().NotifyConcurrency
	})
	return h
}

// Work implements supervisor.Host.
func (h *host) Work() supervisor.WorkTools { return workTools{} }

// workTools are the core's work tools: package worktools.
type workTools struct{}

func (workTools) Shell(ctx context.Context, pl supervisor.Workplace, command string, timeout time.Duration) (string, error) {
	return worktools.Place(pl).Shell(ctx, command, timeout)
}

func (workTools) ReadFile(pl supervisor.Workplace, p string, from, to int) (string, error) {
	return worktools.Place(pl).ReadFile(p, from, to)
}

func (workTools) WriteFile(pl supervisor.Workplace, p, content string) (string, error) {
	return worktools.Place(pl).WriteFile(p, content)
}

func (workTools) EditFile(pl supervisor.Workplace, p, old, new string) (string, error) {
	return worktools.Place(pl).EditFile(p, old, new)
}

// Git implements supervisor.Host.
func (h *host) Git() workspace.GitRunner { return h.git }

// Track implements supervisor.Host.
func (h *host) Track(agent string) func(pid int) func() { return h.procs.track(agent) }

// Sandbox implements supervisor.Host.
func (h *host) Sandbox(sess *fsstore.Session) provider.SandboxFunc { return h.sandboxFor(sess) }

// ToolSocket implements supervisor.Host.
func (h *host) ToolSocket(id string) (string, error) { return h.toolSocket(id) }

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
