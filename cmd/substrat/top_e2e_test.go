package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor/api"
)

// tmux drives a program in a real terminal of a private tmux server.
type tmux struct {
	t      *testing.T
	socket string
}

func startTmux(t *testing.T, w, h int, command string) *tmux {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux is not installed (make test installs it)")
	}
	x := &tmux{t: t, socket: fmt.Sprintf("substrat-test-%d", os.Getpid())}
	if out, err := x.run("new-session", "-d", "-x", fmt.Sprint(w), "-y", fmt.Sprint(h), command); err != nil {
		t.Fatalf("tmux: %v: %s", err, out)
	}
	t.Cleanup(func() { x.run("kill-server") })
	return x
}

func (x *tmux) run(args ...string) (string, error) {
	out, err := exec.Command("tmux", append([]string{"-L", x.socket}, args...)...).CombinedOutput()
	return string(out), err
}

// screen is what the terminal shows now.
func (x *tmux) screen() string {
	out, err := x.run("capture-pane", "-p")
	if err != nil {
		x.t.Fatalf("tmux capture-pane: %v: %s", err, out)
	}
	return out
}

func (x *tmux) keys(keys ...string) {
	if out, err := x.run(append([]string{"send-keys"}, keys...)...); err != nil {
		x.t.Fatalf("tmux send-keys: %v: %s", err, out)
	}
}

// waitFor waits until the screen shows every one of want.
func (x *tmux) waitFor(why string, want ...string) string {
	x.t.Helper()
	return x.poll(why, func(s string) string {
		for _, w := range want {
			if !strings.Contains(s, w) {
				return fmt.Sprintf("%q", w)
			}
		}
		return ""
	})
}

// poll waits until missing finds nothing missing on the screen (it
// returns "" then), and returns that screen.
func (x *tmux) poll(why string, missing func(screen string) string) string {
	x.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := x.screen()
		m := missing(s)
		if m == "" {
			return s
		}
		if time.Now().After(deadline) {
			x.t.Fatalf("%s: the screen never showed %s:\n%s", why, m, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTopInATerminal runs `substrat top` in a real 80x24 terminal against
// a real daemon: it shows the tree, sends a message that the agent takes,
// shows the daemon going away at a kill -9, and when a new daemon starts,
// reconnects by itself and shows what its recovery did.
func TestTopInATerminal(t *testing.T) {
	bin := lookPath(t, "substrat")
	d := runDaemon(t)
	var lead, w1 api.AgentInfo
	mustCall(d, api.AgentCreate, api.CreateParams{Name: "lead"}, &lead)
	mustCall(d, api.AgentCreate, api.CreateParams{Name: "w1", Parent: lead.ID}, &w1)
	mustCall(d, api.AgentCreate, api.CreateParams{Name: "w2", Parent: lead.ID}, &api.AgentInfo{})

	x := startTmux(t, 80, 24, fmt.Sprintf("NO_COLOR=1 %s top --home %s; sleep 30", bin, d.home))
	s := x.waitFor("the tree", "substrat top", "lead", "w1", "w2", "IDLE", "? help")
	for i, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if len([]rune(line)) > 80 {
			t.Errorf("line %d is wider than the terminal: %q", i, line)
		}
	}

	// Select w1 and send it a message from the keyboard.
	x.keys("j")
	x.waitFor("the selection", "── lead/w1")
	x.keys("s")
	x.waitFor("the message prompt", "message to lead/w1:")
	x.keys("hello from top", "Enter")
	x.waitFor("the action", "send: done")
	deadline := time.Now().Add(30 * time.Second)
	for d.agents()["lead/w1"].Counters.Turns < 1 {
		if time.Now().After(deadline) {
			t.Fatal("w1 never took the message sent from top")
		}
		time.Sleep(50 * time.Millisecond)
	}
	x.waitFor("the agent's stream", "turn done: hello from top")

	// Gate it, and see it gated.
	x.keys("g")
	x.waitFor("the gate", "gated")
	if !d.agents()["lead/w1"].Gated {
		t.Error("g did not gate w1")
	}

	// The daemon dies; top says so and keeps the last tree.
	d.kill()
	x.waitFor("the daemon gone", "daemon gone", "lead")
	d.start()
	s = x.waitFor("the recovery", "unclean stop", "3 agents")
	if strings.Contains(s, "daemon gone") {
		t.Errorf("top still shows the daemon gone after it came back:\n%s", s)
	}

	// Terminate asks first; n cancels.
	x.keys("T")
	x.waitFor("the question", "terminate lead/w1? y to confirm")
	x.keys("n")
	x.waitFor("the cancel", "terminate: cancelled")
	if d.agents()["lead/w1"].AgentState == "TERMINATED" {
		t.Error("n terminated the agent")
	}
	x.keys("q")
	deadline = time.Now().Add(10 * time.Second)
	for strings.Contains(x.screen(), "? help") {
		if time.Now().After(deadline) {
			t.Fatalf("q did not end top:\n%s", x.screen())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
