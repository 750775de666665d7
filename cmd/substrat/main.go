// Command substrat runs and controls the Substrat daemon, which runs
// hierarchies of LLM agents whose state lives in plain files.
//
// Exit codes: 0 success, 1 failure, 2 bad usage, 3 the daemon is not
// running.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/substrat/substrat/internal/termtext"
	"github.com/substrat/substrat/supervisor/daemon"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/alecthomas/kong"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script"
	"github.com/substrat/substrat/supervisor/rpc"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

// Globals are the flags every command takes.
type Globals struct {
	Home        string           `help:"${home_help}" placeholder:"DIR"`
	JSON        bool             `help:"Print JSON instead of text; errors too, as {\"error\":{\"code\",\"message\",\"hint\",\"exit\"}} on stderr." name:"json"`
	ShowVersion kong.VersionFlag `name:"version" help:"Print the version and exit."`
	JQ          string           `help:"Filter the JSON output with a jq expression (implies --json): strings print as they are, other values as compact JSON." name:"jq" placeholder:"EXPR"`

	homeTyped bool // --home was given (resolveHome set Home either way)
}

// CLI is the command tree.
type CLI struct {
	Globals

	Daemon     DaemonCmd     `cmd:"" help:"Start, stop and watch the daemon."`
	Agent      AgentCmd      `cmd:"" help:"Create, list, inspect and talk to agents."`
	Session    SessionCmd    `cmd:"" help:"List and manage provider sessions."`
	Workspace  WorkspaceCmd  `cmd:"" help:"Manage sandboxed workspaces and run commands in them."`
	Top        TopCmd        `cmd:"" help:"Watch and steer the whole team live, full screen (one snapshot when not a terminal)."`
	Inbox      InboxCmd      `cmd:"" help:"Read the messages agents sent to USER."`
	Approvals  ApprovalsCmd  `cmd:"" help:"List the approval requests that wait for an answer; show one whole."`
	Approve    ApproveCmd    `cmd:"" help:"Allow an approval request (--remember a rule for the rest of the agent's life)."`
	Deny       DenyCmd       `cmd:"" help:"Deny an approval request, with --reason the agent sees."`
	Recover    RecoverCmd    `cmd:"" help:"Print the report of the last start-up recovery."`
	Config     ConfigCmd     `cmd:"" help:"Show the settings in force: HOME/config.json, the environment, the flags."`
	Doctor     DoctorCmd     `cmd:"" help:"Check what the daemon needs before the first turn fails: provider CLIs and keys on its PATH and in its environment, bwrap, git, resource limits, the home, the systemd unit."`
	Fsck       FsckCmd       `cmd:"" help:"Verify the store (works without the daemon); --repair fixes what is safe to fix."`
	Backup     BackupCmd     `cmd:"" help:"Copy the home with rsync while the daemon runs, then check the copy."`
	Demo       DemoCmd       `cmd:"" help:"Run the main job end to end in a fresh temporary home: a scripted team, a kill -9, recovery."`
	Bench      BenchCmd      `cmd:"" help:"Measure Substrat against this disk's own limits and against SQLite (make bench)."`
	Mcp        McpCmd        `cmd:"" help:"Serve an agent's tools over MCP on stdio (started by provider CLIs)."`
	ToolRelay  ToolRelayCmd  `cmd:"" hidden:"" help:"Relay an agent's tool socket over stdio (run by the daemon in an agent's pod)."`
	Completion CompletionCmd `cmd:"" help:"Print shell completion code: source <(substrat completion bash)."`
	Version    VersionCmd    `cmd:"" help:"Print the version."`
}

// exitError carries an exit code and a hint.
type exitError struct {
	code int
	msg  string
	hint string
}

func (e *exitError) Error() string { return e.msg }

