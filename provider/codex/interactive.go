package codex

import (
	"errors"

	"github.com/substrat/substrat/provider/internal/cli"
)

// interactive turns a turn's arguments into `codex resume ID` with the
// turn's settings (its CODEX_HOME, sandbox mode, model provider and
// model), without exec's JSON output or its prompt on stdin (agent
// shell).
func interactive(t cli.Turn, args []string) ([]string, error) {
	if t.ID == "" {
		return nil, errors.New("no Codex thread to resume yet")
	}
	return interactiveArgs(args), nil
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
