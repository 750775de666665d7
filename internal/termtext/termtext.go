// Package termtext shows text someone else wrote (an agent's replies, a
// diff of its files, a tool's name, a reason) on the user's terminal as
// what it is, not as what it would do: no escape sequence reaches the
// terminal (titles, clipboard writes, cleared screens), no carriage
// return overwrites what came before, and no bidirectional override or
// zero-width character hides or reorders what the user reads.
//
// Hides is the one rule for what is shown as an escape. Lines keeps
// newlines and tabs, for text that spans lines; Row escapes them too, for
// text that must stay in one row or column.
package termtext

import (
	"fmt"
	"strings"
	"unicode"
)

// Hides reports whether r can drive a terminal or hide or reorder text:
// the C0 and C1 controls (newline, tab and ESC among them) and DEL,
// format characters (bidirectional overrides, zero-width ones), line and
// paragraph separators, and anything above U+FFFF that is not graphic.
func Hides(r rune) bool {
	return isControl(r) || unicode.Is(unicode.Cf, r) ||
		unicode.In(r, unicode.Zl, unicode.Zp) || r > 0xffff && !unicode.IsGraphic(r)
}

// isControl reports whether r is a C0 or C1 control or DEL.
func isControl(r rune) bool {
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0)
}

// Lines returns s with every character that Hides written as an escape,
// except newlines and tabs, which stay: controls as \x1b, the others as
// \u202e (\U000e0041 above U+FFFF). For text that spans lines.
func Lines(s string) string {
	return escape(s, func(b *strings.Builder, r rune) bool {
		switch {
		case r == '\n' || r == '\t':
			return false
		case isControl(r):
			fmt.Fprintf(b, `\x%02x`, r)
		default:
			writeU(b, r)
		}
		return true
	})
}

// Row returns s with every character that Hides written as a \u escape
// (\u001b, \u000a, \u202e; \U000e0041 above U+FFFF), newlines and tabs
// included, so that it fills one row of a table or a screen.
func Row(s string) string {
	return escape(s, func(b *strings.Builder, r rune) bool {
		writeU(b, r)
		return true
	})
}

// escape returns s with each character that Hides passed to write, which
// writes its escape to b and reports true, or reports false to keep it.
// Text with none of them is returned as it is.
func escape(s string, write func(b *strings.Builder, r rune) bool) string {
	if !strings.ContainsFunc(s, Hides) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if !Hides(r) || !write(&b, r) {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func writeU(b *strings.Builder, r rune) {
	if r > 0xffff {
		fmt.Fprintf(b, `\U%08x`, r)
	} else {
		fmt.Fprintf(b, `\u%04x`, r)
	}
}
