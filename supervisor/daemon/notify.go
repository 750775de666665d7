package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/substrat/substrat/supervisor/api"
)

// Notifications (notify_command).
//
// What a notification is about is stored first (a message is in
// HOME/inbox, a gate or park is an event, before Notify is called); the
// notification is only a nudge to look. The command reads it as one line
// of JSON on stdin (api.Notification); agent text travels only there and
// in the environment, never in the command line. At most limit commands
// run at once. A notification that finds every slot taken joins the one
// burst that waits: when a slot frees, the burst becomes a single
// notification, its newest, with the count of the others in "coalesced"
// and SUBSTRAT_COALESCED. So a flood of any size runs at most limit
// processes (and their pipes) at a time, and remembers one notification
// and a count.

// notifyTimeout bounds a notification command.
const notifyTimeout = 30 * time.Second

// notifyOutputCap is how much of a failed command's output is logged.
const notifyOutputCap = 2048

// notifier runs notify_command with bounded concurrency.
type notifier struct {
	home  string
	log   *slog.Logger
	limit func() int // the slots in force (Settings.NotifyConcurrency)

	mu        sync.Mutex // guards the fields below
	running   int        // commands running (or slots about to run one)
	waiting   *api.Notification
	waitArgv  []string
	waitCount int // messages in the waiting burst
	st        api.NotifyStatus
}

func newNotifier(home string, log *slog.Logger, limit func() int) *notifier {
	return &notifier{home: home, log: log, limit: limit}
}

// notify runs argv for m now if a slot is free, and otherwise folds m
// into the waiting burst. It never blocks.
func (n *notifier) notify(argv []string, note api.Notification) {
	if len(argv) == 0 {
		return
	}
	m := &note
	n.mu.Lock()
	defer n.mu.Unlock()
	n.st.Messages++
	if n.running < max(1, n.limit()) {
		n.running++
		go n.run(argv, m, 0)
		return
	}
	n.waiting, n.waitArgv = m, argv
	n.waitCount++
}

// run runs one notification, then the waiting burst, if any, in the same
// slot; it gives the slot back when nothing waits.
func (n *notifier) run(argv []string, m *api.Notification, coalesced int) {
	for {
		out, err := n.exec(argv, m, coalesced)
		if err != nil {
			n.log.Warn("the notify command failed", "argv", argv, "kind", m.Kind, "message", m.MessageID, "coalesced", coalesced, "err", err, "output", out)
		}
		n.mu.Lock()
		n.st.Runs++
		n.st.Coalesced += coalesced
		if err != nil {
			n.st.Failures++
			n.st.LastError = err.Error()
			n.st.LastFailureAt = time.Now().UTC()
		}
		if n.waiting == nil || n.running > max(1, n.limit()) {
			// Nothing waits, or the limit was lowered: this slot ends (a
			// burst left waiting is taken by another slot).
			n.running--
			n.mu.Unlock()
			return
		}
		argv, m, coalesced = n.waitArgv, n.waiting, n.waitCount-1
		n.waiting, n.waitArgv, n.waitCount = nil, nil, 0
		n.mu.Unlock()
	}
}

// exec runs argv once for m (standing for coalesced more): m as one line
// of JSON on stdin; SUBSTRAT_NOTIFY_KIND, SUBSTRAT_FROM, SUBSTRAT_KIND
// (the message's kind, or the notification's), SUBSTRAT_MESSAGE_ID,
// SUBSTRAT_AGENT_ID, SUBSTRAT_HOME and SUBSTRAT_COALESCED in the
// environment; in its own process group, killed whole after
// notifyTimeout.
func (n *notifier) exec(argv []string, m *api.Notification, coalesced int) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	kind := m.MessageKind
	if kind == "" {
		kind = m.Kind
	}
	cmd.Env = append(os.Environ(), "SUBSTRAT_NOTIFY_KIND="+m.Kind, "SUBSTRAT_FROM="+envSafe(m.From), "SUBSTRAT_KIND="+kind,
		"SUBSTRAT_MESSAGE_ID="+m.MessageID, "SUBSTRAT_AGENT_ID="+m.AgentID,
		"SUBSTRAT_HOME="+n.home, fmt.Sprintf("SUBSTRAT_COALESCED=%d", coalesced))
	note := *m
	note.Coalesced = coalesced
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(note); err != nil {
		return "", err
	}
	cmd.Stdin = &in
	out := &capWriter{max: notifyOutputCap}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("killed after %s: %w", notifyTimeout, err)
	}
	return out.String(), err
}

// envSafe keeps a value fit for the environment: no NUL (exec refuses
// one) and no newline.
func envSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == 0 || r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}

// status returns the counts so far, for daemon.status.
func (n *notifier) status() api.NotifyStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.st
	st.Running, st.Waiting, st.Limit = n.running, n.waitCount, max(1, n.limit())
	return st
}

// capWriter keeps the first max bytes written to it.
type capWriter struct {
	mu  sync.Mutex
	max int
	b   []byte
	cut bool
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	room := w.max - len(w.b)
	if len(p) > room {
		w.cut = true
	}
	w.b = append(w.b, p[:max(0, min(room, len(p)))]...)
	return len(p), nil
}

func (w *capWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cut {
		return string(w.b) + "…"
	}
	return string(w.b)
}
