package permrule

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"
)

// BashTool is the name of the shell tool whose rules match parsed
// commands.
const BashTool = "Bash"

// DefaultWorkspace is where a sandboxed agent's workspace is mounted: a
// redirection under it needs no rule.
const DefaultWorkspace = "/workspace"

// Options say where a command runs.
type Options struct {
	// Workspace are absolute directories, besides DefaultWorkspace, that
	// a redirection may name without a !redirect rule (the agent's own
	// directory).
	Workspace []string
}

func (o Options) workspace() []string {
	return append([]string{DefaultWorkspace}, o.Workspace...)
}

// Allow reports whether rules allow a use of tool with input, and which
// rules do: one rule, or for a Bash command the rules that allow its
// parts (each once, in the order of the parts). A rule that does not
// parse allows nothing.
func Allow(rules []string, tool string, input json.RawMessage, o Options) ([]string, bool) {
	rs := parseRules(rules, tool)
	for _, r := range rs {
		if r.all {
			return []string{r.text}, true
		}
	}
	if len(rs) == 0 {
		return nil, false
	}
	if tool != BashTool {
		subject, ok := subjectOf(input)
		if !ok {
			return nil, false
		}
		for _, r := range rs {
			if matchPath(r.spec, subject) {
				return []string{r.text}, true
			}
		}
		return nil, false
	}
	cmd, ok := commandOf(input)
	if !ok {
		return nil, false
	}
	parts, err := parse(cmd, o)
	if err != nil {
		return nil, false
	}
	// A command of no parts (blank, a comment, > out) runs nothing that
	// needs a rule: every one of its parts is allowed.
	var used []string
	for _, p := range parts {
		r := firstMatch(rs, p, false)
		if r == nil {
			return nil, false
		}
		if !contains(used, r.text) {
			used = append(used, r.text)
		}
	}
	return used, true
}

// Deny returns the first rule of rules that denies a use of tool with
// input, or "". A Bash command is denied when any of its parts matches a
// rule; strict words (see the package doc) do not protect a part from a
// deny rule.
func Deny(rules []string, tool string, input json.RawMessage, o Options) string {
	rs := parseRules(rules, tool)
	for _, r := range rs {
		if r.all {
			return r.text
		}
	}
	if len(rs) == 0 {
		return ""
	}
	if tool != BashTool {
		subject, ok := subjectOf(input)
		if !ok {
			return ""
		}
		for _, r := range rs {
			if matchPath(r.spec, subject) {
				return r.text
			}
		}
		return ""
	}
	cmd, ok := commandOf(input)
	if !ok {
		return ""
	}
	parts, err := parse(cmd, o)
	if err != nil {
		return ""
	}
	for _, p := range parts {
		if r := firstMatch(rs, p, true); r != nil {
			return r.text
		}
	}
	return ""
}

// Check checks a rule: a tool name, optionally with a specifier in
// parentheses; a Bash specifier must be a list of pattern words.
func Check(r string) error {
	name, spec, paren := strings.Cut(r, "(")
	switch {
	case strings.TrimSpace(r) != r || r == "":
		return fmt.Errorf("tool rule %q is empty or has surrounding blanks", r)
	case strings.ContainsAny(r, "\x00\n\r"):
		return fmt.Errorf("tool rule %q holds a control character", r)
	case name == "" || strings.ContainsAny(name, " )"):
		return fmt.Errorf("tool rule %q: want a tool name, optionally with a specifier: Bash(git *)", r)
	case paren && (!strings.HasSuffix(spec, ")") || len(spec) < 2):
		return fmt.Errorf("tool rule %q: the specifier must end with ')' and not be empty", r)
	}
	if name == BashTool && paren {
		if _, err := parseRule(r); err != nil {
			return err
		}
	}
	return nil
}

// rule is a parsed rule of one tool.
type rule struct {
	text  string
	all   bool      // the tool name alone, or Bash(*)
	spec  string    // the specifier (other tools)
	words []pattern // a Bash specifier
}

