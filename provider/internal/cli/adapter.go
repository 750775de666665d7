package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/internal/proc"
	"github.com/substrat/substrat/provider/internal/retry"
)

// Options configure a CLI provider. The zero value suits the daemon.
type Options struct {
	// Name is the registry name; default the adapter's (Adapter.Name).
	Name string
	// Command is the CLI, a path or a name looked up in PATH at each
	// turn; default the adapter's name.
	Command string
	// Home is the Substrat home. Default: Config.Home, else derived from
	// Config.WorkDir, which the daemon sets to <home>/agents/<agent-id>.
	Home string
	// StateDir holds the provider's files; default
	// <Home>/providers/<Name>.
	StateDir string
	// Substrat is the substrat binary that the MCP config starts; default
	// the running executable.
	Substrat string
	// ExtraArgs are added to every command line.
	ExtraArgs []string
	// Env is added to the environment of every turn.
	Env []string
	// Retry is the retry policy of failed turns; zero is retry.Default.
	Retry retry.Policy
	// ExitGrace is how long the CLI may take to exit after its last
	// line; default 5 s.
	ExitGrace time.Duration
}

// Adapter is what one CLI adds to the engine: its flags, its config
// format and its parser. The engine does the rest of a turn's command:
// it finds the CLI in PATH, gives it a HOME of its own, sets
// SUBSTRAT_AGENT_ID, adds Options.Env and, in a sandbox, runs the CLI by
// its real path with only the variables it needs.
type Adapter struct {
	// Name is the default registry name and command ("claude").
	Name string
	// CLI names the CLI, and Install says how to install it, for the
	// error when the command is not found.
	CLI, Install string
	// HomeEnv is the variable that points the CLI at its HOME ("HOME",
	// "CODEX_HOME").
	HomeEnv string
	// Home, if set, is the CLI's HOME for cfg's agent, given the
	// provider's state directory; default AgentHome.
	Home func(stateDir string, cfg provider.Config) string
	// NewID returns the id of a new session; nil when the CLI picks it
	// (see Spec.NewID).
	NewID func() string
	// Config, if set, returns the files the CLI reads its settings from,
	// written when a session starts (see Prepare).
	Config func(Setup) ([]File, error)
	// Command returns the adapter's part of one turn's command.
	Command func(Turn) (Invocation, error)
	// SandboxPath, if set, returns the program to run in a sandbox for
	// the CLI found at path (a launcher's native binary).
	SandboxPath func(path string) string
	// KeepEnv are the variables (NAME=) and prefixes of the environment
	// that the CLI keeps in a sandbox besides the common ones (see
	// Minimal): its own settings and credentials.
	KeepEnv []string
	// Parse reads one output line (see Spec.Parse).
	Parse func(line []byte) (Line, error)
	// TextSeparator: see Spec.TextSeparator.
	TextSeparator string
	// Interactive, if set, turns a turn's arguments into those that open
	// session t.ID for a person at a terminal (agent shell), or says why
	// it cannot be opened.
	Interactive func(t Turn, args []string) ([]string, error)
}

// Paths are the directories of an agent's session, as the engine
// resolved them.
type Paths struct {
	// Home is the Substrat home.
	Home string
	// StateDir is the provider's directory of its own files.
	StateDir string
	// CLIHome is the CLI's HOME, which exists.
	CLIHome string
}

// Setup is what an adapter writes its config from.
type Setup struct {
	Config provider.Config
	Paths
	// MCP is the agent's substrat MCP server.
	MCP MCPServer
}

// File is a config file: Path is under the CLI's HOME when relative (its
// directories there are made, see PrivateDir), else in a directory that
// exists.
type File struct {
	Path string
	Data []byte
}

// Turn is what an adapter builds one turn's command from.
type Turn struct {
	// Config has the instructions as they are now.
	Config provider.Config
	Paths
	// ID is the CLI's session id; "" until a CLI that picks it told it.
	ID     string
	Prompt string
	// ExtraArgs are Options.ExtraArgs, for the adapter to place among
	// its flags.
	ExtraArgs []string
}

