package supervisor

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script"
	"github.com/substrat/substrat/supervisor/api"
)

// compacting is a provider whose turns report a compaction of their
// model's context and the context use after it.
type compacting struct{ provider.Provider }

func (p compacting) Create(ctx context.Context, cfg provider.Config) (provider.Session, error) {
	return &compactingSession{}, nil
}

type compactingSession struct{ provider.Session }

// lastTurn is the last turn a compactingSession was sent.
var lastTurn provider.Turn

func (s *compactingSession) Send(ctx context.Context, turn provider.Turn) (provider.TurnResult, error) {
	lastTurn = turn
	return provider.TurnResult{Text: "done", Usage: provider.Usage{InputTokens: 900, OutputTokens: 100},
		Compactions: []provider.Compaction{{Reason: provider.CompactThreshold, Replaced: "turns 1-12", FirstTurn: 1, LastTurn: 12,
			Summary: "They asked for a report.", TokensBefore: 2450, TokensAfter: 1200}},
		ContextTokens: 1400, ContextWindow: 3000}, nil
}

func (s *compactingSession) Stop() error { return nil }

// A turn's compactions are events in events.jsonl and notes in the
// transcript; its context use is in the agent's counters, not in its
// subtree's.
func TestCompactionRecorded(t *testing.T) {
	c := newCoreWith(t, t.TempDir(), false, Config{Providers: provider.NewRegistry(compacting{script.New()})})
	set := *c.settings()
	set.ContextWindows = map[string]map[string]int{"script": {"*": 3000, "other-model": 9000}}
	set.CompactAt = 0.7
	if err := c.SetSettings(set); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, c, api.CreateParams{Name: "a"})
	send(t, c, "a", "go on")
	n := nodeOf(t, c, "a")
	if err := c.RunTurn(context.Background(), n.id()); err != nil {
		t.Fatal(err)
	}
	if lastTurn.ContextWindow != 3000 || lastTurn.CompactAt != 0.7 {
		t.Errorf("the turn was told a window of %d, compact at %v; want config.json's", lastTurn.ContextWindow, lastTurn.CompactAt)
	}
	var got []fsstore.Compaction
	err := fsstore.ReadEventsOfType(c.store.FS(), n.agent.Files().Events(), fsstore.EvCompaction, func(e fsstore.Event) error {
		var d fsstore.Compaction
		if err := e.Decode(&d); err != nil {
			return err
		}
		got = append(got, d)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Replaced != "turns 1-12" || got[0].Summary != "They asked for a report." || got[0].TokensBefore != 2450 ||
		got[0].TokensAfter != 1200 || got[0].Window != 3000 || got[0].Reason != "threshold" {
		t.Errorf("compaction events %+v", got)
	}
	res, err := c.Inspect("a")
	if err != nil {
		t.Fatal(err)
	}
	if k := res.Agent.Counters; k.ContextTokens != 1400 || k.ContextWindow != 3000 || k.InputTokens != 900 {
		t.Errorf("counters %+v", k)
	}
	if k := res.Agent.Subtree; k.ContextWindow != 0 || k.InputTokens != 900 {
		t.Errorf("subtree counters %+v", k)
	}
	data, err := os.ReadFile(n.agent.Files().Transcript())
	if err != nil || !strings.Contains(string(data), "=== context compacted (threshold): turns 1-12 replaced by a summary, 2450 -> 1200 tokens\n") ||
		!strings.Contains(string(data), "go on") {
		t.Errorf("transcript %q (%v)", data, err)
	}
}