func parseRules(rules []string, tool string) []*rule {
	var out []*rule
	for _, text := range rules {
		name, _, _ := strings.Cut(text, "(")
		if name != tool {
			continue
		}
		if r, err := parseRule(text); err == nil {
			out = append(out, r)
		}
	}
	return out
}

func parseRule(text string) (*rule, error) {
	name, spec, paren := strings.Cut(text, "(")
	r := &rule{text: text}
	if !paren {
		r.all = true
		return r, nil
	}
	if !strings.HasSuffix(spec, ")") || len(spec) < 2 {
		return nil, fmt.Errorf("tool rule %q: the specifier must end with ')' and not be empty", text)
	}
	r.spec = strings.TrimSuffix(spec, ")")
	if name != BashTool {
		return r, nil
	}
	s := strings.TrimSpace(r.spec)
	if s == "*" {
		r.all = true
		return r, nil
	}
	if strings.HasSuffix(s, ":*") {
		s = strings.TrimSuffix(s, ":*") + " *" // Claude Code's older prefix form
	}
	words, err := tokenize(s)
	if err != nil {
		return nil, fmt.Errorf("tool rule %q: %v", text, err)
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("tool rule %q: no pattern words", text)
	}
	if first, ok := words[0].literal(); ok && strings.HasPrefix(first, "!") && !isConstruct(first) {
		return nil, fmt.Errorf("tool rule %q: %s is not a construct (want one of %s)", text, first, strings.Join(constructs, ", "))
	}
	r.words = words
	return r, nil
}

var constructs = []string{Subst, ProcSubst, Subshell, Function, Arith, Assign, Declare, Redirect}

func isConstruct(s string) bool { return contains(constructs, s) }

func firstMatch(rs []*rule, p part, deny bool) *rule {
	for _, r := range rs {
		if r.words != nil && matchPart(r.words, p, deny) {
			return r
		}
	}
	if deny && !p.construct && p.words[0].lit && strings.Contains(p.words[0].s, "/") {
		// A deny rule for rm also denies /bin/rm.
		q := part{words: append([]word{{s: path.Base(p.words[0].s), lit: true}}, p.words[1:]...)}
		return firstMatch(rs, q, deny)
	}
	return nil
}

// subjectOf returns what a rule of a tool other than Bash is matched
// against: the first of the input's command, file_path, path,
// notebook_path, url and pattern (as before parsed Bash rules).
func subjectOf(input json.RawMessage) (string, bool) {
	var in map[string]any
	if json.Unmarshal(input, &in) != nil {
		return "", false
	}
	for _, k := range []string{"command", "file_path", "path", "notebook_path", "url", "pattern"} {
		if s, ok := in[k].(string); ok {
			return s, true
		}
	}
	return "", false
}

// commandOf returns a Bash input's command; false if it has none, or has
// a field a word rule does not judge (such as dangerouslyDisableSandbox):
// such an input is allowed only by a rule for every use of Bash.
func commandOf(input json.RawMessage) (string, bool) {
	var in map[string]json.RawMessage
	if json.Unmarshal(input, &in) != nil {
		return "", false
	}
	var cmd string
	if json.Unmarshal(in["command"], &cmd) != nil {
		return "", false
	}
	for k := range in {
		if !bashFields[k] {
			return "", false
		}
	}
	return cmd, true
}

// bashFields are the fields of a Bash input that change nothing a rule
// judges.
var bashFields = map[string]bool{"command": true, "description": true, "timeout": true, "run_in_background": true}

// matchPath matches a specifier of a tool other than Bash, where * is
// any run of characters; a subject with a ".." element matches only a
// specifier without *.
func matchPath(spec, subject string) bool {
	if !strings.Contains(spec, "*") {
		return spec == subject
	}
	if hasDotDot(subject) {
		return false
	}
	return glob(strings.Split(spec, "*"), subject)
}

// glob matches s against parts, the literal runs between stars.
func glob(parts []string, s string) bool {
	if len(parts) == 1 {
		return s == parts[0]
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return strings.HasSuffix(s, parts[len(parts)-1])
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
