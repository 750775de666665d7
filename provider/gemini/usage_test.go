package gemini

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/gemini/fakeapi"
	"github.com/substrat/substrat/provider/internal/clitest"
	"github.com/substrat/substrat/provider/internal/retry"
	"github.com/substrat/substrat/supervisor/rpc/rpctest"
)

// newProvider is the gemini provider on the pinned CLI against api, its
// MCP server the substrat binary, and a config for a new agent.
func newProvider(t *testing.T, api *fakeapi.Server) (provider.Provider, provider.Config) {
	t.Helper()
	bin, err := clitest.Substrat()
	if err != nil {
		t.Fatal(err)
	}
	d := rpctest.Start(t)
	p := d.Wrap(New(Options{Command: clitest.PinnedCLI(t, "gemini"), Home: d.Home, Substrat: bin,
		Env:   []string{"GEMINI_API_KEY=fake-gemini-key", "GOOGLE_GEMINI_BASE_URL=" + api.URL},
		Retry: retry.Policy{Tries: 1, Base: time.Millisecond}}))
	cfg := d.Config(t)
	cfg.Model = "fake-model"
	return p, cfg
}

// TestGeminiUsageTotals: the pinned CLI reports each turn's own usage
// (result.stats), across --resume; the turns' usage must add up to what
// the fake API served, after three turns (one of them a tool call, two
// requests) and after each restart a daemon puts the session through.
func TestGeminiUsageTotals(t *testing.T) {
	api := fakeapi.New(func(r fakeapi.Request) fakeapi.Out {
		if strings.Contains(r.Raw, "USE-THE-TOOL") && len(r.Responses) == 0 {
			return fakeapi.Out{Call: &fakeapi.Call{Name: "mcp_substrat_send_message", Args: `{"recipient":"USER","text":"hi"}`}, Usage: [2]int{1300, 40}}
		}
		return fakeapi.Out{Text: "ok", Usage: [2]int{1000, 50}}
	})
	t.Cleanup(api.Close)
	p, cfg := newProvider(t, api)
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
		if sum.InputTokens != int64(served[0]) || sum.OutputTokens != int64(served[1]) || sum.TokensUnknown {
			t.Fatalf("after %d turns (%d requests) the turns' usage adds up to %d in, %d out; the API served %d in, %d out",
				turns, len(api.Requests()), sum.InputTokens, sum.OutputTokens, served[0], served[1])
		}
	})
	if len(tools.Calls()) != 1 {
		t.Errorf("tool calls: %+v", tools.Calls())
	}
}
