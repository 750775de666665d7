package permrule

import (
	"fmt"
	"regexp"
	"strings"
)

// plainWord is a word that reads the same in a rule and in a shell.
var plainWord = regexp.MustCompile(`^[A-Za-z0-9_./:=+,@%^-]+$`)

// pattern is one word of a Bash rule: literal runs between unquoted
// stars (a word without stars has one run).
type pattern struct {
	runs []string
}

// lone reports whether the pattern is a lone *: any number of words.
func (p pattern) lone() bool { return len(p.runs) == 2 && p.runs[0] == "" && p.runs[1] == "" }

// literal returns the pattern's text when it has no star.
func (p pattern) literal() (string, bool) {
	if len(p.runs) == 1 {
		return p.runs[0], true
	}
	return "", false
}

// tokenize cuts a Bash specifier into pattern words: blanks separate
// words, '...' and "..." quote (\" and \\ inside double quotes), a
// backslash outside quotes escapes the next character, and an unquoted *
// is a wildcard.
func tokenize(s string) ([]pattern, error) {
	var out []pattern
	var cur []string
	var run strings.Builder
	in := false // inside a word
	end := func() {
		if in {
			out = append(out, pattern{runs: append(cur, run.String())})
		}
		cur, in = nil, false
		run.Reset()
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case ' ', '\t':
			end()
			continue
		}
		in = true
		switch c {
		case '*':
			cur = append(cur, run.String())
			run.Reset()
		case '\\':
			if i+1 == len(s) {
				return nil, fmt.Errorf("a trailing backslash")
			}
			i++
			run.WriteByte(s[i])
		case '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("an unterminated quote")
			}
			run.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					i++
				}
				run.WriteByte(s[i])
			}
			if i == len(s) {
				return nil, fmt.Errorf("an unterminated quote")
			}
		default:
			run.WriteByte(c)
		}
	}
	end()
	return out, nil
}

// matchPart matches a part against a rule's words. A construct is
// matched only by a rule whose first word is its name, and a simple
// command only by another rule. A lone * matches any number of words
// but never a strict word (unless deny); a word with a star matches
// one literal, non-strict word with no ".." element; a word without a
// star matches a literal word equal to it.
func matchPart(ps []pattern, p part, deny bool) bool {
	first, ok := ps[0].literal()
	if (ok && strings.HasPrefix(first, "!")) != p.construct {
		return false
	}
	n, m := len(ps), len(p.words)
	// ok[i][j]: ps[i:] matches p.words[j:].
	memo := make([][]bool, n+1)
	for i := range memo {
		memo[i] = make([]bool, m+1)
	}
	memo[n][m] = true
	for i := n - 1; i >= 0; i-- {
		pat := ps[i]
		for j := m; j >= 0; j-- {
			if pat.lone() {
				// None, or this word and then any number.
				memo[i][j] = memo[i+1][j] || (j < m && (deny || !p.words[j].strict) && memo[i][j+1])
				continue
			}
			memo[i][j] = j < m && matchWord(pat, p.words[j], deny) && memo[i+1][j+1]
		}
	}
	return memo[0][0]
}

func matchWord(pat pattern, w word, deny bool) bool {
	if !w.lit {
		return false
	}
	if s, ok := pat.literal(); ok {
		return s == w.s
	}
	if (w.strict && !deny) || hasDotDot(w.s) {
		return false
	}
	return glob(pat.runs, w.s)
}

// quoteWord writes s as a pattern word that matches exactly s.
func quoteWord(s string) string {
	if plainWord.MatchString(s) {
		return s
	}
	if !strings.Contains(s, "'") {
		return "'" + s + "'"
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
