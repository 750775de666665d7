package codex

import (
	"errors"
	"os/exec"
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

// pinned is the provider of the pinned Codex CLI, under d, talking to the
// fake API at url, with no retries of its own or of the engine (extra
// CLI arguments may give it some).
func pinned(t *testing.T, d *rpctest.Daemon, bin, url string, extra ...string) provider.Provider {
	return d.Wrap(New(Options{BaseURL: url, Options: cli.Options{Command: clitest.PinnedCLI(t, "codex"), Home: d.Home, Substrat: bin,
		Env:       []string{"OPENAI_API_KEY=sk-fake-codex"},
		ExtraArgs: append([]string{"-c", "model_providers.substrat.request_max_retries=0", "-c", "model_providers.substrat.stream_max_retries=0"}, extra...),
		Retry:     retry.Policy{Tries: 1, Base: time.Millisecond}}}))
}

func start(t *testing.T, reply func(fakeapi.CodexRequest) fakeapi.CodexOut) (provider.Session, provider.Config, *[]string, *fakeapi.Codex) {
	t.Helper()
	return startAt(t, reply, nil)
}

// startAt is start with the API's URL changed by front (a limiter's), if
// set, and extra arguments for the CLI.
func startAt(t *testing.T, reply func(fakeapi.CodexRequest) fakeapi.CodexOut, front func(url string) string, extra ...string) (provider.Session, provider.Config, *[]string, *fakeapi.Codex) {
	t.Helper()
	api := fakeapi.NewCodex(reply)
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
	s, cfg, ids := clitest.Start(t, pinned(t, d, bin, base, extra...), cfg)
	return s, cfg, ids, api
}

// TestCodexTurns: the real Codex CLI, against a loopback fake of the
// Responses API: a reply, its thread id learned at once, its tokens (and
// an unknown cost), and a second turn that resumes the same thread (the
// fake sees the first exchange).
func TestCodexTurns(t *testing.T) {
	s, _, ids, api := start(t, func(r fakeapi.CodexRequest) fakeapi.CodexOut {
		switch {
		case strings.Contains(r.Text(), "what did I say"):
			if strings.Contains(r.Text(), "remember PAPAYA") {
				return fakeapi.CodexOut{Text: "you said PAPAYA"}
			}
			return fakeapi.CodexOut{Text: "I was never told"}
		}
		return fakeapi.CodexOut{Text: "noted", Usage: [2]int{40, 3}}
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

// TestCodexToolCall: the model calls an agent tool of the substrat MCP
// server (its tools are in the mcp__substrat namespace); the call reaches
// the turn's tools with the model's call id as its key, and its result
// goes back to the model.
func TestCodexToolCall(t *testing.T) {
	s, _, _, api := start(t, func(r fakeapi.CodexRequest) fakeapi.CodexOut {
		if out := r.Outputs(); len(out) > 0 {
			return fakeapi.CodexOut{Text: "the tool said " + out[0]}
		}
		return fakeapi.CodexOut{Call: &fakeapi.Call{ID: "call_send_1", Namespace: "mcp__substrat", Name: "send_message", Args: `{"recipient":"USER","text":"hi"}`}}
	})
	rec := &clitest.Recorder{Answer: "sent to USER: message m1"}
	res, chunks, err := clitest.Send(t, s, "tell USER hi", rec)
	if err != nil {
		t.Fatal(err)
	}
	if calls := rec.Calls(); len(calls) != 1 || calls[0].Name != "send_message" || calls[0].ID != "call_send_1" || string(calls[0].Args) != `{"recipient":"USER","text":"hi"}` {
		raw := ""
		if reqs := api.Requests(); len(reqs) > 0 {
			raw = reqs[0].Raw
			if i := strings.Index(raw, `"namespace"`); i >= 0 {
				raw = raw[i:min(len(raw), i+300)]
			} else {
				raw = "(no namespace in the tools)"
			}
		}
		t.Fatalf("tool calls %+v; text %q; chunks %+v; tools: %s", rec.Calls(), res.Text, chunks, raw)
	}
	if !strings.Contains(res.Text, "sent to USER: message m1") {
		t.Fatalf("the model did not get the tool's result: %q (requests %d)", res.Text, len(api.Requests()))
	}
	var call, result bool
	for _, c := range chunks {
		call = call || (c.Kind == provider.ChunkToolCall && strings.Contains(c.Text, "substrat.send_message"))
		result = result || (c.Kind == provider.ChunkToolResult && strings.Contains(c.Text, "message m1"))
	}
	if !call || !result {
		t.Errorf("chunks %+v", chunks)
	}
}

// TestCodexGarbage: an API that answers garbage fails the turn with an
// error, in time.
func TestCodexGarbage(t *testing.T) {
	s, _, _, _ := start(t, func(r fakeapi.CodexRequest) fakeapi.CodexOut {
		return fakeapi.CodexOut{Garbage: "event: response.created\ndata: {not json\n\n"}
	})
	_, _, err := clitest.Send(t, s, "hello", nil)
	if err == nil {
		t.Fatal("a garbage stream gave no error")
	}
	t.Logf("the error: %v", err)
}

// TestCommandLine: the permission setting maps onto the CLI's sandbox
// settings; resume carries the thread id.
func TestCommandLine(t *testing.T) {
	a := &adapter{opts: Options{BaseURL: "http://127.0.0.1:1/v1"}}
	for _, c := range []struct {
		mode, want string
	}{
		{provider.ModeFull, "--dangerously-bypass-approvals-and-sandbox"},
		{provider.ModeAcceptEdits, `sandbox_mode="workspace-write"`},
		{provider.ModeDefault, `sandbox_mode="read-only"`},
		{provider.ModePlan, `sandbox_mode="read-only"`},
	} {
		cfg := provider.Config{AgentID: "0199aaaa-0000-7000-8000-000000000001", WorkDir: t.TempDir(), Permissions: provider.Permissions{Mode: c.mode}}
		inv, err := a.command(cli.Turn{Config: cfg, ID: "th_1", Prompt: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		args := strings.Join(inv.Args, " ")
		if !strings.Contains(args, c.want) || !strings.HasPrefix(args, "exec resume th_1 --json") || !strings.Contains(args, `approval_policy="never"`) {
			t.Errorf("%s: %s", c.mode, args)
		}
	}
}

// TestNativeBinary: in a sandbox the npm launcher (a Node script) is
// replaced by the native binary it would start.
func TestNativeBinary(t *testing.T) {
	bin := nativeBinary(clitest.PinnedCLI(t, "codex"))
	if filepath.Ext(bin) == ".js" || !strings.Contains(bin, "vendor") {
		t.Fatalf("native binary: %s", bin)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "0.169.0") {
		t.Fatalf("%s --version: %s %v", bin, out, err)
	}
}

// TestConformance runs the shared provider suite on the real Codex CLI:
// "CALL <tool> <args>" makes the fake model call the tool over MCP.
func TestConformance(t *testing.T) {
	bin, err := clitest.Substrat()
	if err != nil {
		t.Fatal(err)
	}
	api := fakeapi.NewCodex(func(r fakeapi.CodexRequest) fakeapi.CodexOut {
		if out := r.Outputs(); len(out) > 0 {
			return fakeapi.CodexOut{Text: "the tool said " + out[len(out)-1]}
		}
		if i := strings.LastIndex(r.Raw, "CALL "); i >= 0 {
			rest := r.Raw[i+len("CALL "):]
			name, args, _ := strings.Cut(rest, " ")
			args = args[:strings.Index(args, "}")+1] // the probe's args end at the first }: {"n":42,...,"list":[1,"x"]}
			args = strings.ReplaceAll(args, `\"`, `"`)
			return fakeapi.CodexOut{Call: &fakeapi.Call{ID: "call_probe", Namespace: "mcp__substrat", Name: name, Args: args}}
		}
		return fakeapi.CodexOut{Text: "hello back"}
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

// TestCodexOverloaded: an API answering 429 (without Retry-After: the CLI
// does not retry) fails the turn with a 429 the engine retries, and after
// its tries (one here) parks for: a limit without a reset time.
func TestCodexOverloaded(t *testing.T) {
	s, _, _, api := start(t, func(r fakeapi.CodexRequest) fakeapi.CodexOut { return fakeapi.CodexOut{Status: 429} })
	_, _, err := clitest.Send(t, s, "hello", nil)
	var rl *provider.RateLimited
	if !errors.As(err, &rl) || !rl.Until.IsZero() {
		t.Fatalf("a 429 gave %v, not a limit without a reset", err)
	}
	if n := len(api.Requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}
