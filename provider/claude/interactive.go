package claude

import (
	"fmt"

	"github.com/substrat/substrat/provider/internal/cli"
)

// interactive turns a turn's arguments into those that open the session
// for a person at a terminal (agent shell): the same HOME, working
// directory, model, permission mode and tool rules, --resume id, without
// the print mode, the MCP servers (the agent tools act for a turn) or the
// approval tool (the person at the terminal answers).
func interactive(t cli.Turn, args []string) ([]string, error) {
	if !transcriptExists(t.CLIHome, t.ID) {
		return nil, fmt.Errorf("the Claude Code session %s has no transcript in %s yet: nothing to resume", t.ID, t.CLIHome)
	}
	return interactiveArgs(args), nil
}

// interactiveArgs drops the print-mode flags of a turn's arguments.
func interactiveArgs(args []string) []string {
	return cli.DropArgs(args, map[string]int{"-p": 0, "--verbose": 0, "--strict-mcp-config": 0,
		"--output-format": 1, "--mcp-config": 1, "--permission-prompt-tool": 1},
		"--permission-mode", "--allowedTools", "--disallowedTools", "--append-system-prompt", "--model", "--resume", "--session-id")
}
