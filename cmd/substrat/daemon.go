package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/substrat/substrat/supervisor/config"
	"github.com/substrat/substrat/supervisor/daemon"

	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/rpc"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/internal/jsontext"
)

// DaemonCmd groups the daemon commands.
type DaemonCmd struct {
	Start  DaemonStartCmd  `cmd:"" help:"Start the daemon in the background; returns once it answers."`
	Stop   DaemonStopCmd   `cmd:"" help:"Stop the daemon gracefully: live sessions are suspended and saved."`
	Status DaemonStatusCmd `cmd:"" help:"Show whether the daemon runs, and what it does."`
	Run    DaemonRunCmd    `cmd:"" help:"Run the daemon in the foreground (for systemd); stops on SIGTERM or SIGINT."`
	Watch  DaemonWatchCmd  `cmd:"" help:"Follow live events of every agent, or of one."`
	Log    DaemonLogCmd    `cmd:"" help:"Print an agent's history as a conversation (or its events, or JSON); -f follows it live."`
}

// DaemonRunCmd runs the daemon in the foreground.
type DaemonRunCmd struct {
	settingFlags
}

// settingFlags are the settings a daemon may be started with; they win
// over the environment and HOME/config.json (substrat config show).
type settingFlags struct {
	MaxSlots    int           `help:"Turns that may run at once, and the default pool's size (default 4; config.json: max_slots)."`
	TurnTimeout time.Duration `help:"How long a turn may run (default 10m; config.json: turn_timeout)."`
}

// flags returns the settings given, by their key in config.json.
func (f settingFlags) flags() map[string]string {
	out := map[string]string{}
	if f.MaxSlots > 0 {
		out["max_slots"] = fmt.Sprint(f.MaxSlots)
	}
	if f.TurnTimeout > 0 {
		out["turn_timeout"] = f.TurnTimeout.String()
	}
	return out
}

// args returns the flags given, as daemon run takes them.
func (f settingFlags) args() []string {
	var out []string
	if f.MaxSlots > 0 {
		out = append(out, "--max-slots", fmt.Sprint(f.MaxSlots))
	}
	if f.TurnTimeout > 0 {
		out = append(out, "--turn-timeout", f.TurnTimeout.String())
	}
	return out
}

// Run runs the daemon until a signal or 'daemon stop'.
func (c *DaemonRunCmd) Run(g *Globals) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err := daemon.Run(ctx, daemon.Options{Home: g.Home, Flags: c.flags(), Providers: providers(), Version: version,
		Ready: func() {
			fmt.Fprintf(os.Stderr, "substrat daemon %s ready on %s (pid %d)\n", version, g.Home, os.Getpid())
		}})
	var running *daemon.RunningError
	if errors.As(err, &running) && running.Role == daemon.RoleRepair {
		return &exitError{code: 1, msg: running.Error(), hint: "start the daemon when it has finished"}
	}
	if errors.As(err, &running) {
		return &exitError{code: 1, msg: fmt.Sprintf("already running (pid %d) on %s", running.Pid, g.Home),
			hint: "stop it with 'substrat daemon stop" + g.homeFlag() + "'"}
	}
	return err
}

// DaemonStartCmd starts the daemon in the background.
type DaemonStartCmd struct {
	settingFlags
	Timeout time.Duration `help:"How long to wait for the daemon to answer." default:"60s"`
}

// Run starts 'substrat daemon run' detached and waits for its socket.
func (c *DaemonStartCmd) Run(g *Globals) error {
	pid, err := startDaemon(g, c.settingFlags, c.Timeout)
	if err != nil {
		return err
	}
	st, _ := call(g, api.DaemonStatus, struct{}{})
	if g.JSON {
		return printJSON(map[string]any{"pid": pid, "home": g.Home, "kept_out": len(st.KeptOut)})
	}
	fmt.Printf("daemon started (pid %d) on %s\n", pid, g.Home)
	printKeptOut(os.Stdout, st.KeptOut)
	return nil
}

