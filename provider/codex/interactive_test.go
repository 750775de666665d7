package codex

import (
	"slices"
	"testing"
)

// TestInteractiveArgs: exec's JSON output, its prompt on stdin and its
// flags go; the settings and every value stay.
func TestInteractiveArgs(t *testing.T) {
	in := []string{"exec", "resume", "th-1", "--json", "--skip-git-repo-check", "-c", `approval_policy="never"`,
		"--dangerously-bypass-approvals-and-sandbox", "-c", "--json", "--model", "--skip-git-repo-check", "-"}
	want := []string{"resume", "th-1", "-c", `approval_policy="never"`, "--dangerously-bypass-approvals-and-sandbox",
		"-c", "--json", "--model", "--skip-git-repo-check"}
	if got := interactiveArgs(in); !slices.Equal(got, want) {
		t.Errorf("interactiveArgs =\n%q\nwant\n%q", got, want)
	}
}
