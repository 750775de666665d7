package main

import (
	"os/exec"
	"strings"
	"testing"

	wire "github.com/substrat/substrat/supervisor/api"
)

// TestDaemonLogFollowE2E: `daemon log -f` prints the history, then each
// event as it is committed, and goes on across a kill -9 and restart of
// the daemon, and a clean stop and start, after the last event it
// printed: none twice, none lost. It ends when the agent is archived.
func TestDaemonLogFollowE2E(t *testing.T) {
	d := runDaemon(t)
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "pal", WorkDir: t.TempDir()}, nil)
	d.send("pal", "first")

	cmd := exec.Command("substrat", "daemon", "log", "pal", "-f", "--home", d.home)
	lines, stderr := d.startCLI(t, cmd)
	lines.waitFor(t, "< USER       first")
	lines.waitFor(t, "idle")

	// Committed after the command started: it comes through the stream.
	d.send("pal", "second \x1b[2J\r")
	lines.waitFor(t, `< USER       second \x1b[2J\x0d`)
	lines.waitFor(t, "idle")

	d.kill()
	d.start()
	d.send("pal", "third")
	lines.waitFor(t, "< USER       third")
	lines.waitFor(t, "idle")

	// A clean stop and start: the stream ends with the daemon's error,
	// and the follower goes on too.
	mustCall(d, wire.DaemonStop, struct{}{}, nil)
	<-d.done
	d.cmd = nil
	d.start()
	d.send("pal", "fourth")
	lines.waitFor(t, "< USER       fourth")
	lines.waitFor(t, "idle")

	// Archived: the follower has nothing more to follow, and ends.
	mustCall(d, wire.AgentArchive, wire.RefParams{Ref: "pal"}, nil)
	lines.rest()
	if err := cmd.Wait(); err != nil {
		t.Errorf("daemon log -f ended with %v when the agent was archived; stderr: %s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "pal left agents/ (archived or moved)") {
		t.Errorf("stderr: %q", stderr.String())
	}
	all := strings.Join(lines.all, "\n")
	for _, text := range []string{"< USER       first", "< USER       second", "< USER       third", "< USER       fourth", "created      pal", "TERMINATED"} {
		if n := strings.Count(all, text); n != 1 {
			t.Errorf("%q printed %d times, want once; the output:\n%s", text, n, all)
		}
	}
	// The restart's recovery suspended the session: printed once, between
	// the second turn and the third.
	if i, j, k := strings.Index(all, "second"), strings.Index(all, "session      suspended"), strings.Index(all, "third"); !(i < j && j < k) {
		t.Errorf("the suspension is not between the second and third turns:\n%s", all)
	}
	if strings.ContainsAny(all, "\x1b\r") {
		t.Errorf("raw control characters reached the terminal:\n%q", all)
	}
	if n := strings.Count(stderr.String(), "lost the daemon"); n != 2 {
		t.Errorf("stderr does not say once per restart that the daemon was lost: %q", stderr.String())
	}
}
