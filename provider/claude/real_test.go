package claude

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/fakeapi"
	"github.com/substrat/substrat/provider/internal/clitest"
	"github.com/substrat/substrat/provider/internal/retry"
	"github.com/substrat/substrat/supervisor/rpc/rpctest"
)

// The tests in this file run the pinned Claude Code CLI (make tools)
// against a loopback fake of the Anthropic API.

// realModel is a model whose list price the pinned CLI knows.
const realModel = "claude-sonnet-4-5"

// sonnetCost is what usage u costs at claude-sonnet-4-5's list prices (per
// million tokens: 3 USD input, 15 output, 3.75 cache writes, 0.30 cache
// reads), as the CLI prices it.
func sonnetCost(u fakeapi.Usage) float64 {
	return (3*float64(u.InputTokens) + 15*float64(u.OutputTokens) + 3.75*float64(u.CacheCreationInputTokens) + 0.30*float64(u.CacheReadInputTokens)) / 1e6
}

// realProvider is the claude provider on the pinned CLI against api (with
// env besides), its MCP server the substrat binary, and a config for a new
// agent.
func realProvider(t *testing.T, api *fakeapi.Claude, env ...string) (provider.Provider, provider.Config) {
	t.Helper()
	bin, err := clitest.Substrat()
	if err != nil {
		t.Fatal(err)
	}
	d := rpctest.Start(t)
	p := d.Wrap(New(Options{Command: clitest.PinnedCLI(t, "claude"), Home: d.Home, Substrat: bin,
		Env:   append([]string{"ANTHROPIC_BASE_URL=" + api.URL, "ANTHROPIC_API_KEY=sk-ant-fake", "CLAUDE_CODE_MAX_RETRIES=0"}, env...),
		Retry: retry.Policy{Tries: 1, Base: time.Millisecond}}))
	cfg := d.Config(t)
	cfg.Model = realModel
	// The stand-in daemon has no request_approval tool.
	cfg.Permissions.Approver = fsstore.ApproverDeny
	return p, cfg
}

