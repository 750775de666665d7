package claude

import (
	"fmt"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/internal/cli"
)

// interactive is the command that opens session id for a person at a
// terminal (agent shell): a turn's command line (the same HOME, working
// directory, model, permission mode and tool rules, --resume id) without
// its print mode, its MCP servers (the agent tools act for a turn) or its
// approval tool (the person at the terminal answers).
func (a *adapter) interactive(cfg provider.Config, id string) (cli.Command, error) {
	chome, err := a.claudeHome(cfg)
	if err != nil {
		return cli.Command{}, err
	}
	if !transcriptExists(chome, id) {
		return cli.Command{}, fmt.Errorf("the Claude Code session %s has no transcript in %s yet: nothing to resume", id, chome)
	}
	c, err := a.command(cfg, id, "")
	if err != nil {
		return cli.Command{}, err
	}
	c.Args = interactiveArgs(c.Args)
	c.Stdin = ""
	return c, nil
}

// interactiveArgs drops the print-mode flags of a turn's arguments.
func interactiveArgs(args []string) []string {
	return cli.DropArgs(args, map[string]int{"-p": 0, "--verbose": 0, "--strict-mcp-config": 0,
		"--output-format": 1, "--mcp-config": 1, "--permission-prompt-tool": 1},
		"--permission-mode", "--allowedTools", "--disallowedTools", "--append-system-prompt", "--model", "--resume", "--session-id")
}
