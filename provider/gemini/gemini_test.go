package gemini

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/fakeapi"
	"github.com/substrat/substrat/provider/internal/cli"
	"github.com/substrat/substrat/provider/internal/clitest"
	"github.com/substrat/substrat/provider/internal/retry"
	"github.com/substrat/substrat/provider/providertest"
	"github.com/substrat/substrat/supervisor/rpc/rpctest"
)

// pinned is the provider of the pinned Gemini CLI, under d, talking to
// the fake API at url, with the engine's retry policy pol (default: no
// retries).
func pinned(t *testing.T, d *rpctest.Daemon, bin, url string, pol ...retry.Policy) provider.Provider {
	r := retry.Policy{Tries: 1, Base: time.Millisecond}
	if len(pol) > 0 {
		r = pol[0]
	}
	return d.Wrap(New(Options{Command: clitest.PinnedCLI(t, "gemini"), Home: d.Home, Substrat: bin,
		Env:   []string{"GEMINI_API_KEY=fake-gemini-key", "GOOGLE_GEMINI_BASE_URL=" + url},
		Retry: r}))
}

func start(t *testing.T, reply func(fakeapi.GeminiRequest) fakeapi.GeminiOut) (provider.Session, provider.Config, *[]string, *fakeapi.Gemini) {
	t.Helper()
	return startAt(t, reply, nil, retry.Policy{Tries: 1, Base: time.Millisecond})
}

// startAt is start with the API's URL changed by front (a limiter's), if
// set, and the retry policy pol.
func startAt(t *testing.T, reply func(fakeapi.GeminiRequest) fakeapi.GeminiOut, front func(url string) string, pol retry.Policy) (provider.Session, provider.Config, *[]string, *fakeapi.Gemini) {
	t.Helper()
	api := fakeapi.NewGemini(reply)
	t.Cleanup(api.Close)
	bin, err := clitest.Substrat()
	if err != nil {
		t.Fatal(err)
	}
	base := api.URL
	if front != nil {
		base = front(base)
	}
	d := rpctest.Start(t)
	cfg := d.Config(t)
	cfg.Model = "fake-model"
	s, cfg, ids := clitest.Start(t, pinned(t, d, bin, base, pol), cfg)
	return s, cfg, ids, api
}

