package main

import "testing"

// TestTerminalSafe: text an agent wrote reaches the terminal with its
// control characters shown, not obeyed; newlines, tabs and UTF-8 stay.
func TestTerminalSafe(t *testing.T) {
	for in, want := range map[string]string{
		"+ok\n\tindented é\n":      "+ok\n\tindented é\n",
		"\x1b]0;pwned\x07\x1b[2J":  `\x1b]0;pwned\x07\x1b[2J`,
		"a\rb\x7f\u009b31m":        `a\x0db\x7f\x9b31m`,
		"\x1bP+q\x1b\\ after":      `\x1bP+q\x1b\ after`,
		"ok\u202eevil\u200b\u2028": `ok\u202eevil\u200b\u2028`,
		"file\u202egnp.exe":        `file\u202egnp.exe`,
	} {
		if got := terminalSafe(in); got != want {
			t.Errorf("terminalSafe(%q) = %q, want %q", in, got, want)
		}
	}
}