// Invocation is an adapter's part of one turn's command.
type Invocation struct {
	Args []string
	// Stdin is written to the CLI's standard input.
	Stdin string
	// Env are set in the CLI's environment besides SUBSTRAT_AGENT_ID and
	// HomeEnv; Defaults are set where the daemon's environment does not
	// set them; Drop are taken out of it.
	Env, Defaults map[string]string
	Drop          []string
	// ReadOnly are more files the sandbox shows, read-only.
	ReadOnly []string
	// Fresh: see Command.Fresh.
	Fresh bool
}

// MCPServer is the command of an agent's substrat MCP server: `substrat
// mcp --agent ID --socket SOCKET` (a sandboxed agent:
// provider.Config.ToolSocket), or `substrat mcp --agent ID --home HOME`.
type MCPServer struct {
	Command string
	Args    []string
}

// JSON returns the MCP config {"mcpServers":{"substrat":…}}; typ, if
// set, is the server's "type" ("stdio").
func (m MCPServer) JSON(typ string) []byte {
	server := map[string]any{"command": m.Command, "args": m.Args}
	if typ != "" {
		server["type"] = typ
	}
	b, _ := json.MarshalIndent(map[string]any{"mcpServers": map[string]any{"substrat": server}}, "", "  ")
	return append(b, '\n')
}

// New returns the provider of the CLI of a, with opts.
func (a Adapter) New(opts Options) *Provider {
	s := newSkeleton(a, opts)
	var interactive func(provider.Config, string) (Command, error)
	if a.Interactive != nil {
		interactive = s.interactive
	}
	return New(Spec{
		Name:          s.opts.Name,
		StateDir:      s.stateDir,
		NewID:         s.a.NewID,
		Prepare:       s.prepare,
		Command:       s.command,
		Parse:         a.Parse,
		Retry:         opts.Retry,
		ExitGrace:     opts.ExitGrace,
		TextSeparator: a.TextSeparator,
		Interactive:   interactive,
	})
}

// skeleton is the part of a CLI provider that every adapter shares.
type skeleton struct {
	a    Adapter
	opts Options
}

// newSkeleton returns the skeleton of a with opts, their defaults set.
func newSkeleton(a Adapter, opts Options) *skeleton {
	if opts.Name == "" {
		opts.Name = a.Name
	}
	if opts.Command == "" {
		opts.Command = a.Name
	}
	if a.Home == nil {
		a.Home = func(dir string, cfg provider.Config) string { return AgentHome(dir, cfg.AgentID) }
	}
	if a.NewID == nil {
		a.NewID = func() string { return "" }
	}
	return &skeleton{a: a, opts: opts}
}

func (s *skeleton) stateDir(cfg provider.Config) (string, error) {
	return StateDir(s.opts.Name, s.opts.StateDir, s.opts.Home, cfg)
}

// paths resolves cfg's directories, and makes the CLI's HOME.
func (s *skeleton) paths(cfg provider.Config) (Paths, error) {
	home, err := Home(s.opts.Name, s.opts.Home, cfg)
	if err != nil {
		return Paths{}, err
	}
	dir, err := s.stateDir(cfg)
	if err != nil {
		return Paths{}, err
	}
	p := Paths{Home: home, StateDir: dir, CLIHome: s.a.Home(dir, cfg)}
	if err := os.MkdirAll(p.CLIHome, 0o700); err != nil {
		return Paths{}, fmt.Errorf("%s: %w", s.opts.Name, err)
	}
	return p, nil
}

