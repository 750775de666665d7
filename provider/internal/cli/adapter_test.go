package cli

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/substrat/substrat/provider"
)

// testAdapter is an Adapter whose CLI is /bin/sh and whose config is
// files; it records the Setup and Turn it was given.
func testAdapter(files []File, setup *Setup, turn *Turn) Adapter {
	return Adapter{
		Name: "sh", CLI: "the test CLI", Install: "install a shell", HomeEnv: "TEST_HOME",
		Config: func(s Setup) ([]File, error) { *setup = s; return files, nil },
		Command: func(t Turn) (Invocation, error) {
			*turn = t
			return Invocation{Args: append([]string{"-c", "echo hi"}, t.ExtraArgs...), Stdin: t.Prompt,
				Env: map[string]string{"TEST_SET": "1"}, Defaults: map[string]string{"TEST_DEFAULT": "d"}}, nil
		},
		KeepEnv: []string{"TEST_"},
		Parse:   func([]byte) (Line, error) { return Line{}, nil },
	}
}

// TestAdapterSkeleton: what the engine does around an adapter: the
// directories and the MCP server it gives the config, the files it
// writes (under the CLI's HOME, or where they say), and the command's
// program, HOME, environment and extra arguments.
func TestAdapterSkeleton(t *testing.T) {
	home := t.TempDir()
	cfg := provider.Config{AgentID: "agent-1", WorkDir: t.TempDir(), Home: home, ToolSocket: "/run/agent-1.sock"}
	outside := filepath.Join(t.TempDir(), "mcp.json")
	var setup Setup
	var turn Turn
	a := testAdapter([]File{{Path: filepath.Join(".test", "deep", "config.toml"), Data: []byte("x = 1\n")},
		{Path: outside, Data: []byte("{}\n")}}, &setup, &turn)
	p := a.New(Options{Command: "/bin/sh", Substrat: "/opt/substrat", ExtraArgs: []string{"--extra"}, Env: []string{"OWN=v"}})
	if p.Name() != "sh" {
		t.Errorf("name %q", p.Name())
	}
	if _, err := p.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(home, "providers", "sh")
	cliHome := filepath.Join(state, "homes", "agent-1")
	if setup.Home != home || setup.StateDir != state || setup.CLIHome != cliHome {
		t.Errorf("paths %+v", setup.Paths)
	}
	if want := []string{"mcp", "--agent", "agent-1", "--socket", "/run/agent-1.sock"}; setup.MCP.Command != "/opt/substrat" || !slices.Equal(setup.MCP.Args, want) {
		t.Errorf("MCP server %+v, want /opt/substrat %q", setup.MCP, want)
	}
	for path, want := range map[string]string{filepath.Join(cliHome, ".test", "deep", "config.toml"): "x = 1\n", outside: "{}\n"} {
		if b, err := os.ReadFile(path); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", path, b, err, want)
		}
	}

	c, err := newSkeleton(a, Options{Command: "sh", ExtraArgs: []string{"--extra"}, Env: []string{"OWN=v"}}).command(cfg, "id-1", "the prompt")
	if err != nil {
		t.Fatal(err)
	}
	if turn.ID != "id-1" || turn.Prompt != "the prompt" || turn.CLIHome != cliHome {
		t.Errorf("turn %+v", turn)
	}
	if !filepath.IsAbs(c.Path) || filepath.Base(c.Path) != "sh" || !slices.Equal(c.Args, []string{"-c", "echo hi", "--extra"}) || c.Stdin != "the prompt" || c.Dir != cfg.WorkDir {
		t.Errorf("command %+v", c.Command)
	}
	for _, kv := range []string{"SUBSTRAT_AGENT_ID=agent-1", "TEST_HOME=" + cliHome, "TEST_SET=1", "OWN=v"} {
		if !slices.Contains(c.Env, kv) {
			t.Errorf("env lacks %s: %q", kv, c.Env)
		}
	}
	if !slices.Equal(c.KeepEnv, []string{"TEST_", "OWN="}) {
		t.Errorf("KeepEnv %q", c.KeepEnv)
	}
}

// TestAdapterRefuses: a config file outside the CLI's HOME by a relative
// path, and a CLI that is not installed.
func TestAdapterRefuses(t *testing.T) {
	cfg := provider.Config{AgentID: "agent-1", WorkDir: t.TempDir(), Home: t.TempDir()}
	var setup Setup
	var turn Turn
	a := testAdapter([]File{{Path: filepath.Join("..", "escape.json"), Data: []byte("{}")}}, &setup, &turn)
	if _, err := a.New(Options{Command: "/bin/sh", Substrat: "/opt/substrat"}).Create(context.Background(), cfg); err == nil {
		t.Error("a config file outside the CLI's HOME was written")
	}
	_, err := newSkeleton(a, Options{Command: "substrat-no-such-cli"}).command(cfg, "", "hi")
	if err == nil || !strings.Contains(err.Error(), "the test CLI is not installed") || !strings.Contains(err.Error(), "install a shell") {
		t.Errorf("a missing CLI: %v", err)
	}
}
