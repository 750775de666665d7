package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider/fakeapi"
	wire "github.com/substrat/substrat/supervisor/api"
)

// TestCLIUsageE2E: agents on the real Claude Code, Codex and Gemini CLIs
// under a real daemon, against loopback fakes of their APIs: after three
// turns, and after a kill -9 of the daemon and two more, each agent's
// counters are what its fake API served (Claude Code's cost: what that is
// worth at the model's prices), and a budget a little above that never
// stops them. Claude Code reports its cost and Codex its tokens as the
// session's running totals; counted as each turn's, they came to about
// twice the truth after three turns, and more after a restart.
func TestCLIUsageE2E(t *testing.T) {
	cu := fakeapi.Usage{InputTokens: 1000, OutputTokens: 50, CacheCreationInputTokens: 200, CacheReadInputTokens: 300}
	claude := fakeapi.NewClaude(func(fakeapi.ClaudeRequest) fakeapi.ClaudeOut { return fakeapi.ClaudeOut{Text: "ok", Usage: &cu} })
	t.Cleanup(claude.Close)
	codex := fakeapi.NewCodex(func(fakeapi.CodexRequest) fakeapi.CodexOut {
		return fakeapi.CodexOut{Text: "ok", Usage: [2]int{1000, 50}}
	})
	t.Cleanup(codex.Close)
	gemini := fakeapi.NewGemini(func(fakeapi.GeminiRequest) fakeapi.GeminiOut {
		return fakeapi.GeminiOut{Text: "ok", Usage: [2]int{1000, 50}}
	})
	t.Cleanup(gemini.Close)
	cli := claudeCLI(t)
	toolsBin(t, "codex")
	toolsBin(t, "gemini")
	d := runDaemon(t, append(claudeEnv(cli, claude.URL),
		"OPENAI_BASE_URL="+codex.URL, "OPENAI_API_KEY=sk-fake-codex",
		"GEMINI_API_KEY=fake-gemini", "GOOGLE_GEMINI_BASE_URL="+gemini.URL)...)
	const turns = 5
	// Each turn is one request of 1500 (claude) or 1000 (codex, gemini)
	// input tokens and 50 output tokens.
	budget := func(in int64) *fsstore.Budget { return &fsstore.Budget{Tokens: turns * (in + 50) * 3 / 2} }
	models := map[string]string{"claude": "claude-sonnet-4-5", "codex": "fake-model", "gemini": "fake-model"}
	for _, p := range []string{"claude", "codex", "gemini"} {
		in := int64(1000)
		if p == "claude" {
			in = 1500
		}
		mustCall(d, wire.AgentCreate, wire.CreateParams{Name: p, Provider: p, Model: models[p], WorkDir: t.TempDir(), Budget: budget(in)}, nil)
	}
	check := func(when string) {
		t.Helper()
		agents := d.agents()
		served := codex.Served()
		want := map[string]fsstore.Counters{
			"codex":  {InputTokens: int64(served[0]), OutputTokens: int64(served[1])},
			"gemini": {InputTokens: int64(gemini.Served()[0]), OutputTokens: int64(gemini.Served()[1])},
		}
		cs := claude.Served()
		want["claude"] = fsstore.Counters{InputTokens: cs.InputTokens + cs.CacheCreationInputTokens + cs.CacheReadInputTokens, OutputTokens: cs.OutputTokens,
			CostUSD: (3*float64(cs.InputTokens) + 15*float64(cs.OutputTokens) + 3.75*float64(cs.CacheCreationInputTokens) + 0.30*float64(cs.CacheReadInputTokens)) / 1e6}
		for p, w := range want {
			got := agents[p].Counters
			t.Logf("%s %s: counters %+v; the API served %+v", when, p, got, w)
			if got.InputTokens != w.InputTokens || got.OutputTokens != w.OutputTokens || math.Abs(got.CostUSD-w.CostUSD) > 1e-9 {
				t.Errorf("%s: %s's counters are %d in, %d out, %.6f USD; its API served %d in, %d out, worth %.6f USD",
					when, p, got.InputTokens, got.OutputTokens, got.CostUSD, w.InputTokens, w.OutputTokens, w.CostUSD)
			}
		}
	}
	for i := 1; i <= turns; i++ {
		if i == 4 {
			check("after 3 turns")
			d.kill()
			d.start()
		}
		for _, p := range []string{"claude", "codex", "gemini"} {
			d.send(p, fmt.Sprintf("turn %d", i))
		}
	}
	check("after a kill -9 and 2 more turns")
	if t.Failed() {
		t.Logf("daemon output: %s", filepath.Join(d.home, "e2e-daemon.out"))
		os.Stdout.Sync()
	}
}