// printKeptOut says which agent directories the daemon's start kept out
// of the live tree (they are not in agent list, and their children show
// as roots), and where to read why.
func printKeptOut(w io.Writer, kept []fsstore.Finding) {
	if len(kept) == 0 {
		return
	}
	fmt.Fprintf(w, "%s kept out: see `substrat recover`\n", plural(len(kept), "agent"))
	for _, f := range kept {
		fmt.Fprintf(w, "  KEPT OUT %s: %s\n", f.Path, f.Detail)
	}
}

func startDaemon(g *Globals, set settingFlags, timeout time.Duration) (int, error) {
	layout := fsstore.Layout{Home: g.Home}
	if held, pid, role := daemon.HeldBy(layout.Lock()); held {
		if role == daemon.RoleRepair {
			return 0, &exitError{code: 1, msg: fmt.Sprintf("'substrat fsck --repair' (pid %d) is repairing %s", pid, g.Home),
				hint: "start the daemon when it has finished"}
		}
		return 0, &exitError{code: 1, msg: fmt.Sprintf("already running (pid %d) on %s", pid, g.Home)}
	}
	if err := os.MkdirAll(g.Home, 0o700); err != nil {
		return 0, err
	}
	// The daemon refuses a config.json it cannot use and starts without
	// it (its log says so); say so here too, where the user looks.
	if _, err := config.Load(layout.Config()); err != nil {
		fmt.Fprintf(os.Stderr, "warning: %s is refused, and the daemon starts with the other settings: %v\n"+
			"hint: fix or remove it; 'substrat config show' shows what is in force\n", layout.Config(), err)
	}
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	logf, err := fsstore.OpenAppendRegular(layout.Log(), 0o600)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command(self, append([]string{"daemon", "run", "--home", g.Home}, set.args()...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return 0, &exitError{code: 1, msg: fmt.Sprintf("the daemon exited at start (%v): %s", err, lastLogLine(layout.Log())),
				hint: "see " + layout.Log()}
		case <-deadline:
			return 0, &exitError{code: 1, msg: fmt.Sprintf("the daemon (pid %d) did not answer within %s", cmd.Process.Pid, timeout),
				hint: "see " + layout.Log()}
		case <-tick.C:
			st, err := call(g, api.DaemonStatus, struct{}{})
			if err == nil {
				cmd.Process.Release()
				return st.Pid, nil
			}
		}
	}
}

// logTail is how much of the end of the log lastLogLine reads.
const logTail = 64 << 10

// lastLogLine returns the most telling line of the end of the log. It
// reads only the log's last logTail bytes, and only from a regular file.
func lastLogLine(path string) string {
	f, err := fsstore.OpenRegular(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-logTail, 0)
	data, err := io.ReadAll(io.NewSectionReader(f, off, logTail))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	for i := len(lines) - 1; i >= 0 && i >= len(lines)-20; i-- {
		l := lines[i]
		if strings.HasPrefix(l, "error:") {
			return l
		}
		var rec struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
			Err   string `json:"err"`
		}
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Level == "ERROR" {
			return rec.Msg + ": " + rec.Err
		}
	}
	return lines[len(lines)-1]
}

// DaemonStopCmd stops the daemon.
type DaemonStopCmd struct {
	Timeout time.Duration `help:"How long to wait for it to exit." default:"60s"`
}

