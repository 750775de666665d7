package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/substrat/substrat/provider/fakeapi"
	wire "github.com/substrat/substrat/supervisor/api"
)

// seen says which instructions a request carried.
func seen(raw string) string {
	switch {
	case strings.Contains(raw, "INSTR-BETA") && strings.Contains(raw, "INSTR-ALPHA"):
		return "saw both"
	case strings.Contains(raw, "INSTR-BETA"):
		return "saw BETA"
	case strings.Contains(raw, "INSTR-ALPHA"):
		return "saw ALPHA"
	}
	return "saw none"
}

// TestInstructionsReachEveryCLI: an agent's instructions changed while
// its CLI session lives (agent.instructions, as `substrat agent
// instructions REF --set` does) are in the very next request each real
// CLI (Claude Code, Codex, Gemini) sends its API, and the old ones are
// not; no restart of the daemon or the session is needed.
func TestInstructionsReachEveryCLI(t *testing.T) {
	claude := fakeapi.NewClaude(func(r fakeapi.ClaudeRequest) fakeapi.ClaudeOut {
		// A resumed claude session keeps its first system prompt; the new
		// instructions come in the turn's message.
		last := r.Messages[len(r.Messages)-1]
		if strings.Contains(string(r.System), "INSTR-ALPHA") && strings.Contains(last.Text(), "INSTR-BETA") {
			return fakeapi.ClaudeOut{Text: "saw BETA"}
		}
		return fakeapi.ClaudeOut{Text: seen(string(r.System))}
	})
	t.Cleanup(claude.Close)
	codex := fakeapi.NewCodex(func(r fakeapi.CodexRequest) fakeapi.CodexOut { return fakeapi.CodexOut{Text: seen(lastInput(r.Raw))} })
	t.Cleanup(codex.Close)
	gemini := fakeapi.NewGemini(func(r fakeapi.GeminiRequest) fakeapi.GeminiOut {
		return fakeapi.GeminiOut{Text: seen(lastInput(r.Raw))}
	})
	t.Cleanup(gemini.Close)
	cli := claudeCLI(t)
	dir := filepath.Dir(toolsBin(t, "codex"))
	toolsBin(t, "gemini")
	env := append(claudeEnv(cli, claude.URL), "PATH="+dir+string(os.PathListSeparator)+filepath.Dir(cli)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"OPENAI_BASE_URL="+codex.URL, "OPENAI_API_KEY=sk-fake-codex",
		"GEMINI_API_KEY=fake-gemini", "GOOGLE_GEMINI_BASE_URL="+gemini.URL)
	d := runDaemon(t, env...)
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "box", Network: true}, nil)
	for _, p := range []string{"claude", "codex", "gemini"} {
		mustCall(d, wire.AgentCreate, wire.CreateParams{Name: p, Provider: p, Model: "fake-model", Workspace: "box",
			Instructions: "You are INSTR-ALPHA."}, nil)
		if res := d.send(p, "first"); res.Text != "saw ALPHA" {
			t.Fatalf("%s: first turn %q", p, res.Text)
		}
		mustCall(d, wire.AgentInstructions, wire.InstructionsParams{Ref: p, Instructions: "You are INSTR-BETA now."}, nil)
		if res := d.send(p, "second"); res.Text != "saw BETA" {
			t.Errorf("%s: the turn after the change %q, want the new instructions only", p, res.Text)
		}
	}
}

// lastInput is the part of a request body from its last user input on:
// codex and gemini carry the instructions in each turn's prompt, and the
// history keeps the earlier ones.
func lastInput(raw string) string {
	raw, _, _ = strings.Cut(raw, `"systemInstruction"`) // gemini's own system prompt has such tags
	i := strings.LastIndex(raw, "<instructions>")
	if i < 0 {
		return raw
	}
	return raw[i:]
}
