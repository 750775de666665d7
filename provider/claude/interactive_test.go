package claude

import (
	"slices"
	"testing"
)

// TestInteractiveArgs: the print-mode flags go, every other flag and
// every value stays, even a value that reads as a dropped flag.
func TestInteractiveArgs(t *testing.T) {
	in := []string{"-p", "--output-format", "stream-json", "--verbose", "--mcp-config", "/m.json", "--strict-mcp-config",
		"--permission-mode", "default", "--allowedTools", "mcp__substrat__*", "--disallowedTools", "Agent,Task",
		"--permission-prompt-tool", "mcp__substrat__approve", "--append-system-prompt", "-p", "--model", "--verbose",
		"--resume", "0b6b3c8e-0000-4000-8000-000000000000"}
	want := []string{"--permission-mode", "default", "--allowedTools", "mcp__substrat__*", "--disallowedTools", "Agent,Task",
		"--append-system-prompt", "-p", "--model", "--verbose", "--resume", "0b6b3c8e-0000-4000-8000-000000000000"}
	if got := interactiveArgs(in); !slices.Equal(got, want) {
		t.Errorf("interactiveArgs =\n%q\nwant\n%q", got, want)
	}
}
