package supervisor

import (
	"context"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script"
	"github.com/substrat/substrat/supervisor/api"
)

// limitedProvider is the script provider whose turns hit a usage limit
// until the reset (by clock, if set; else always), named name (if set).
type limitedProvider struct {
	provider.Provider
	until time.Time
	clock Clock
	name  string
	done  *atomic.Int64 // turns answered after the reset, if set
}

func (p limitedProvider) Name() string {
	if p.name != "" {
		return p.name
	}
	return p.Provider.Name()
}

func (p limitedProvider) Create(ctx context.Context, cfg provider.Config) (provider.Session, error) {
	return limitedSession{until: p.until, clock: p.clock, done: p.done}, nil
}

func (p limitedProvider) Restore(ctx context.Context, cfg provider.Config, _ []byte) (provider.Session, error) {
	return limitedSession{until: p.until, clock: p.clock, done: p.done}, nil
}

type limitedSession struct {
	until time.Time
	clock Clock
	done  *atomic.Int64
}

func (s limitedSession) Send(context.Context, provider.Turn) (provider.TurnResult, error) {
	if s.clock != nil && !s.clock.Now().Before(s.until) {
		if s.done != nil {
			s.done.Add(1)
		}
		return provider.TurnResult{Text: "answered after the reset"}, nil
	}
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
	c := newCoreWith(t, home, false, Config{Providers: provider.NewRegistry(limitedProvider{Provider: script.New(), until: until})})
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

// notesHost records the notifications the core sends.
type notesHost struct {
	NopHost
	mu    sync.Mutex
	notes []api.Notification
}

func (h *notesHost) Notify(_ []string, n api.Notification) {
	h.mu.Lock()
	h.notes = append(h.notes, n)
	h.mu.Unlock()
}

// TestNotifyUnreadAfterCrash: after a crash, the core nudges USER once
// about the messages to USER still unread (their notifications may never
// have run); after a clean start it does not.
func TestNotifyUnreadAfterCrash(t *testing.T) {
	home := t.TempDir()
	c := newCoreWith(t, home, false, Config{})
	mustCreate(t, c, api.CreateParams{Name: "r"})
	for _, text := range []string{"first", "second"} {
		send(t, c, "r", `!send_message {"recipient":"USER","text":"`+text+`"}`)
	}
	drain(t, c)
	for _, unclean := range []bool{false, true} {
		h := &notesHost{}
		newCoreWith(t, home, unclean, Config{Host: h})
		h.mu.Lock()
		notes := h.notes
		h.mu.Unlock()
		switch {
		case !unclean && len(notes) != 0:
			t.Errorf("a clean start notified %+v", notes)
		case unclean && (len(notes) != 1 || !strings.Contains(notes[0].Text, "2 unread") || !strings.Contains(notes[0].Text, "second") ||
			notes[0].Coalesced != 1 || notes[0].Kind != api.NotifyMessage):
			t.Errorf("after a crash: %+v", notes)
		}
	}
}
