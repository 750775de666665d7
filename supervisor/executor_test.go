package supervisor

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script"
	"github.com/substrat/substrat/supervisor/api"
)

// startHost gives agents on an executor a Start hook, and everyone a
// Limit hook.
type startHost struct{ NopHost }

func (startHost) Start(sess *fsstore.Session, _ fsstore.Limits) provider.StartFunc {
	if sess.Executor == "" {
		return nil
	}
	return func(context.Context, provider.Process, provider.Stdio) (provider.Running, error) { return nil, nil }
}

func (startHost) Limit(string, fsstore.Limits) provider.LimitFunc {
	return func(*provider.Process) error { return nil }
}

// configProvider records the Config of each session it creates.
type configProvider struct {
	provider.Provider
	mu   sync.Mutex
	cfgs map[string]provider.Config
}

func (p *configProvider) Create(ctx context.Context, cfg provider.Config) (provider.Session, error) {
	p.mu.Lock()
	p.cfgs[cfg.Name] = cfg
	p.mu.Unlock()
	return p.Provider.Create(ctx, cfg)
}

// TestExecutorConfig: an agent on an executor gets the host's Start
// hook and no limits of this machine's; one here gets the limits and
// no hook. Its work tools, which would run here, are refused.
func TestExecutorConfig(t *testing.T) {
	p := &configProvider{Provider: script.New(), cfgs: map[string]provider.Config{}}
	c := newCoreWith(t, t.TempDir(), false, Config{Host: startHost{}, Providers: provider.NewRegistry(p)})
	far := mustCreate(t, c, api.CreateParams{Name: "far", Executor: "ssh://build1", Limits: &fsstore.Limits{Pids: 100}})
	near := mustCreate(t, c, api.CreateParams{Name: "near", Limits: &fsstore.Limits{Pids: 100}})
	for _, a := range []api.AgentInfo{far, near} {
		send(t, c, a.Name, "hello")
		if err := c.RunTurn(context.Background(), a.ID); err != nil {
			t.Fatal(err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if cfg := p.cfgs["far"]; cfg.Start == nil || cfg.Limit != nil {
		t.Errorf("far: Start set %v, Limit set %v; want the hook and no limits", cfg.Start != nil, cfg.Limit != nil)
	}
	if cfg := p.cfgs["near"]; cfg.Start != nil || cfg.Limit == nil {
		t.Errorf("near: Start set %v, Limit set %v; want limits and no hook", cfg.Start != nil, cfg.Limit != nil)
	}
	if _, err := c.place(nodeOf(t, c, "far").s()); err == nil || !strings.Contains(err.Error(), "ssh://build1") {
		t.Errorf("far's work tools: %v", err)
	}
	if _, err := c.place(nodeOf(t, c, "near").s()); err != nil {
		t.Errorf("near's work tools: %v", err)
	}
}
