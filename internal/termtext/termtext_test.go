package termtext

import "testing"

// TestLines: text an agent wrote reaches the terminal with its control
// characters shown, not obeyed; newlines, tabs and UTF-8 stay.
func TestLines(t *testing.T) {
	for in, want := range map[string]string{
		"+ok\n\tindented é\n":           "+ok\n\tindented é\n",
		"\x1b]0;pwned\x07\x1b[2J":       `\x1b]0;pwned\x07\x1b[2J`,
		"a\rb\x7f\u009b31m":             `a\x0db\x7f\x9b31m`,
		"\x1bP+q\x1b\\ after":           `\x1bP+q\x1b\ after`,
		"ok\u202eevil\u200b\u2028":      `ok\u202eevil\u200b\u2028`,
		"file\u202egnp.exe":             `file\u202egnp.exe`,
		"tag \U000E0041 pua \U000F0000": `tag \U000e0041 pua \U000f0000`,
		"エージェント 😀":                      "エージェント 😀",
	} {
		if got := Lines(in); got != want {
			t.Errorf("Lines(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRow: the same characters hidden, newlines and tabs too, all as \u.
func TestRow(t *testing.T) {
	for in, want := range map[string]string{
		"make && ls > x":           "make && ls > x",
		"a\x1b[2Jb":                `a\u001b[2Jb`,
		"title\x1b]0;pwned\x07":    `title\u001b]0;pwned\u0007`,
		"abc\u202edef\u200b":       `abc\u202edef\u200b`,
		"two\nlines\ttab\r":        `two\u000alines\u0009tab\u000d`,
		"\u009b31m c1 CSI":         `\u009b31m c1 CSI`,
		"エージェント é":                 "エージェント é",
		"line\u2028sep \U000E0041": `line\u2028sep \U000e0041`,
		"del\x7f 😀":                "del\\u007f 😀",
	} {
		if got := Row(in); got != want {
			t.Errorf("Row(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestHides: the one rule both functions share.
func TestHides(t *testing.T) {
	for r, want := range map[rune]bool{
		'a': false, ' ': false, 'é': false, '😀': false, 'エ': false,
		'\n': true, '\t': true, '\x1b': true, '\x7f': true, '\u009b': true,
		'\u200b': true, '\u202e': true, '\u2028': true, '\u2029': true,
		'\U000E0041': true, '\U000F0000': true,
	} {
		if got := Hides(r); got != want {
			t.Errorf("Hides(%U) = %v, want %v", r, got, want)
		}
	}
}
