package gemini

import (
	"errors"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/internal/cli"
)

// interactive is the command that opens session id for a person at a
// terminal (agent shell): `gemini --resume ID` with a turn's settings
// (its HOME, approval mode and model), without the headless prompt or
// the stream-json output.
func (a *adapter) interactive(cfg provider.Config, id string) (cli.Command, error) {
	if id == "" {
		return cli.Command{}, errors.New("no Gemini session to resume yet")
	}
	c, err := a.command(cfg, id, "")
	if err != nil {
		return cli.Command{}, err
	}
	c.Args = interactiveArgs(c.Args)
	c.Stdin = ""
	return c, nil
}

// interactiveArgs drops the headless flags of a turn's arguments.
func interactiveArgs(args []string) []string {
	return cli.DropArgs(args, map[string]int{"-p": 1, "--output-format": 1}, "--approval-mode", "--model", "--resume")
}
