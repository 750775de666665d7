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
}

func newHost(store *fsstore.Store, log *slog.Logger) *host {
	return &host{store: store, log: log, procs: newProcTable(store.FS(), store.Layout().Procs(), log), git: gitws.New(store.Layout())}
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
