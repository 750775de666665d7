package main

import (
	"fmt"
	"strings"
	"unicode"
)

// terminalSafe shows the control characters of s (other than newline and
// tab) as escapes, so that text an agent wrote (its replies, a diff of its
// files, a tool's name) cannot drive the user's terminal: no escape
// sequence reaches it (titles, clipboard writes, cleared screens), no
// carriage return overwrites what came before, and no bidirectional
// override or zero-width character hides or reorders what the user reads.
func terminalSafe(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			fmt.Fprintf(&b, "\\x%02x", r)
		case unicode.Is(unicode.Cf, r) || unicode.In(r, unicode.Zl, unicode.Zp):
			// Format characters (bidirectional overrides, zero-width
			// ones) and line separators hide or reorder text.
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
