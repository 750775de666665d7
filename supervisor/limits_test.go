package supervisor

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script"
	"github.com/substrat/substrat/supervisor/api"
)

// limitsHost records the limits the core asks for and says a limit was
// reached.
type limitsHost struct {
	NopHost
	mu     sync.Mutex
	asked  map[string]fsstore.Limits
	reason string
}

func (h *limitsHost) Limit(agent string, l fsstore.Limits) provider.LimitFunc {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.asked[agent] = l
	return nil
}

func (h *limitsHost) LimitReached(string) string { return h.reason }

type killedProvider struct{ provider.Provider }

func (killedProvider) Create(context.Context, provider.Config) (provider.Session, error) {
	return killedSession{}, nil
}

type killedSession struct{}

func (killedSession) Send(context.Context, provider.Turn) (provider.TurnResult, error) {
	return provider.TurnResult{}, errors.New("model: signal: killed")
}
func (killedSession) Suspend(context.Context) ([]byte, error) { return nil, nil }
func (killedSession) Stop() error                             { return nil }

// TestLimits: an agent's limits, over the configured defaults, reach the
// host; a child inherits them; agent.limits records a "limits" event; and
// a turn that fails having reached a limit fails with that reason.
func TestLimits(t *testing.T) {
	h := &limitsHost{asked: map[string]fsstore.Limits{}, reason: "memory limit 512M reached"}
	c := newCoreWith(t, t.TempDir(), false, Config{Host: h, Providers: provider.NewRegistry(killedProvider{script.New()})})
	set := c.Settings()
	set.Limits = fsstore.Limits{Pids: 100}
	if err := c.SetSettings(set); err != nil {
		t.Fatal(err)
	}
	boss := mustCreate(t, c, api.CreateParams{Name: "boss", Limits: &fsstore.Limits{MemoryBytes: 512 << 20}})
	kid := mustCreate(t, c, api.CreateParams{Name: "kid", Parent: boss.ID})
	free := mustCreate(t, c, api.CreateParams{Name: "free", Limits: &fsstore.Limits{Pids: fsstore.NoLimit}})
	if l := nodeOf(t, c, "boss/kid").s().Limits; l == nil || *l != (fsstore.Limits{MemoryBytes: 512 << 20}) {
		t.Fatalf("the child's limits: %+v", l)
	}
	if _, err := c.CreateAgent(api.CreateParams{Name: "tiny", Limits: &fsstore.Limits{Pids: 2}}); err == nil {
		t.Fatal("a process limit of 2 was taken")
	}
	for _, ref := range []string{"boss", "boss/kid", "free"} {
		send(t, c, ref, "work")
	}
	for _, id := range []string{boss.ID, kid.ID, free.ID} {
		if err := c.RunTurn(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	h.mu.Lock()
	want := map[string]fsstore.Limits{boss.ID: {MemoryBytes: 512 << 20, Pids: 100}, kid.ID: {MemoryBytes: 512 << 20, Pids: 100}, free.ID: {}}
	for id, w := range want {
		if got := h.asked[id]; got != w {
			t.Errorf("limits of %s: %+v, want %+v", id, got, w)
		}
	}
	h.mu.Unlock()
	evs := events(t, c, "boss")
	var failed string
	for _, e := range evs {
		if e.Type == fsstore.EvTurnFailed {
			var d fsstore.TurnFailed
			e.Decode(&d)
			failed = d.Error
		}
	}
	if !strings.HasPrefix(failed, "memory limit 512M reached: model: signal: killed") {
		t.Fatalf("the turn failed with %q", failed)
	}

	pids := int64(64)
	if _, err := c.SetLimits(context.Background(), api.LimitsParams{Ref: "boss", Pids: &pids}); err != nil {
		t.Fatal(err)
	}
	n := nodeOf(t, c, "boss")
	if l := n.s().Limits; l == nil || *l != (fsstore.Limits{MemoryBytes: 512 << 20, Pids: 64}) {
		t.Fatalf("after SetLimits: %+v", l)
	}
	evs = events(t, c, "boss")
	if last := evs[len(evs)-1]; last.Type != fsstore.EvLimits {
		t.Fatalf("last event %s, want limits", last.Type)
	}
	bad := int64(3)
	if _, err := c.SetLimits(context.Background(), api.LimitsParams{Ref: "boss", Pids: &bad}); err == nil {
		t.Fatal("a process limit of 3 was set")
	}
}

// events returns the events of agent ref.
func events(t *testing.T, c *Core, ref string) []fsstore.Event {
	t.Helper()
	var out []fsstore.Event
	n := nodeOf(t, c, ref)
	if err := fsstore.ReadEvents(c.store.FS(), n.agent.Files().Events(), func(e fsstore.Event) error {
		out = append(out, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}
