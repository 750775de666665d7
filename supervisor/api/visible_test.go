package api

import "testing"

func TestVisible(t *testing.T) {
	for in, want := range map[string]string{
		"make && ls > x":           "make && ls > x",
		"a\x1b[2Jb":                `a\u001b[2Jb`,
		"title\x1b]0;pwned\x07":    `title\u001b]0;pwned\u0007`,
		"abc\u202edef\u200b":       `abc\u202edef\u200b`,
		"two\nlines\ttab\r":        `two\u000alines\u0009tab\u000d`,
		"\u009b31m c1 CSI":         `\u009b31m c1 CSI`,
		"エージェント é":                 "エージェント é",
		"line\u2028sep \U000E0041": `line\u2028sep \U000e0041`,
	} {
		if got := Visible(in); got != want {
			t.Errorf("Visible(%q) = %q, want %q", in, got, want)
		}
	}
}
