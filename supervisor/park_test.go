package supervisor

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script"
	"github.com/substrat/substrat/supervisor/api"
)

// limitedProvider is the script provider whose turns hit a usage limit
// until the reset.
type limitedProvider struct {
	provider.Provider
	until time.Time
}

func (p limitedProvider) Create(ctx context.Context, cfg provider.Config) (provider.Session, error) {
	return limitedSession{until: p.until}, nil
}

func (p limitedProvider) Restore(ctx context.Context, cfg provider.Config, _ []byte) (provider.Session, error) {
	return limitedSession{until: p.until}, nil
}

type limitedSession struct{ until time.Time }

func (s limitedSession) Send(context.Context, provider.Turn) (provider.TurnResult, error) {
	return provider.TurnResult{}, &provider.RateLimited{Until: s.until, Reason: "usage limit reached"}
}
func (limitedSession) Suspend(context.Context) ([]byte, error) { return nil, nil }
func (limitedSession) Stop() error                             { return nil }

// TestParkInRecoveryReport: an agent parked by its provider's limit, and
// one under resource limits, are listed in the next start's recovery
// report and recovery.json; the parked one is still held (not runnable)
// after the restart, its message kept.
func TestParkInRecoveryReport(t *testing.T) {
	home := t.TempDir()
	until := time.Now().Add(time.Hour).Truncate(time.Second)
	c := newCoreWith(t, home, false, Config{Providers: provider.NewRegistry(limitedProvider{script.New(), until})})
	p := mustCreate(t, c, api.CreateParams{Name: "p", Limits: &fsstore.Limits{MemoryBytes: 512 << 20}})
	send(t, c, "p", "work")
	if err := c.RunTurn(context.Background(), p.ID); err != nil {
		t.Fatal(err)
	}
	if pk := nodeOf(t, c, "p").s().Parked; pk == nil || !pk.Until.Equal(until) {
		t.Fatalf("not parked until %s: %+v", until, pk)
	}

	c2, rep := newCore(t, home, true)
	if len(rep.Parked) != 1 || rep.Parked[0].Path != "p" || !strings.Contains(rep.Parked[0].Detail, until.UTC().Format(time.RFC3339)) ||
		!strings.Contains(rep.Parked[0].Detail, "usage limit reached") {
		t.Errorf("report's parked: %+v", rep.Parked)
	}
	if len(rep.Limited) != 1 || rep.Limited[0].Path != "p" || rep.Limited[0].Detail != "memory 512M" {
		t.Errorf("report's limited: %+v", rep.Limited)
	}
	data, err := os.ReadFile(fsstore.Layout{Home: home}.Recovery())
	if err != nil || !strings.Contains(string(data), `"parked": [`) || !strings.Contains(string(data), `"detail": "memory 512M"`) {
		t.Errorf("recovery.json: %v\n%s", err, data)
	}
	for _, id := range c2.Runnable() {
		if id == p.ID {
			t.Errorf("the parked agent is runnable after the restart")
		}
	}
	if why := c2.HeldBecause(p.ID); !strings.Contains(why, "parked until") {
		t.Errorf("held because %q", why)
	}
}
