package supervisor

import (
	"context"
	"testing"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script"
	"github.com/substrat/substrat/supervisor/api"
)

// TestPoolLimits: the limits a session starts under are the agent's own,
// over its pool's (pool_limits), over the daemon's defaults, field by
// field: an agent of pool "big" that sets none gets the pool's; one that
// sets its memory keeps it and takes the pool's processes; one that says
// "none" for processes has none; an agent of another pool gets the
// defaults.
func TestPoolLimits(t *testing.T) {
	h := &limitsHost{asked: map[string]fsstore.Limits{}}
	c := newCoreWith(t, t.TempDir(), false, Config{Host: h, Providers: provider.NewRegistry(script.New())})
	set := c.Settings()
	set.Pools["big"] = 2
	set.Limits = fsstore.Limits{MemoryBytes: 256 << 20, Pids: 100}
	set.PoolLimits = map[string]fsstore.Limits{"big": {MemoryBytes: 4 << 30, Pids: 1000, CPUWeight: 500}}
	if err := c.SetSettings(set); err != nil {
		t.Fatal(err)
	}
	plain := mustCreate(t, c, api.CreateParams{Name: "plain", Pool: "big"})
	own := mustCreate(t, c, api.CreateParams{Name: "own", Pool: "big", Limits: &fsstore.Limits{MemoryBytes: 1 << 30}})
	none := mustCreate(t, c, api.CreateParams{Name: "none", Pool: "big", Limits: &fsstore.Limits{Pids: fsstore.NoLimit}})
	other := mustCreate(t, c, api.CreateParams{Name: "other"})
	want := map[string]fsstore.Limits{
		plain.ID: {MemoryBytes: 4 << 30, Pids: 1000, CPUWeight: 500},
		own.ID:   {MemoryBytes: 1 << 30, Pids: 1000, CPUWeight: 500},
		none.ID:  {MemoryBytes: 4 << 30, CPUWeight: 500},
		other.ID: {MemoryBytes: 256 << 20, Pids: 100},
	}
	for _, a := range []api.AgentInfo{plain, own, none, other} {
		send(t, c, a.Name, "work")
		if err := c.RunTurn(context.Background(), a.ID); err != nil {
			t.Fatal(err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, w := range want {
		if got := h.asked[id]; got != w {
			t.Errorf("limits of %s: %+v, want %+v", id, got, w)
		}
	}
	set.PoolLimits = map[string]fsstore.Limits{"big": {Pids: 3}}
	if err := c.SetSettings(set); err == nil {
		t.Error("pool_limits of 3 processes were taken")
	}
}
