package cli

import (
	"context"
	"errors"
	"slices"

	"github.com/substrat/substrat/provider"
)

// Interactive returns the process that opens session id for a person
// (provider.Interactive): the adapter's Spec.Interactive, with the
// turns' environment rules, in the agent's sandbox when it has one.
func (p *Provider) Interactive(ctx context.Context, cfg provider.Config, id string, args []string) (provider.Process, error) {
	if p.spec.Interactive == nil {
		return provider.Process{}, errors.New("the " + p.spec.Name + " CLI cannot open its session interactively here")
	}
	c, err := p.spec.Interactive(cfg, id)
	if err != nil {
		return provider.Process{}, err
	}
	proc := provider.Process{Path: c.Path, Args: slices.Concat([]string{c.Path}, c.Args, args), Env: c.Env, Dir: c.Dir}
	if cfg.Sandbox == nil {
		return proc, nil
	}
	proc.Env = Minimal(c.Env, c.KeepEnv...)
	return cfg.Sandbox(ctx, proc, c.Needs)
}

// interactive is Spec.Interactive for an Adapter: a turn's command
// without a prompt, its arguments turned by Adapter.Interactive.
func (s *skeleton) interactive(cfg provider.Config, id string) (Command, error) {
	c, err := s.command(cfg, id, "")
	if err != nil {
		return Command{}, err
	}
	paths, err := s.paths(cfg)
	if err != nil {
		return Command{}, err
	}
	if c.Args, err = s.a.Interactive(Turn{Config: cfg, Paths: paths, ID: id}, c.Args); err != nil {
		return Command{}, err
	}
	c.Stdin = ""
	return c, nil
}

// DropArgs returns a turn's arguments without the flags of its print
// mode: drop names each flag to leave out and how many values follow it;
// the values of the flags in valued are copied as they are, whatever
// they say (instructions or a model name could read "-p").
func DropArgs(args []string, drop map[string]int, valued ...string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if n, ok := drop[args[i]]; ok {
			i += n
			continue
		}
		out = append(out, args[i])
		if slices.Contains(valued, args[i]) && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}