// TestGeminiTurns: the real Gemini CLI, against a loopback fake of the
// Gemini API: a reply, its session id learned at once, its tokens (and an
// unknown cost), and a second turn that resumes the same session (the
// fake sees the first exchange).
func TestGeminiTurns(t *testing.T) {
	s, _, ids, api := start(t, func(r fakeapi.GeminiRequest) fakeapi.GeminiOut {
		switch {
		case strings.Contains(r.Raw, "what did I say"):
			if strings.Contains(r.Raw, "remember PAPAYA") {
				return fakeapi.GeminiOut{Text: "you said PAPAYA"}
			}
			return fakeapi.GeminiOut{Text: "I was never told"}
		}
		return fakeapi.GeminiOut{Text: "noted", Usage: [2]int{40, 3}}
	})
	res, _, err := clitest.Send(t, s, "remember PAPAYA", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "noted" || res.Usage.InputTokens != 40 || res.Usage.OutputTokens != 3 || !res.Usage.CostUnknown || res.Usage.TokensUnknown {
		t.Fatalf("first turn: %+v", res)
	}
	if len(*ids) != 1 || (*ids)[0] == "" {
		t.Fatalf("thread id reported %v", *ids)
	}
	res, _, err = clitest.Send(t, s, "what did I say?", nil)
	if err != nil || res.Text != "you said PAPAYA" {
		t.Fatalf("second turn: %q %v (requests: %d)", res.Text, err, len(api.Requests()))
	}
	if len(*ids) != 1 {
		t.Errorf("the thread changed: %v", *ids)
	}
}

// TestGeminiToolCall: the model calls an agent tool of the substrat MCP
// server (mcp_substrat_<tool> to the model); the call reaches the turn's
// tools under a key of substrat mcp's own (the CLI sends no call id), and
// its result goes back to the model.
func TestGeminiToolCall(t *testing.T) {
	s, _, _, api := start(t, func(r fakeapi.GeminiRequest) fakeapi.GeminiOut {
		if len(r.Responses) > 0 {
			return fakeapi.GeminiOut{Text: "the tool said " + r.Responses[0]}
		}
		return fakeapi.GeminiOut{Call: &fakeapi.Call{Name: "mcp_substrat_send_message", Args: `{"recipient":"USER","text":"hi"}`}}
	})
	rec := &clitest.Recorder{Answer: "sent to USER: message m1"}
	res, chunks, err := clitest.Send(t, s, "tell USER hi", rec)
	if err != nil {
		t.Fatal(err)
	}
	if calls := rec.Calls(); len(calls) != 1 || calls[0].Name != "send_message" || !strings.HasPrefix(calls[0].ID, "mcp_") || string(calls[0].Args) != `{"recipient":"USER","text":"hi"}` {
		raw := ""
		if reqs := api.Requests(); len(reqs) > 0 {
			raw = reqs[0].Raw
			if i := strings.Index(raw, `mcp_substrat`); i >= 0 {
				raw = raw[i:min(len(raw), i+300)]
			} else {
				raw = "(no substrat tools)"
			}
		}
		t.Fatalf("tool calls %+v; text %q; chunks %+v; tools: %s", rec.Calls(), res.Text, chunks, raw)
	}
	if !strings.Contains(res.Text, "sent to USER: message m1") {
		t.Fatalf("the model did not get the tool's result: %q (requests %d)", res.Text, len(api.Requests()))
	}
	var call, result bool
	for _, c := range chunks {
		call = call || (c.Kind == provider.ChunkToolCall && strings.Contains(c.Text, "mcp_substrat_send_message"))
		result = result || (c.Kind == provider.ChunkToolResult && strings.Contains(c.Text, "message m1"))
	}
	if !call || !result {
		t.Errorf("chunks %+v", chunks)
	}
}

// TestGeminiGarbage: an API that answers garbage fails the turn with an
// error, in time.
func TestGeminiGarbage(t *testing.T) {
	s, _, _, _ := start(t, func(r fakeapi.GeminiRequest) fakeapi.GeminiOut {
		return fakeapi.GeminiOut{Garbage: "data: {not json\n\n"}
	})
	_, _, err := clitest.Send(t, s, "hello", nil)
	if err == nil {
		t.Fatal("a garbage stream gave no error")
	}
	t.Logf("the error: %v", err)
}

// TestCommandLine: the permission setting maps onto --approval-mode;
// later turns resume the session.
func TestCommandLine(t *testing.T) {
	for _, c := range []struct {
		mode, want string
	}{
		{provider.ModeFull, "--approval-mode yolo"},
		{provider.ModeAcceptEdits, "--approval-mode auto_edit"},
		{provider.ModePlan, "--approval-mode plan"},
		{provider.ModeDefault, "--approval-mode default"},
	} {
		cfg := provider.Config{AgentID: "0199aaaa-0000-7000-8000-000000000001", WorkDir: t.TempDir(), Permissions: provider.Permissions{Mode: c.mode}}
		// A session the CLI kept an answer of (resume.go).
		home := filepath.Join(t.TempDir(), "home")
		chats := filepath.Join(home, ".gemini", "tmp", "p", "chats")
		os.MkdirAll(chats, 0o700)
		os.WriteFile(filepath.Join(chats, "session-x-5e551011.jsonl"), []byte(`{"type":"gemini","content":"ok"}`+"\n"), 0o600)
		inv, err := command(cli.Turn{Config: cfg, Paths: cli.Paths{CLIHome: home}, ID: "5e551011-aaaa-4000-8000-000000000000", Prompt: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		args := strings.Join(inv.Args, " ")
		if !strings.Contains(args, c.want) || !strings.Contains(args, "--resume 5e551011-") || !strings.Contains(args, "--output-format stream-json") {
			t.Errorf("%s: %s", c.mode, args)
		}
	}
}

// TestConformance runs the shared provider suite on the real Gemini CLI:
// "CALL <tool> <args>" makes the fake model call the tool over MCP.
func TestConformance(t *testing.T) {
	bin, err := clitest.Substrat()
	if err != nil {
		t.Fatal(err)
	}
	api := fakeapi.NewGemini(func(r fakeapi.GeminiRequest) fakeapi.GeminiOut {
		if len(r.Responses) > 0 {
			return fakeapi.GeminiOut{Text: "the tool said " + r.Responses[len(r.Responses)-1]}
		}
		if i := strings.LastIndex(r.Raw, "CALL "); i >= 0 {
			rest := r.Raw[i+len("CALL "):]
			name, args, _ := strings.Cut(rest, " ")
			args = args[:strings.Index(args, "}")+1]
			args = strings.ReplaceAll(args, `\"`, `"`)
			return fakeapi.GeminiOut{Call: &fakeapi.Call{Name: "mcp_substrat_" + name, Args: args}}
		}
		return fakeapi.GeminiOut{Text: "hello back"}
	})
	t.Cleanup(api.Close)
	d := rpctest.Start(t)
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T) provider.Provider {
			return pinned(t, d, bin, api.URL)
		},
		Config:     func(t *testing.T) provider.Config { c := d.Config(t); c.Model = "fake-model"; return c },
		ToolPrompt: func(name, args string) string { return "CALL " + name + " " + args },
		Timeout:    90 * time.Second,
	})
}

// TestGeminiOverloaded: an API answering 429 ends the CLI's run at once
// (its own retries are off), and the turn fails with a 429 the engine
// retries and, after its tries (one here), parks for: a limit without a
// reset time.
func TestGeminiOverloaded(t *testing.T) {
	s, _, _, api := start(t, func(r fakeapi.GeminiRequest) fakeapi.GeminiOut { return fakeapi.GeminiOut{Status: 429} })
	_, _, err := clitest.Send(t, s, "hello", nil)
	var rl *provider.RateLimited
	if !errors.As(err, &rl) || !rl.Until.IsZero() {
		t.Fatalf("a 429 gave %v, not a limit without a reset", err)
	}
	if n := len(api.Requests()); n != 1 {
		t.Errorf("the CLI asked %d times, want once", n)
	}
}
