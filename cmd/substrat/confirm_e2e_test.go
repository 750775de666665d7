package main

import (
	"fmt"
	"testing"

	"github.com/substrat/substrat/supervisor/api"
)

// TestConfirmInATerminal runs the destructive commands in a real
// terminal: each asks first, anything but y leaves the agent as it was,
// and y does it.
func TestConfirmInATerminal(t *testing.T) {
	bin := lookPath(t, "substrat")
	d := runDaemon(t)
	var lead api.AgentInfo
	mustCall(d, api.AgentCreate, api.CreateParams{Name: "lead"}, &lead)
	mustCall(d, api.AgentCreate, api.CreateParams{Name: "w1", Parent: lead.ID}, &api.AgentInfo{})

	term := fmt.Sprintf("%s agent terminate lead/w1 --home %s; echo exit=$?", bin, d.home)
	x := startTmux(t, 120, 24, term+"; "+term+"; sleep 30")
	x.waitFor("the question", "agent terminate ends lead/w1 for good. Go on? [y/N]")
	x.keys("n", "Enter")
	x.waitFor("the refusal", "error: agent terminate: not confirmed; nothing was done", "exit=1")
	if st := d.agents()["lead/w1"].AgentState; st == "TERMINATED" {
		t.Fatal("n terminated the agent")
	}
	x.keys("y", "Enter")
	x.waitFor("the answer", "terminated lead/w1", "exit=0")
	if st := d.agents()["lead/w1"].AgentState; st != "TERMINATED" {
		t.Fatalf("y left the agent %s", st)
	}
}