// TestRealUsageTotals: the pinned CLI reports total_cost_usd (and
// modelUsage) as the session's running totals, across --resume; the
// turns' usage must add up to what the fake API served, and its cost at
// the model's prices, after three turns (one of them a tool call, two
// requests) and after each restart a daemon puts the session through.
func TestRealUsageTotals(t *testing.T) {
	api := fakeapi.NewClaude(func(r fakeapi.ClaudeRequest) fakeapi.ClaudeOut {
		u := &fakeapi.Usage{InputTokens: 1000, OutputTokens: 50, CacheCreationInputTokens: 200, CacheReadInputTokens: 300}
		for _, b := range r.Last().Blocks() {
			if b.Type == "tool_result" {
				return fakeapi.ClaudeOut{Text: "the tool said " + fakeapi.ResultText(b), Usage: u}
			}
		}
		if strings.Contains(r.Last().Text(), "USE-THE-TOOL") {
			return fakeapi.ClaudeOut{ToolUse: &fakeapi.Call{ID: "toolu_u_1", Name: "mcp__substrat__send_message", Args: `{"recipient":"USER","text":"hi"}`},
				Usage: &fakeapi.Usage{InputTokens: 1300, OutputTokens: 40, CacheReadInputTokens: 700}}
		}
		return fakeapi.ClaudeOut{Text: "ok", Usage: u}
	})
	t.Cleanup(api.Close)
	p, cfg := realProvider(t, api)
	tools := &clitest.Recorder{Answer: "sent"}
	clitest.Restarts(t, p, cfg, func(s provider.Session, n int) provider.TurnResult {
		prompt := "turn"
		if n == 2 {
			prompt = "USE-THE-TOOL"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		res, err := s.Send(ctx, provider.Turn{Prompt: prompt, Tools: tools})
		if err != nil {
			t.Fatalf("turn %d: %v", n, err)
		}
		return res
	}, func(turns int, sum provider.Usage) {
		served := api.Served()
		in := served.InputTokens + served.CacheCreationInputTokens + served.CacheReadInputTokens
		if sum.InputTokens != in || sum.OutputTokens != served.OutputTokens || sum.TokensUnknown {
			t.Fatalf("after %d turns (%d requests) the turns' tokens add up to %d in, %d out; the API served %d in, %d out",
				turns, len(api.Requests()), sum.InputTokens, sum.OutputTokens, in, served.OutputTokens)
		}
		if want := sonnetCost(served); math.Abs(sum.CostUSD-want) > 1e-9 || sum.CostUnknown {
			t.Fatalf("after %d turns the turns' cost adds up to %.6f USD; what the API served costs %.6f USD", turns, sum.CostUSD, want)
		}
	})
	if len(tools.Calls()) != 1 {
		t.Errorf("tool calls: %+v", tools.Calls())
	}
}

// TestRealOwnAgentToolsOff: the tools list the pinned CLI sends the model
// carries none of the CLI's own ways to start agents and background work
// (and the Bash tool no run_in_background), in the default permission
// mode and in bypassPermissions; Substrat's tools are there. Skill is
// among them: with the pinned CLI, a skill whose SKILL.md says context:
// fork ran as a sub-agent ("forked execution") though Agent was
// disallowed.
func TestRealOwnAgentToolsOff(t *testing.T) {
	forbidden := []string{"Task", "Agent", "SendMessage", "ListAgents", "TaskStop", "CronCreate", "CronDelete", "CronList",
		"ScheduleWakeup", "Workflow", "Monitor", "Skill"}
	for _, mode := range []string{provider.ModeDefault, provider.ModeFull} {
		t.Run(mode, func(t *testing.T) {
			api := fakeapi.NewClaude(func(r fakeapi.ClaudeRequest) fakeapi.ClaudeOut { return fakeapi.ClaudeOut{Text: "ok"} })
			t.Cleanup(api.Close)
			// The CLI refuses bypassPermissions to root outside a sandbox;
			// the adapter says IS_SANDBOX=1 only inside one.
			p, cfg := realProvider(t, api, "IS_SANDBOX=1")
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
				names := r.ToolNames()
				for _, f := range forbidden {
					if slices.Contains(names, f) {
						t.Errorf("the model is offered %s: %v", f, names)
					}
				}
				if !slices.Contains(names, "mcp__substrat__send_message") {
					t.Errorf("Substrat's tools are missing: %v", names)
				}
				if strings.Contains(string(r.Raw), "run_in_background") {
					t.Errorf("a tool still takes run_in_background")
				}
			}
			t.Logf("tools: %v", reqs[0].ToolNames())
		})
	}
}

// TestRealForkingSkillRefused: a skill in the agent's working directory
// whose SKILL.md says context: fork would run as a sub-agent of the CLI's
// (the pinned CLI did so with Agent disallowed). Called anyway, Skill is
// refused, and no sub-agent's request reaches the API.
func TestRealForkingSkillRefused(t *testing.T) {
	api := fakeapi.NewClaude(func(r fakeapi.ClaudeRequest) fakeapi.ClaudeOut {
		for _, b := range r.Last().Blocks() {
			if b.Type == "tool_result" {
				return fakeapi.ClaudeOut{Text: "after: " + fakeapi.ResultText(b)}
			}
		}
		if strings.Contains(r.Last().Text(), "FORK-ME") {
			return fakeapi.ClaudeOut{ToolUse: &fakeapi.Call{ID: "toolu_skill_1", Name: "Skill", Args: `{"skill":"forky"}`}}
		}
		return fakeapi.ClaudeOut{Text: "a sub-agent ran"}
	})
	t.Cleanup(api.Close)
	p, cfg := realProvider(t, api)
	dir := filepath.Join(cfg.WorkDir, ".claude", "skills", "forky")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	skill := "---\nname: forky\ndescription: Does the thing in a fork.\ncontext: fork\n---\nSKILL-BODY: do the thing.\n"
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(skill), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := p.Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := s.Send(ctx, provider.Turn{Prompt: "FORK-ME"})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range api.Requests() {
		if strings.Contains(r.Conversation(), "SKILL-BODY") {
			t.Errorf("request %d carries the skill: a forked sub-agent ran (turn text %q)", i+1, res.Text)
		}
	}
	if strings.Contains(res.Text, "forked execution") || !strings.Contains(res.Text, "after: ") {
		t.Errorf("turn text %q", res.Text)
	}
	t.Logf("the model saw: %q", res.Text)
}
