package daemon

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor"
	"github.com/substrat/substrat/supervisor/workspace"
	"github.com/substrat/substrat/supervisor/workspace/gitws"
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
}

func newHost(store *fsstore.Store, log *slog.Logger) *host {
	return &host{store: store, log: log, procs: newProcTable(store.FS(), store.Layout().Procs(), log), git: gitws.New(store.Layout())}
}

// Git implements supervisor.Host.
func (h *host) Git() workspace.GitRunner { return h.git }

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

// notifyTimeout bounds a notification command.
const notifyTimeout = 30 * time.Second

// Notify implements supervisor.Host: argv runs with the message's text on
// stdin and SUBSTRAT_FROM, SUBSTRAT_KIND and SUBSTRAT_MESSAGE_ID set; its
// failure is logged, and nothing waits for it.
func (h *host) Notify(argv []string, m *fsstore.Message) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "SUBSTRAT_FROM="+m.FromName, "SUBSTRAT_KIND="+m.Kind, "SUBSTRAT_MESSAGE_ID="+m.ID,
			"SUBSTRAT_HOME="+h.store.Layout().Home)
		cmd.Stdin = strings.NewReader(m.Text)
		if out, err := cmd.CombinedOutput(); err != nil {
			h.log.Warn("the notify command failed", "argv", argv, "err", err, "output", string(out))
		}
	}()
}