// Run asks the daemon to stop and waits until it has released its lock.
func (c *DaemonStopCmd) Run(g *Globals) error {
	layout := fsstore.Layout{Home: g.Home}
	held, pid := daemon.Held(layout.Lock())
	if _, err := call(g, api.DaemonStop, struct{}{}); err != nil {
		return err
	}
	deadline := time.Now().Add(c.Timeout)
	for time.Now().Before(deadline) {
		if h, _ := daemon.Held(layout.Lock()); !h {
			if !held {
				pid = 0
			}
			if g.JSON {
				return printJSON(map[string]any{"stopped": true, "pid": pid})
			}
			fmt.Printf("daemon stopped (pid %d); live sessions were suspended\n", pid)
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fail(fmt.Sprintf("the daemon (pid %d) is still running after %s", pid, c.Timeout), "see "+layout.Log())
}

// DaemonStatusCmd shows the daemon's status.
type DaemonStatusCmd struct{}

// Run prints the status.
func (DaemonStatusCmd) Run(g *Globals) error {
	st, err := call(g, api.DaemonStatus, struct{}{})
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) && ee.code == 3 && g.JSON {
			printJSON(map[string]any{"running": false, "home": g.Home})
		}
		return err
	}
	if g.JSON {
		return printJSON(struct {
			Running bool `json:"running"`
			api.StatusResult
		}{true, st})
	}
	fmt.Printf("running: pid %d, version %s, up %s\nhome: %s\nagents: %d (%d busy, %d live sessions, %d slots)\n",
		st.Pid, st.Version, time.Since(st.StartedAt).Round(time.Second), st.Home, st.Agents, st.Busy, st.LiveSessions, st.MaxSlots)
	if l := st.Limits; l != nil {
		fmt.Printf("limits: %s (%s); defaults: %s; %d agent groups\n", l.Mechanism, l.Detail, defaultsText(l.Defaults), l.Groups)
	}
	printKeptOut(os.Stdout, st.KeptOut)
	if n := st.Notify; n != nil && n.Messages > 0 {
		fmt.Printf("notify: %d messages to USER, %d notifications run (%d more messages coalesced into them), %d failed, %d running, %d waiting (at most %d at once)\n",
			n.Messages, n.Runs, n.Coalesced, n.Failures, n.Running, n.Waiting, n.Limit)
		if n.LastError != "" {
			fmt.Printf("notify: last failure at %s: %s\n", n.LastFailureAt.Local().Format(time.DateTime), n.LastError)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(st.Parked)) {
		fmt.Printf("parked: provider %s is rate limited until %s; its agents wait (substrat agent wake REF tries one now)\n",
			p, st.Parked[p].Local().Format(time.DateTime))
	}
	return nil
}

// DaemonWatchCmd follows live events.
type DaemonWatchCmd struct {
	Agent string `arg:"" optional:"" predictor:"agent" help:"Only this agent (a name, path or id)."`
	Until string `help:"Exit after the first event of this type (e.g. turn_done)." placeholder:"TYPE"`
}

// Run streams events until interrupted.
func (c *DaemonWatchCmd) Run(g *Globals) error {
	return follow(g, api.DaemonWatch, api.RefParams{Ref: c.Agent}, c.Until)
}

var errUntil = errors.New("until reached")

// follow streams a subscription method until the user interrupts, or
// until an event of type until has been printed.
func follow(g *Globals, m api.StreamMethod[api.RefParams, api.WatchFrame, struct{}], p api.RefParams, until string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cl, err := g.client(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	_, err = rpc.StreamRaw(ctx, cl, m, p, func(raw json.RawMessage) error {
		var e watchLine
		if err := json.Unmarshal(raw, &e); err != nil {
			return err
		}
		if g.JSON {
			printJSONLine(raw)
		} else {
			fmt.Println(e.String())
		}
		if until != "" && string(e.Type) == until {
			return errUntil
		}
		return nil
	})
	if ctx.Err() != nil || errors.Is(err, errUntil) {
		return nil
	}
	return err
}

type watchLine struct {
	Agent string          `json:"agent"`
	Name  string          `json:"name"`
	Type  api.WatchType   `json:"type"`
	Seq   uint64          `json:"seq"`
	Time  time.Time       `json:"ts"`
	Data  json.RawMessage `json:"data"`
	Count int             `json:"count"` // of a "dropped" marker
}

func (w watchLine) String() string {
	if w.Type == api.WatchDropped {
		return fmt.Sprintf("[... %d events dropped: this reader fell behind the daemon; daemon log AGENT has them all ...]", w.Count)
	}
	data := string(jsontext.Readable(w.Data))
	if len(data) > 200 {
		data = data[:200] + "..."
	}
	return fmt.Sprintf("%s %-12s %-18s %s", w.Time.Local().Format("15:04:05.000"), w.Name, w.Type, data)
}

// defaultsText is config.json's default limits as status shows them.
func defaultsText(l fsstore.Limits) string {
	if l.IsZero() {
		return "none"
	}
	return strings.ReplaceAll(l.String(), "default", "none")
}
