package codex

import (
	"errors"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/internal/cli"
)

// interactive is the command that opens thread id for a person at a
// terminal (agent shell): `codex resume ID` with a turn's settings (its
// CODEX_HOME, sandbox mode, model provider and model), without exec's
// JSON output or its prompt on stdin.
func (a *adapter) interactive(cfg provider.Config, id string) (cli.Command, error) {
	if id == "" {
		return cli.Command{}, errors.New("no Codex thread to resume yet")
	}
	c, err := a.command(cfg, id, "")
	if err != nil {
		return cli.Command{}, err
	}
	c.Args = interactiveArgs(c.Args)
	c.Stdin = ""
	return c, nil
}

// interactiveArgs turns `exec resume ID … -` into `resume ID …`.
func interactiveArgs(args []string) []string {
	if len(args) > 0 && args[0] == "exec" {
		args = args[1:]
	}
	if n := len(args); n > 0 && args[n-1] == "-" {
		args = args[:n-1]
	}
	return cli.DropArgs(args, map[string]int{"--json": 0, "--skip-git-repo-check": 0}, "resume", "-c", "--model")
}
