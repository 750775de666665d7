package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	claudeapi "github.com/substrat/substrat/provider/claude/fakeapi"
	codexapi "github.com/substrat/substrat/provider/codex/fakeapi"
	geminiapi "github.com/substrat/substrat/provider/gemini/fakeapi"
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
	claude := claudeapi.New(func(r claudeapi.Request) claudeapi.Out {
		// A resumed claude session keeps its first system prompt; the new
		// instructions come in the turn's message.
		last := r.Messages[len(r.Messages)-1]
		if strings.Contains(string(r.System), "INSTR-ALPHA") && strings.Contains(last.Text(), "INSTR-BETA") {
			return claudeapi.Out{Text: "saw BETA"}
		}
		return claudeapi.Out{Text: seen(string(r.System))}
	})
	t.Cleanup(claude.Close)
	codex := codexapi.New(func(r codexapi.Request) codexapi.Out { return codexapi.Out{Text: seen(lastInput(r.Raw))} })
	t.Cleanup(codex.Close)
	gemini := geminiapi.New(func(r geminiapi.Request) geminiapi.Out {
		return geminiapi.Out{Text: seen(lastInput(r.Raw))}
	})
	t.Cleanup(gemini.Close)
	cli := claudeCLI(t)
	dir := filepath.Dir(toolsBin(t, "codex"))
	toolsBin(t, "gemini")
	env := append(claudeEnv(cli, claude.URL), "PATH="+dir+string(os.PathListSeparator)+filepath.Dir(cli)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"OPENAI_BASE_URL="+codex.URL, "OPENAI_API_KEY=sk-fake-codex",
		"GEMINI_API_KEY=fake-gemini", "GOOGLE_GEMINI_BASE_URL="+gemini.URL)
	d := runDaemon(t, env...)
	d.mustCall(wire.MethodWorkspaceCreate, wire.WorkspaceParams{Name: "box", Network: true}, nil)
	for _, p := range []string{"claude", "codex", "gemini"} {
		d.mustCall(wire.MethodAgentCreate, wire.CreateParams{Name: p, Provider: p, Model: "fake-model", Workspace: "box",
			Instructions: "You are INSTR-ALPHA."}, nil)
		if res := d.send(p, "first"); res.Text != "saw ALPHA" {
			t.Fatalf("%s: first turn %q", p, res.Text)
		}
		d.mustCall(wire.MethodAgentInstructions, wire.InstructionsParams{Ref: p, Instructions: "You are INSTR-BETA now."}, nil)
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
