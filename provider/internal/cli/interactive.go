package cli

import (
	"context"
	"errors"
	"os/exec"
	"slices"

	"github.com/substrat/substrat/provider"
)

// Interactive returns the command that opens session id for a person
// (provider.Interactive): the adapter's Spec.Interactive, with the
// turns' environment rules, in the agent's sandbox when it has one.
func (p *Provider) Interactive(ctx context.Context, cfg provider.Config, id string, args []string) (*exec.Cmd, error) {
	if p.spec.Interactive == nil {
		return nil, errors.New("the " + p.spec.Name + " CLI cannot open its session interactively here")
	}
	c, err := p.spec.Interactive(cfg, id)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, c.Path, append(append([]string(nil), c.Args...), args...)...)
	cmd.Env, cmd.Dir = c.Env, c.Dir
	if cfg.Sandbox == nil {
		return cmd, nil
	}
	cmd.Env = Minimal(c.Env, c.KeepEnv...)
	return cfg.Sandbox(ctx, cmd, c.Needs)
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
