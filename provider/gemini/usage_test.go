package gemini

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/fakeapi"
	"github.com/substrat/substrat/provider/internal/clitest"
	"github.com/substrat/substrat/supervisor/rpc/rpctest"
)

// newProvider is the gemini provider on the pinned CLI against api, its
// MCP server the substrat binary, and a config for a new agent.
func newProvider(t *testing.T, api *fakeapi.Gemini) (provider.Provider, provider.Config) {
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

// TestGeminiUsageTotals: the pinned CLI reports each turn's own usage
// (result.stats), across --resume; the turns' usage must add up to what
// the fake API served, after three turns (one of them a tool call, two
// requests) and after each restart a daemon puts the session through.
func TestGeminiUsageTotals(t *testing.T) {
	api := fakeapi.NewGemini(func(r fakeapi.GeminiRequest) fakeapi.GeminiOut {
		if strings.Contains(r.Raw, "USE-THE-TOOL") && len(r.Responses) == 0 {
			return fakeapi.GeminiOut{Call: &fakeapi.Call{Name: "mcp_substrat_send_message", Args: `{"recipient":"USER","text":"hi"}`}, Usage: [2]int{1300, 40}}
		}
		return fakeapi.GeminiOut{Text: "ok", Usage: [2]int{1000, 50}}
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

// requestTools lists the function declarations of a request.
func requestTools(raw string) []string {
	var r struct {
		Tools []struct {
			FunctionDeclarations []struct{ Name string } `json:"functionDeclarations"`
		} `json:"tools"`
	}
	json.Unmarshal([]byte(raw), &r)
	var out []string
	for _, t := range r.Tools {
		for _, f := range t.FunctionDeclarations {
			out = append(out, f.Name)
		}
	}
	return out
}

// TestGeminiOwnAgentToolsOff: the tools list the pinned CLI sends the
// model carries none of the CLI's own agent and background tools, in the
// default approval mode and in yolo; Substrat's tools are there. In yolo,
// where the shell tool is offered, a call of it with is_background set is
// refused, and the command never runs.
func TestGeminiOwnAgentToolsOff(t *testing.T) {
	forbidden := []string{"invoke_agent", "list_background_processes", "read_background_output"}
	const marker = "sleep 3173"
	for _, mode := range []string{provider.ModeDefault, provider.ModeFull} {
		t.Run(mode, func(t *testing.T) {
			api := fakeapi.NewGemini(func(r fakeapi.GeminiRequest) fakeapi.GeminiOut {
				switch {
				case len(r.Responses) > 0:
					return fakeapi.GeminiOut{Text: "the tool said " + r.Responses[len(r.Responses)-1]}
				case mode == provider.ModeFull:
					return fakeapi.GeminiOut{Call: &fakeapi.Call{Name: "run_shell_command", Args: `{"command":"` + marker + `","description":"wait","is_background":true}`}}
				}
				return fakeapi.GeminiOut{Text: "ok"}
			})
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
			res, err := s.Send(ctx, provider.Turn{Prompt: "hello"})
			if err != nil {
				t.Fatal(err)
			}
			reqs := api.Requests()
			if len(reqs) == 0 {
				t.Fatal("no request reached the fake")
			}
			for _, r := range reqs {
				names := requestTools(r.Raw)
				for _, f := range forbidden {
					if slices.Contains(names, f) {
						t.Errorf("the model is offered %s: %v", f, names)
					}
				}
				if !slices.Contains(names, "mcp_substrat_send_message") {
					t.Errorf("Substrat's tools are missing: %v", names)
				}
			}
			t.Logf("tools: %v", requestTools(reqs[0].Raw))
			if mode != provider.ModeFull {
				return
			}
			if !strings.Contains(res.Text, "denied by policy") {
				t.Errorf("the background command was not refused: %q", res.Text)
			}
			if pids := processes(marker); len(pids) > 0 {
				for _, pid := range pids {
					syscall.Kill(pid, syscall.SIGKILL)
				}
				t.Errorf("the background command runs: pids %v", pids)
			}
		})
	}
}

// processes returns the pids whose command line contains s.
func processes(s string) []int {
	var out []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if strings.Contains(strings.ReplaceAll(string(cmdline), "\x00", " "), s) {
			out = append(out, pid)
		}
	}
	return out
}
