package main

import (
	"testing"

	wire "github.com/substrat/substrat/supervisor/api"
)

// TestCodexGeminiE2E runs the real Codex and Gemini CLIs under a real
// daemon, each agent in its bwrap sandbox with full permission, against
// loopback fakes of their APIs: a turn, a kill -9 of the daemon, and a
// turn after the restart that resumes the same CLI session (the fake sees
// the first exchange).
func TestCodexGeminiE2E(t *testing.T) {
	d := runCodexGeminiDaemon(t, rememberReply)
	for _, p := range []string{"codex", "gemini"} {
		mustCall(d, wire.AgentCreate, wire.CreateParams{Name: p, Provider: p, Model: "fake-model", Workspace: "box"}, nil)
		if res := d.send(p, "remember MANGO"); res.Text != "noted" {
			t.Fatalf("%s: first turn %q", p, res.Text)
		}
		if d.sessionID(d.agents()[p].ID) == "" {
			t.Fatalf("%s: no session id saved in session.json", p)
		}
	}
	d.kill()
	d.start()
	for _, p := range []string{"codex", "gemini"} {
		if res := d.send(p, "what did I say?"); res.Text != "you said MANGO" {
			t.Errorf("%s after a kill -9: %q", p, res.Text)
		}
	}
}
