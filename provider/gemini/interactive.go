package gemini

import (
	"errors"

	"github.com/substrat/substrat/provider/internal/cli"
)

// interactive turns a turn's arguments into `gemini --resume ID` with the
// turn's settings (its HOME, approval mode and model), without the
// headless prompt or the stream-json output (agent shell).
func interactive(t cli.Turn, args []string) ([]string, error) {
	if t.ID == "" {
		return nil, errors.New("no Gemini session to resume yet")
	}
	return interactiveArgs(args), nil
}

// interactiveArgs drops the headless flags of a turn's arguments.
func interactiveArgs(args []string) []string {
	return cli.DropArgs(args, map[string]int{"-p": 1, "--output-format": 1}, "--approval-mode", "--model", "--resume")
}