// prepare writes the adapter's config files.
func (s *skeleton) prepare(cfg provider.Config) error {
	paths, err := s.paths(cfg)
	if err != nil {
		return err
	}
	if s.a.Config == nil {
		return nil
	}
	substrat, err := Substrat(s.opts.Substrat)
	if err != nil {
		return fmt.Errorf("%s: %w", s.opts.Name, err)
	}
	mcp := MCPServer{Command: substrat, Args: []string{"mcp", "--agent", cfg.AgentID, "--home", paths.Home}}
	if cfg.ToolSocket != "" {
		mcp.Args = []string{"mcp", "--agent", cfg.AgentID, "--socket", cfg.ToolSocket}
	}
	files, err := s.a.Config(Setup{Config: cfg, Paths: paths, MCP: mcp})
	if err != nil {
		return fmt.Errorf("%s: %w", s.opts.Name, err)
	}
	for _, f := range files {
		path := f.Path
		if !filepath.IsAbs(path) {
			path = filepath.Join(paths.CLIHome, path)
			if err := privateDirs(paths.CLIHome, filepath.Dir(f.Path)); err != nil {
				return fmt.Errorf("%s: %w", s.opts.Name, err)
			}
		}
		if err := WriteFile(path, f.Data); err != nil {
			return fmt.Errorf("%s: writing %s: %w", s.opts.Name, filepath.Base(path), err)
		}
	}
	return nil
}

// privateDirs makes each directory of rel, a relative path, under home
// with PrivateDir.
func privateDirs(home, rel string) error {
	if rel == "." {
		return nil
	}
	dir := home
	for _, name := range strings.Split(filepath.Clean(rel), string(filepath.Separator)) {
		if name == ".." {
			return errors.New("a config file outside the CLI's HOME")
		}
		dir = filepath.Join(dir, name)
		if err := PrivateDir(dir); err != nil {
			return err
		}
	}
	return nil
}

// command builds one turn's command: the adapter's invocation of the CLI
// found in PATH, with its HOME and environment, and what it needs in a
// sandbox.
func (s *skeleton) command(cfg provider.Config, id, prompt string) (Command, error) {
	path, err := exec.LookPath(s.opts.Command)
	if err != nil {
		return Command{}, fmt.Errorf("%s is not installed (%v); %s", s.a.CLI, err, s.a.Install)
	}
	paths, err := s.paths(cfg)
	if err != nil {
		return Command{}, err
	}
	inv, err := s.a.Command(Turn{Config: cfg, Paths: paths, ID: id, Prompt: prompt, ExtraArgs: s.opts.ExtraArgs})
	if err != nil {
		return Command{}, err
	}
	var needs provider.SandboxNeeds
	if cfg.Sandbox != nil {
		if s.a.SandboxPath != nil {
			path = s.a.SandboxPath(path)
		}
		if path, needs, err = Sandboxed(path, s.opts.Substrat, paths.CLIHome, inv.ReadOnly...); err != nil {
			return Command{}, err
		}
	}
	set := map[string]string{"SUBSTRAT_AGENT_ID": cfg.AgentID, s.a.HomeEnv: paths.CLIHome}
	for k, v := range inv.Env {
		set[k] = v
	}
	env := Environ(set, inv.Defaults, inv.Drop, s.opts.Env)
	return Command{
		Command: proc.Command{Path: path, Args: inv.Args, Env: env, Dir: cfg.WorkDir, Stdin: inv.Stdin},
		Needs:   needs,
		KeepEnv: append(append([]string(nil), s.a.KeepEnv...), Names(s.opts.Env)...),
		Fresh:   inv.Fresh,
	}, nil
}

// LeadWith returns prompt led by instructions inside <instructions> tags,
// for a CLI without a system-prompt flag; prompt itself if there are
// none.
func LeadWith(instructions, prompt string) string {
	if instructions == "" {
		return prompt
	}
	return "<instructions>\n" + strings.TrimRight(instructions, "\n") + "\n</instructions>\n\n" + prompt
}

// Unmarshal reads a JSON line into v. Only a line that is not JSON is an
// error: CLIs add line types and fields from one version to the next, so
// a field of an unexpected shape is left out (encoding/json fills the
// others).
func Unmarshal(b []byte, v any) error {
	err := json.Unmarshal(b, v)
	var te *json.UnmarshalTypeError
	if err != nil && !errors.As(err, &te) {
		return fmt.Errorf("not JSON (%v)", err)
	}
	return nil
}