func fail(msg, hint string) error { return &exitError{code: 1, msg: msg, hint: hint} }

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	var cli CLI
	parser, err := kong.New(&cli,
		kong.Name("substrat"),
		kong.Description("Substrat runs hierarchies of LLM agents on your machine and never loses their state.\nThe store is plain files under --home: read it with cat and jq."),
		kong.UsageOnError(),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.Exit(func(code int) { panic(exitCode(code)) }),
		kong.Vars{"version": "substrat " + version, "home_help": homeHelp},
		kong.NamedMapper("path", pathMapper{}),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 2
	}
	completeLine(parser)
	if len(args) == 0 {
		args = []string{"--help"} // bare substrat: the help, and success
	}
	code := func() (code int) {
		defer func() {
			if r := recover(); r != nil {
				if c, ok := r.(exitCode); ok {
					code = int(c)
					return
				}
				panic(r)
			}
		}()
		kctx, err := parser.Parse(args)
		if err != nil {
			return usageError(err, wantsJSON(args))
		}
		cli.homeTyped, cli.Home = cli.Home != "", resolveHome(cli.Home)
		if cli.JQ != "" {
			if jqFilter, err = compileJQ(cli.JQ); err != nil {
				return report(err, true)
			}
			cli.JSON = true
		}
		if err := kctx.Run(&cli.Globals); err != nil {
			return report(err, cli.JSON)
		}
		return 0
	}()
	return code
}

type exitCode int

// usageError prints a command line that did not parse, and the help to
// read, and returns 2.
func usageError(err error, asJSON bool) int {
	hint := "run 'substrat --help'"
	var pe *kong.ParseError
	if errors.As(err, &pe) && pe.Context != nil {
		words := []string{"substrat"}
		for _, p := range pe.Context.Path {
			if p.Command != nil {
				words = append(words, p.Command.Name)
			}
		}
		hint = "run '" + strings.Join(words, " ") + " --help'"
	}
	if asJSON {
		printErrorJSON("usage", 2, err.Error(), hint)
		return 2
	}
	fmt.Fprintln(os.Stderr, "error:", err)
	fmt.Fprintln(os.Stderr, "hint: "+hint)
	return 2
}

// report prints err as one "error:" line plus a hint (as one line of
// JSON under --json), and returns the exit code.
func report(err error, asJSON bool) int {
	code, hint, name := 1, "", ""
	var ee *exitError
	var re *api.Error
	var running *daemon.RunningError
	switch {
	case errors.As(err, &ee):
		code, hint = ee.code, ee.hint
	case errors.As(err, &re):
		hint, name = re.Hint, re.Code
	case errors.As(err, &running):
		hint = "stop it with 'substrat daemon stop', or use another --home"
	default:
		hint = fsstore.Hint(err)
	}
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	if asJSON {
		printErrorJSON(name, code, msg, hint)
		return code
	}
	// An error can carry text an agent or a provider wrote (a failed
	// turn's reason): it reaches the terminal with its controls escaped.
	fmt.Fprintln(os.Stderr, "error: "+termtext.Lines(msg))
	if hint != "" {
		fmt.Fprintln(os.Stderr, "hint: "+termtext.Lines(hint))
	}
	return code
}

func providers() *provider.Registry {
	return provider.NewRegistry(append([]provider.Provider{script.New()}, realProviders()...)...)
}

// client connects to the daemon of g.Home.
func (g *Globals) client(ctx context.Context) (*rpc.Client, error) {
	layout := fsstore.Layout{Home: g.Home}
	c, err := rpc.Dial(ctx, layout.Socket())
	if errors.Is(err, rpc.ErrNoPermission) {
		return nil, &exitError{code: 1, msg: "permission denied: the daemon on " + g.Home + " belongs to another user",
			hint: "run substrat as that user, or use a --home of your own"}
	}
	if err != nil {
		return nil, &exitError{code: 3, msg: "the daemon is not running on " + g.Home,
			hint: "start it with 'substrat daemon start" + g.homeFlag() + "'"}
	}
	return c, nil
}

// call makes the call m on a fresh connection to g's daemon.
func call[P, R any](g *Globals, m api.Method[P, R], p P) (R, error) {
	ctx := context.Background()
	c, err := g.client(ctx)
	if err != nil {
		var zero R
		return zero, err
	}
	defer c.Close()
	return rpc.Call(ctx, c, m, p)
}

// stream makes the streaming call m on a fresh connection to g's daemon,
// dropping its frames.
func stream[P, F, R any](g *Globals, m api.StreamMethod[P, F, R], p P) (R, error) {
	ctx := context.Background()
	c, err := g.client(ctx)
	if err != nil {
		var zero R
		return zero, err
	}
	defer c.Close()
	return rpc.Stream(ctx, c, m, p, nil)
}

// VersionCmd prints the version.
type VersionCmd struct{}

// Run prints the version.
func (VersionCmd) Run(g *Globals) error {
	if g.JSON {
		return printJSON(map[string]string{"version": version})
	}
	fmt.Println("substrat", version)
	return nil
}
