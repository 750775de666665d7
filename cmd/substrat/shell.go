package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/substrat/substrat/bwrap/launch"
	"github.com/substrat/substrat/internal/termtext"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/rpc"
)

// AgentShellCmd opens an agent's provider session for the person at the
// terminal.
type AgentShellCmd struct {
	Ref    string   `arg:"" predictor:"agent" help:"The agent: an IDLE one of the claude, codex or gemini provider."`
	Args   []string `arg:"" optional:"" passthrough:"" help:"Arguments added to the provider CLI's command line (after --)."`
	DryRun bool     `name:"dry-run" help:"Print the command and the sandbox it would run in, and run nothing."`
}

var errShellDone = errors.New("shell done")

// Run asks the daemon to hold the agent (no turn starts while the person
// works: it is gated, durably, unless it already was) and for the
// command, runs the command in the agent's sandbox attached to this
// terminal, then lets the agent run again.
func (c *AgentShellCmd) Run(g *Globals) error {
	if len(c.Args) > 0 && c.Args[0] == "--" {
		c.Args = c.Args[1:]
	}
	cl, err := g.client(context.Background())
	if err != nil {
		return err
	}
	defer cl.Close()
	var sc api.ShellCommand
	var runErr error
	// The stream holds the agent for as long as it is open: the command
	// runs inside the callback, and the connection closes after it.
	_, err = rpc.Stream(context.Background(), cl, api.AgentShell, api.ShellParams{Ref: c.Ref, Args: c.Args}, func(f api.ShellCommand) error {
		sc = f
		if c.DryRun {
			runErr = printShell(g, sc)
		} else {
			runErr = runShell(sc)
		}
		return errShellDone
	})
	cl.Close()
	if !errors.Is(err, errShellDone) {
		return err
	}
	if _, err := call(g, api.AgentShellEnd, api.ShellEndParams{Ref: sc.Agent, Ungate: sc.Gated}); err != nil {
		fmt.Fprintf(os.Stderr, "the daemon could not let %s run again (%v); it stays gated: 'substrat agent ungate %s' lets it run\n", sc.Agent, err, sc.Agent)
	}
	return runErr
}

// runShell runs the command attached to the terminal: in the agent's
// sandbox (bwrap gives it a session of its own: it cannot push input
// into this terminal), or on the host for an agent without one.
func runShell(sc api.ShellCommand) error {
	var cmd *exec.Cmd
	if sc.Sandbox != nil {
		spec := *sc.Sandbox
		spec.Env = maps.Clone(spec.Env)
		if spec.Env == nil {
			spec.Env = map[string]string{}
		}
		for _, k := range []string{"TERM", "COLORTERM"} { // this terminal's, not the daemon's
			if v, ok := os.LookupEnv(k); ok {
				spec.Env[k] = v
			}
		}
		var err error
		if cmd, err = launch.Command(context.Background(), spec, sc.Argv); err != nil {
			return err
		}
	} else {
		cmd = exec.Command(sc.Argv[0], sc.Argv[1:]...)
		cmd.Env, cmd.Dir = sc.Env, sc.Dir
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// Ctrl-C is the provider CLI's; this process waits, then releases
	// the agent.
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT)
	defer signal.Reset(syscall.SIGINT, syscall.SIGQUIT)
	fmt.Fprintf(os.Stderr, "opening %s's %s session %s; %s starts no turn until you leave\n", sc.Agent, sc.Provider, sc.SessionID, sc.Agent)
	if sc.Executor != "" {
		fmt.Fprintf(os.Stderr, "%s runs its turns on %s; this shell runs here, on this machine's copy of its files, which goes there with its next turn\n",
			sc.Agent, termtext.Lines(sc.Executor))
	}
	err := cmd.Start()
	launch.CloseFiles(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &exitError{code: ee.ExitCode(), msg: fmt.Sprintf("%s exited with status %d", sc.Provider, ee.ExitCode())}
	}
	return err
}

// printShell prints what agent shell would run (never the environment:
// it holds the provider's keys).
func printShell(g *Globals, sc api.ShellCommand) error {
	if g.JSON {
		out := map[string]any{"agent": sc.Agent, "provider": sc.Provider, "session_id": sc.SessionID, "argv": sc.Argv, "sandboxed": sc.Sandbox != nil,
			"executor": sc.Executor}
		if sc.Sandbox != nil {
			out["mounts"] = sc.Sandbox.Grants()
			out["network"] = sc.Sandbox.Network
		}
		return printJSON(out)
	}
	fmt.Printf("agent:   %s (%s session %s)\n", sc.Agent, sc.Provider, sc.SessionID)
	fmt.Printf("command: %s\n", termtext.Lines(shellQuote(sc.Argv)))
	if sc.Executor != "" {
		fmt.Printf("turns:   on %s (this shell runs here, on this machine's copy of its files)\n", termtext.Lines(sc.Executor))
	}
	if sc.Sandbox == nil {
		fmt.Printf("in:      %s, no sandbox\n", sc.Dir)
		return nil
	}
	fmt.Printf("sandbox: network %v\n", sc.Sandbox.Network)
	for _, m := range sc.Sandbox.Grants() {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		fmt.Printf("  %s %s <- %s\n", mode, termtext.Lines(m.Target), termtext.Lines(m.Host))
	}
	return nil
}
