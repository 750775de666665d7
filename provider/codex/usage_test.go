package codex

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/fakeapi"
	"github.com/substrat/substrat/provider/internal/clitest"
	"github.com/substrat/substrat/supervisor/rpc/rpctest"
)

// newProvider is the codex provider on the pinned CLI against api, its
// MCP server the substrat binary, and a config for a new agent.
func newProvider(t *testing.T, api *fakeapi.Codex) (provider.Provider, provider.Config) {
	t.Helper()
	bin, err := clitest.Substrat()
	if err != nil {
		t.Fatal(err)
	}
	d := rpctest.Start(t)
	p := pinned(t, d, bin, api.URL)
	cfg := d.Config(t)
	cfg.Model = "fake-model"
	return p, cfg
}

// TestCodexUsageTotals: the pinned CLI reports turn.completed.usage as the
// thread's running total, across exec resume; the turns' usage must add
// up to what the fake API served, after three turns (one of them a tool
// call, two requests) and after each restart a daemon puts the session
// through.
func TestCodexUsageTotals(t *testing.T) {
	api := fakeapi.NewCodex(func(r fakeapi.CodexRequest) fakeapi.CodexOut {
		if len(r.Outputs()) == 0 && r.Text() != "" && containsLast(r, "USE-THE-TOOL") {
			return fakeapi.CodexOut{Call: &fakeapi.Call{ID: "call_u_1", Namespace: "mcp__substrat", Name: "send_message", Args: `{"recipient":"USER","text":"hi"}`},
				Usage: [2]int{1300, 40}}
		}
		return fakeapi.CodexOut{Text: "ok", Usage: [2]int{1000, 50}}
	})
	t.Cleanup(api.Close)
	p, cfg := newProvider(t, api)
	calls := clitest.UsageTotals(t, p, cfg, func() (int, int, int) {
		served := api.Served()
		return served[0], served[1], len(api.Requests())
	})
	if len(calls) != 1 {
		t.Errorf("tool calls: %+v", calls)
	}
}

// containsLast reports whether the last input item of r mentions s.
func containsLast(r fakeapi.CodexRequest, s string) bool {
	if len(r.Input) == 0 {
		return false
	}
	return strings.Contains(string(r.Input[len(r.Input)-1]), s)
}

// TestCodexUsageAfterKill: a turn killed mid-way (as the daemon's death
// kills it), after the API served its first request: the next turn after
// a restore from nothing counts what the killed turn spent too, as the
// CLI's running total does.
func TestCodexUsageAfterKill(t *testing.T) {
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	api := fakeapi.NewCodex(func(r fakeapi.CodexRequest) fakeapi.CodexOut {
		switch {
		case containsLast(r, "KILL-ME") && len(r.Outputs()) == 0:
			return fakeapi.CodexOut{Call: &fakeapi.Call{ID: "call_k_1", Namespace: "mcp__substrat", Name: "send_message", Args: `{"recipient":"USER","text":"hi"}`},
				Usage: [2]int{1300, 40}}
		case len(r.Outputs()) > 0 && strings.Contains(r.Raw, "KILL-ME") && !strings.Contains(r.Raw, "after the kill"):
			once.Do(func() { close(held) })
			<-release
			return fakeapi.CodexOut{Status: 500}
		}
		return fakeapi.CodexOut{Text: "ok", Usage: [2]int{1000, 50}}
	})
	t.Cleanup(api.Close)
	defer close(release)
	p, cfg := newProvider(t, api)
	tools := &clitest.Recorder{Answer: "sent"}
	ctx := context.Background()
	s, err := p.Create(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var sum provider.Usage
	res, err := s.Send(ctx, provider.Turn{Prompt: "first", Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	sum.InputTokens += res.Usage.InputTokens
	tctx, cancel := context.WithCancel(ctx)
	go func() { <-held; cancel() }()
	if _, err := s.Send(tctx, provider.Turn{Prompt: "KILL-ME", Tools: tools}); err == nil {
		t.Fatal("the killed turn succeeded")
	}
	s.Stop()
	if s, err = p.Restore(ctx, cfg, nil); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	tctx, cancel = context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	res, err = s.Send(tctx, provider.Turn{Prompt: "after the kill", Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	sum.InputTokens += res.Usage.InputTokens
	served := api.Served()
	t.Logf("after the kill: %+v; served %v", res.Usage, served)
	if sum.InputTokens != int64(served[0]) {
		t.Fatalf("the turns' input tokens add up to %d; the API served %d", sum.InputTokens, served[0])
	}
}

// requestTools lists the tools of a Responses request: "name" for a
// function, "namespace/name" for one in a namespace (MCP servers).
func requestTools(raw string) []string {
	var r struct {
		Tools []struct {
			Type, Name string
			Tools      []struct{ Name string }
		}
	}
	json.Unmarshal([]byte(raw), &r)
	var out []string
	for _, t := range r.Tools {
		if t.Type == "namespace" {
			for _, x := range t.Tools {
				out = append(out, t.Name+"/"+x.Name)
			}
			continue
		}
		out = append(out, t.Name)
	}
	return out
}

// TestCodexOwnAgentToolsOff: the tools list the pinned CLI sends the model
// carries none of the CLI's own agent tools (nor its goal tools), in each
// sandbox mode;
// Substrat's tools are there.
func TestCodexOwnAgentToolsOff(t *testing.T) {
	forbidden := []string{"spawn_agent", "send_input", "wait_agent", "resume_agent", "close_agent", "request_user_input",
		"create_goal", "get_goal", "update_goal"}
	for _, mode := range []string{provider.ModeDefault, provider.ModeAcceptEdits, provider.ModeFull} {
		t.Run(mode, func(t *testing.T) {
			api := fakeapi.NewCodex(func(r fakeapi.CodexRequest) fakeapi.CodexOut { return fakeapi.CodexOut{Text: "ok"} })
			t.Cleanup(api.Close)
			p, cfg := newProvider(t, api)
			cfg.Permissions.Mode = mode
			s, err := p.Create(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			if _, err := s.Send(ctx, provider.Turn{Prompt: "hello"}); err != nil {
				t.Fatal(err)
			}
			reqs := api.Requests()
			if len(reqs) == 0 {
				t.Fatal("no request reached the fake")
			}
			for _, r := range reqs {
				names := requestTools(r.Raw)
				for _, n := range names {
					if slices.Contains(forbidden, n[strings.LastIndex(n, "/")+1:]) {
						t.Errorf("the model is offered %s: %v", n, names)
					}
				}
				if !slices.Contains(names, "mcp__substrat/send_message") {
					t.Errorf("Substrat's tools are missing: %v", names)
				}
			}
			t.Logf("tools: %v", requestTools(reqs[0].Raw))
		})
	}
}
