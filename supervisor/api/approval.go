package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/substrat/substrat/internal/termtext"
)

// MaxApprovalInput is the largest tool input, in bytes of its JSON, that
// an approval message shows in full (16 KiB). A larger input is shown as
// its head and tail with its size, and no remembered rule can allow it:
// its approver never read it whole, so it can be allowed once but not
// remembered (`substrat approvals show ID` prints all of it).
const MaxApprovalInput = 16 << 10

// ShowApprovalParams name the request of approval.show.
type ShowApprovalParams struct {
	ID string `json:"id"`
}

// ApprovalDetail is approval.show: one request, pending or answered, of
// a live agent, with what its approver is offered.
type ApprovalDetail struct {
	PendingApproval
	// Size is the input's size in bytes; TooLong is set above
	// MaxApprovalInput (no rule can be remembered for it).
	Size    int  `json:"size"`
	TooLong bool `json:"too_long,omitempty"`
	// Rule is the suggested rule to remember, if any.
	Rule string `json:"suggested_rule,omitempty"`
	// Commands are the parts of a Bash command, as the rules see them.
	Commands []string `json:"commands,omitempty"`
}

// InputText returns a tool input as one line of JSON, whole: the same
// tokens in the same order (duplicate keys kept), blanks between tokens
// dropped, strings re-quoted with nothing HTML-escaped (> and & as
// themselves, not \u003e), and every character that would hide or
// reorder text on a terminal (controls, bidirectional and zero-width
// format characters, line separators) written as a \u escape, so that
// what a person reads is what the tool gets. Input that is not JSON is
// quoted as a string.
func InputText(raw json.RawMessage) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	type frame struct {
		obj bool
		n   int
	}
	var stack []frame
	var b strings.Builder
	sep := func() {
		if len(stack) == 0 {
			return
		}
		f := &stack[len(stack)-1]
		switch {
		case f.obj && f.n%2 == 1:
			b.WriteByte(':')
		case f.n > 0:
			b.WriteByte(',')
		}
		f.n++
	}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return strconv.QuoteToGraphic(string(raw))
		}
		switch t := tok.(type) {
		case json.Delim:
			if t == '}' || t == ']' {
				b.WriteRune(rune(t))
				stack = stack[:len(stack)-1]
				continue
			}
			sep()
			b.WriteRune(rune(t))
			stack = append(stack, frame{obj: t == '{'})
		case string:
			sep()
			quoteJSON(&b, t)
		case json.Number:
			sep()
			b.WriteString(t.String())
		case bool:
			sep()
			b.WriteString(strconv.FormatBool(t))
		case nil:
			sep()
			b.WriteString("null")
		}
	}
	return b.String()
}

// quoteJSON writes s as a JSON string, escaping only what JSON needs and
// what hides text (termtext.Hides).
func quoteJSON(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case termtext.Hides(r) && r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
		case termtext.Hides(r):
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

// InputSummary abbreviates a tool input for a list, in at most about n
// characters: a command (the input's "command" string) or else the input
// as InputText, quoted, first line only, with the blanks it ends with
// left out, and then how much was left out: `"ls -la" (+2134 characters)`
// or `"make" (+12 characters, 2 more lines)`. Nothing is left out without
// saying so.
func InputSummary(raw json.RawMessage, n int) string {
	var in struct {
		Command *string `json:"command"`
	}
	subject := InputText(raw)
	if json.Unmarshal(raw, &in) == nil && in.Command != nil {
		subject = *in.Command
	}
	first, rest, multi := strings.Cut(subject, "\n")
	shown := first
	if r := []rune(shown); len(r) > n {
		shown = string(r[:n])
	}
	shown = strings.TrimRightFunc(shown, unicode.IsSpace)
	s := strconv.QuoteToGraphic(shown)
	hidden := utf8.RuneCountInString(subject) - utf8.RuneCountInString(shown)
	if hidden == 0 {
		return s
	}
	more := fmt.Sprintf(" (+%d characters", hidden)
	if multi {
		lines := strings.Count(rest, "\n") + 1
		more += fmt.Sprintf(", %d more line%s", lines, plural(lines))
	}
	return s + more + ")"
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// InputTooLong reports whether an input is larger than an approval
// message shows in full.
func InputTooLong(raw json.RawMessage) bool { return len(InputText(raw)) > MaxApprovalInput }

// InputHeadTail returns InputText(raw) whole when it fits in max bytes,
// or else its first and last max/2 bytes (cut on character boundaries)
// around a line that says how much is left out, and false.
func InputHeadTail(raw json.RawMessage, max int) (string, bool) {
	s := InputText(raw)
	if len(s) <= max {
		return s, true
	}
	head, tail := s[:max/2], s[len(s)-max/2:]
	for len(head) > 0 && !utf8.ValidString(head) {
		head = head[:len(head)-1]
	}
	for len(tail) > 0 && !utf8.ValidString(tail) {
		tail = tail[1:]
	}
	return fmt.Sprintf("%s\n[… %d bytes not shown …]\n%s", head, len(s)-len(head)-len(tail), tail), false
}
