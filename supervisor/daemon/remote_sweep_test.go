package daemon

import (
	"testing"

	"github.com/substrat/substrat/fsstore"
)

// TestCopyKey: a sweep removes only names of the copies' own forms.
func TestCopyKey(t *testing.T) {
	for k, want := range map[string]bool{
		fsstore.NewID():                        true,
		workspaceKey("/h/ws/x/root"):           true,
		"ws-":                                  false,
		"ws-0123":                              false,
		"ws-0123456789ABCDEF0123456789abcdef":  false,
		"ws-0123456789abcdef0123456789abcdeg":  false,
		"link-1":                               false,
		"agent-1":                              false,
		"01a22476-3a07-123e-841c-ca7972797eca": false, // not a v7
	} {
		if got := copyKey(k); got != want {
			t.Errorf("copyKey(%q) = %v, want %v", k, got, want)
		}
	}
}
