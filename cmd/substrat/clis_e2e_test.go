package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/substrat/substrat/provider/fakeapi"
	wire "github.com/substrat/substrat/supervisor/api"
)

// toolsBin is the pinned CLI name in .tools/npm.
func toolsBin(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(filepath.Dir(filepath.Dir(claudeCLI(t))), ".bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the %s CLI is missing (%v): run make tools", name, err)
	}
	return bin
}

// TestCodexGeminiE2E runs the real Codex and Gemini CLIs under a real
// daemon, each agent in its bwrap sandbox with full permission, against
// loopback fakes of their APIs: a turn, a kill -9 of the daemon, and a
// turn after the restart that resumes the same CLI session (the fake sees
// the first exchange).
func TestCodexGeminiE2E(t *testing.T) {
	remembered := func(conv string) string {
		switch {
		case strings.Contains(conv, "what did I say") && strings.Contains(conv, "remember MANGO"):
			return "you said MANGO"
		case strings.Contains(conv, "what did I say"):
			return "I was never told"
		}
		return "noted"
	}
	codex := fakeapi.NewCodex(func(r fakeapi.CodexRequest) fakeapi.CodexOut { return fakeapi.CodexOut{Text: remembered(r.Raw)} })
	t.Cleanup(codex.Close)
	gemini := fakeapi.NewGemini(func(r fakeapi.GeminiRequest) fakeapi.GeminiOut { return fakeapi.GeminiOut{Text: remembered(r.Raw)} })
	t.Cleanup(gemini.Close)
	dir := filepath.Dir(toolsBin(t, "codex"))
	toolsBin(t, "gemini")
	d := runDaemon(t, "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"),
		"OPENAI_BASE_URL="+codex.URL, "OPENAI_API_KEY=sk-fake-codex",
		"GEMINI_API_KEY=fake-gemini", "GOOGLE_GEMINI_BASE_URL="+gemini.URL)
	d.mustCall(wire.MethodWorkspaceCreate, wire.WorkspaceParams{Name: "box", Network: true}, nil)
	for _, p := range []string{"codex", "gemini"} {
		d.mustCall(wire.MethodAgentCreate, wire.CreateParams{Name: p, Provider: p, Model: "fake-model", Workspace: "box"}, nil)
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
