package daemon

import (
	"context"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/rpc"
)

// registerShell registers agent.shell and agent.shell_end: a person
// takes an agent over to work in its provider's own session.
func (d *Daemon) registerShell() {
	c, s := d.core, d.srv
	rpc.HandleStream(s, api.AgentShell, func(ctx context.Context, p api.ShellParams, send func(api.ShellCommand) error) (struct{}, error) {
		t, err := c.TakeOver(p.Ref)
		if err != nil {
			return struct{}{}, err
		}
		defer c.EndTakeOver(t.Session.ID, t.Gated) // when the client goes away, whatever happened to it
		sc, err := d.shellCommand(ctx, t, p.Args)
		if err != nil {
			return struct{}{}, err
		}
		if err := send(sc); err != nil {
			return struct{}{}, err
		}
		<-ctx.Done()
		return struct{}{}, ctx.Err()
	})
	rpc.Handle(s, api.AgentShellEnd, func(ctx context.Context, p api.ShellEndParams) (api.ShellEndResult, error) {
		return api.ShellEndResult{Ended: true}, c.EndTakeOver(p.Ref, p.Ungate)
	})
}

// shellCommand asks the provider for its interactive command, and takes
// the sandbox spec from the hook the daemon's turns use instead of
// letting it build the bwrap command: the CLI builds it, with the
// person's terminal.
func (d *Daemon) shellCommand(ctx context.Context, t *supervisor.Takeover, args []string) (api.ShellCommand, error) {
	sc := api.ShellCommand{Agent: t.Session.Name, Provider: t.Session.Provider, SessionID: t.Session.ProviderSessionID, Gated: t.Gated,
		Executor: t.Session.Executor}
	cfg := t.Config
	if cfg.Sandbox != nil {
		cfg.Sandbox = func(ctx context.Context, p provider.Process, needs provider.SandboxNeeds) (provider.Process, error) {
			spec, argv, err := d.host.sandboxSpec(t.Session, p, needs)
			if err != nil {
				return provider.Process{}, err
			}
			sc.Sandbox, sc.Argv = &spec, argv
			return p, nil
		}
	}
	p, err := t.Provider.Interactive(ctx, cfg, t.Session.ProviderSessionID, args)
	if err != nil {
		return sc, err
	}
	if sc.Sandbox == nil {
		sc.Argv, sc.Env, sc.Dir = p.Args, p.Env, p.Dir
		sc.Argv[0] = p.Path
	}
	return sc, nil
}
