package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/internal/proc"
)

// totalsCLI is a Spec whose "CLI" (sh) prints the running totals of its
// prompt, "TOTALS <in> <out> <cost>", which the adapter reports as
// cumulative tokens and cost; a prompt starting with FRESH is a command
// that starts the CLI's session anew.
func totalsCLI(t *testing.T) (*Provider, provider.Config) {
	dir := t.TempDir()
	p := New(Spec{
		Name:     "totals",
		StateDir: func(provider.Config) (string, error) { return dir, nil },
		NewID:    func() string { return "sess-1" },
		Command: func(cfg provider.Config, id, prompt string) (Command, error) {
			fresh := strings.HasPrefix(prompt, "FRESH ")
			line := strings.TrimPrefix(prompt, "FRESH ")
			return Command{Command: proc.Command{Path: "/bin/sh", Args: []string{"-c", "echo '" + line + "'"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: dir}, Fresh: fresh}, nil
		},
		Parse: func(b []byte) (Line, error) {
			var u provider.Usage
			if _, err := fmt.Sscanf(string(b), "TOTALS %d %d %g", &u.InputTokens, &u.OutputTokens, &u.CostUSD); err != nil {
				return Line{}, err
			}
			return Line{Final: &Final{Text: "ok", Usage: u, CumulativeTokens: true, CumulativeCost: true}}, nil
		},
	})
	return p, provider.Config{AgentID: "agent-1", WorkDir: dir}
}

func turnUsage(t *testing.T, s provider.Session, prompt string) provider.Usage {
	t.Helper()
	res, err := s.Send(context.Background(), provider.Turn{Prompt: prompt})
	if err != nil {
		t.Fatal(err)
	}
	return res.Usage
}

// TestRunningTotals: the engine reports the difference of a CLI's running
// totals as each turn's usage, remembers them across Suspend/Restore, a
// Restore from nothing and one from a stale blob, and starts from zero
// when the CLI's count does (a lower total, or a fresh session).
func TestRunningTotals(t *testing.T) {
	p, cfg := totalsCLI(t)
	ctx := context.Background()
	s, err := p.Create(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	check := func(got, want provider.Usage) {
		t.Helper()
		if got.InputTokens != want.InputTokens || got.OutputTokens != want.OutputTokens || fmt.Sprintf("%.4f", got.CostUSD) != fmt.Sprintf("%.4f", want.CostUSD) {
			t.Fatalf("usage %+v, want %+v", got, want)
		}
	}
	check(turnUsage(t, s, "TOTALS 100 10 0.5"), provider.Usage{InputTokens: 100, OutputTokens: 10, CostUSD: 0.5})
	check(turnUsage(t, s, "TOTALS 250 30 1.25"), provider.Usage{InputTokens: 150, OutputTokens: 20, CostUSD: 0.75})
	stale, err := s.Suspend(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(stale), `"totals":{"input_tokens":250,"output_tokens":30,"cost_usd":1.25}`) {
		t.Errorf("blob %s", stale)
	}
	if s, err = p.Restore(ctx, cfg, stale); err != nil {
		t.Fatal(err)
	}
	check(turnUsage(t, s, "TOTALS 300 35 1.5"), provider.Usage{InputTokens: 50, OutputTokens: 5, CostUSD: 0.25})
	s.Stop()
	// A daemon killed after that resume restores from the blob of the
	// suspend before it: the session id file knows better.
	if s, err = p.Restore(ctx, cfg, stale); err != nil {
		t.Fatal(err)
	}
	check(turnUsage(t, s, "TOTALS 310 36 1.6"), provider.Usage{InputTokens: 10, OutputTokens: 1, CostUSD: 0.1})
	s.Stop()
	if s, err = p.Restore(ctx, cfg, nil); err != nil {
		t.Fatal(err)
	}
	check(turnUsage(t, s, "TOTALS 320 40 1.7"), provider.Usage{InputTokens: 10, OutputTokens: 4, CostUSD: 0.1})
	// The CLI's count started over (it lost its session): taken whole.
	check(turnUsage(t, s, "TOTALS 20 2 0.1"), provider.Usage{InputTokens: 20, OutputTokens: 2, CostUSD: 0.1})
	// A fresh CLI session counts from zero, even above the last totals.
	check(turnUsage(t, s, "FRESH TOTALS 500 50 2"), provider.Usage{InputTokens: 500, OutputTokens: 50, CostUSD: 2})
	data, err := os.ReadFile(filepath.Join(cfg.WorkDir, "sessions", cfg.AgentID+".json"))
	if err != nil || !strings.Contains(string(data), `"totals":{"input_tokens":500,"output_tokens":50,"cost_usd":2}`) {
		t.Errorf("session id file %s %v", data, err)
	}
	// A session from before Substrat kept totals: its next turn's usage
	// is unknown, not the session's whole; the turn after counts from it.
	s.Stop()
	if s, err = p.Restore(ctx, cfg, []byte(`{"version":1,"session_id":"sess-old"}`)); err != nil {
		t.Fatal(err)
	}
	if u := turnUsage(t, s, "TOTALS 9000 900 9"); !u.TokensUnknown || !u.CostUnknown || u.InputTokens != 0 || u.CostUSD != 0 {
		t.Errorf("first turn of a session without totals: %+v, want unknown", u)
	}
	check(turnUsage(t, s, "TOTALS 9100 910 9.5"), provider.Usage{InputTokens: 100, OutputTokens: 10, CostUSD: 0.5})
	// A blob with negative totals is refused.
	if _, err := p.Restore(ctx, cfg, []byte(`{"version":1,"session_id":"sess-1","totals":{"input_tokens":-1,"output_tokens":0,"cost_usd":0}}`)); err == nil {
		t.Error("negative totals accepted")
	}
}
