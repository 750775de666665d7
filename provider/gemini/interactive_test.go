package gemini

import (
	"slices"
	"testing"
)

// TestInteractiveArgs: the headless prompt and output go; the settings
// and every value stay.
func TestInteractiveArgs(t *testing.T) {
	in := []string{"-p", "", "--output-format", "stream-json", "--skip-trust", "--approval-mode", "yolo",
		"--model", "-p", "--resume", "s-1"}
	want := []string{"--skip-trust", "--approval-mode", "yolo", "--model", "-p", "--resume", "s-1"}
	if got := interactiveArgs(in); !slices.Equal(got, want) {
		t.Errorf("interactiveArgs =\n%q\nwant\n%q", got, want)
	}
}
