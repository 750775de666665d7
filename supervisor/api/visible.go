package api

import (
	"fmt"
	"strings"
)

// Visible returns s with every character that could drive a terminal or
// hide or reorder text (controls, newlines and tabs included, escape
// sequences' ESC, bidirectional and zero-width format characters, line
// separators) written as a \u escape, so that text an agent wrote shows
// as what it is. Text with none of them is returned as it is.
func Visible(s string) string {
	if !strings.ContainsFunc(s, hides) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if hides(r) {
			if r > 0xffff {
				fmt.Fprintf(&b, `\U%08x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
