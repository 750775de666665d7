package permrule

import (
	"fmt"
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Constructs: the first word of a part that is not a simple command.
const (
	Subst     = "!subst"
	ProcSubst = "!procsubst"
	Subshell  = "!subshell"
	Function  = "!function"
	Arith     = "!arith"
	Assign    = "!assign"
	Declare   = "!declare"
	Redirect  = "!redirect"
)

// word is one word of a part.
type word struct {
	s string // its value after quote removal, when lit
	// lit: the shell takes the word as it is written (no expansion,
	// substitution, glob, brace or tilde).
	lit bool
	// strict: only a pattern word without * matches it (a command name
	// that runs code, an option that does).
	strict bool
}

// part is a simple command, or a construct (its first word is one of
// the constants above).
type part struct {
	construct bool
	words     []word
}

func (p part) String() string {
	var b strings.Builder
	for i, w := range p.words {
		if i > 0 {
			b.WriteByte(' ')
		}
		switch {
		case !w.lit:
			b.WriteString("<expanded>")
		case i == 0 && p.construct:
			b.WriteString(w.s)
		default:
			b.WriteString(quoteWord(w.s))
		}
	}
	return b.String()
}

// Parts returns the parts of a Bash command as text, one per simple
// command or construct, in the order they appear; an error if it does not
// parse. Words the shell expands are shown as <expanded>.
func Parts(command string, o Options) ([]string, error) {
	ps, err := parse(command, o)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out, nil
}

// parse cuts a command into its parts.
func parse(command string, o Options) ([]part, error) {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(command), "")
	if err != nil {
		return nil, fmt.Errorf("the command does not parse: %v", err)
	}
	w := walker{o: o}
	// A cd anywhere makes every relative redirection relative to a
	// directory the rule did not see.
	syntax.Walk(f, func(n syntax.Node) bool {
		if c, ok := n.(*syntax.CallExpr); ok && len(c.Args) > 0 {
			if v := wordOf(c.Args[0]); !v.lit || v.s == "cd" || v.s == "pushd" || v.s == "popd" {
				w.cd = true
			}
		}
		return true
	})
	syntax.Walk(f, w.visit)
	return w.parts, nil
}

type walker struct {
	o     Options
	cd    bool
	parts []part
}

func (w *walker) add(construct bool, words ...word) {
	if construct {
		words[0].strict = true
	}
	w.parts = append(w.parts, part{construct: construct, words: words})
}

func lit(s string) word { return word{s: s, lit: true} }

var dynamic = word{}

func (w *walker) visit(n syntax.Node) bool {
	switch n := n.(type) {
	case *syntax.CallExpr:
		for _, a := range n.Assigns {
			w.assign(a)
		}
		if len(n.Args) > 0 {
			w.command(n.Args)
		}
	case *syntax.DeclClause:
		w.declare(n)
	case *syntax.CmdSubst:
		w.add(true, lit(Subst))
	case *syntax.ProcSubst:
		w.add(true, lit(ProcSubst))
	case *syntax.Subshell, *syntax.CoprocClause:
		w.add(true, lit(Subshell))
	case *syntax.FuncDecl:
		w.add(true, lit(Function))
	case *syntax.ArithmExp, *syntax.ArithmCmd, *syntax.LetClause, *syntax.CStyleLoop:
		w.add(true, lit(Arith))
	case *syntax.ParamExp:
		if evaluates(n) {
			w.add(true, lit(Arith))
		}
		if n.Exp != nil && (n.Exp.Op == syntax.AssignUnset || n.Exp.Op == syntax.AssignUnsetOrNull) && n.Param != nil {
			w.add(true, lit(Assign), lit(n.Param.Value), dynamic)
		}
	case *syntax.BinaryTest:
		switch n.Op {
		case syntax.TsEql, syntax.TsNeq, syntax.TsLeq, syntax.TsGeq, syntax.TsLss, syntax.TsGtr:
			w.add(true, lit(Arith))
		}
	case *syntax.UnaryTest:
		if n.Op == syntax.TsVarSet || n.Op == syntax.TsRefVar {
			w.add(true, lit(Arith))
		}
	case *syntax.WordIter:
		w.add(true, lit(Assign), lit(n.Name.Value), dynamic)
	case *syntax.Redirect:
		w.redirect(n)
	case *syntax.TestDecl:
		w.add(true, lit(Function))
	}
	return true
}

// evaluates reports whether a parameter expansion evaluates arithmetic
// or code: an index, a slice, an indirection, a name list, or a @
// transformation (${x@P} runs the value's substitutions).
func evaluates(p *syntax.ParamExp) bool {
	return p.Index != nil || p.Slice != nil || p.Excl || p.Names != 0 || p.Width || p.Flags != nil ||
		p.NestedParam != nil || len(p.Modifiers) > 0 || (p.Exp != nil && p.Exp.Op == syntax.OtherParamOps)
}

func (w *walker) assign(a *syntax.Assign) {
	if a.Index != nil {
		w.add(true, lit(Arith))
	}
	name := dynamic
	if a.Name != nil {
		name = lit(a.Name.Value)
	}
	switch {
	case a.Array != nil:
		w.add(true, lit(Assign), name, dynamic)
	case a.Value != nil:
		w.add(true, lit(Assign), name, wordOf(a.Value))
	case a.Naked:
		w.add(true, lit(Assign), name)
	default:
		w.add(true, lit(Assign), name, lit(""))
	}
}

func (w *walker) declare(d *syntax.DeclClause) {
	plain := true
	for _, a := range d.Args {
		if a.Name == nil || a.Index != nil {
			plain = false
		}
	}
	if plain {
		for _, a := range d.Args {
			w.assign(a)
		}
		return
	}
	words := []word{lit(Declare), lit(d.Variant.Value)}
	for _, a := range d.Args {
		switch v := wordOf(a.Value); {
		case a.Name == nil && a.Value != nil:
			words = append(words, v)
		case a.Name != nil && a.Index == nil && a.Array == nil && a.Value != nil && v.lit:
			words = append(words, lit(a.Name.Value+"="+v.s))
		case a.Name != nil && a.Naked:
			words = append(words, lit(a.Name.Value))
		default:
			words = append(words, dynamic)
		}
	}
	w.add(true, words...)
}

func (w *walker) redirect(r *syntax.Redirect) {
	if r.N != nil && !isDigits(r.N.Value) {
		w.add(true, lit(Assign), lit(strings.Trim(r.N.Value, "{}")), dynamic) // {fd}>file
	}
	switch r.Op {
	case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
		return // a heredoc or here-string: its substitutions are walked
	case syntax.DplIn, syntax.DplOut:
		if v := wordOf(r.Word); v.lit && (isDigits(v.s) || v.s == "-" || isDigits(strings.TrimSuffix(v.s, "-"))) {
			return // 2>&1, >&-, 3<&0
		}
	}
	target := wordOf(r.Word)
	if target.lit && w.inside(target.s) {
		return
	}
	w.add(true, lit(Redirect), target)
}

// inside reports whether a redirection to p stays in the workspace.
func (w *walker) inside(p string) bool {
	if p == "/dev/null" {
		return true
	}
	if p == "" || hasDotDot(p) {
		return false
	}
	if !strings.HasPrefix(p, "/") {
		return !w.cd
	}
	for _, d := range w.o.workspace() {
		if d = path.Clean(d); p == d || strings.HasPrefix(p, strings.TrimSuffix(d, "/")+"/") {
			return true
		}
	}
	return false
}

// command adds a simple command.
func (w *walker) command(args []*syntax.Word) {
	words := make([]word, len(args))
	for i, a := range args {
		words[i] = wordOf(a)
	}
	name := words[0]
	base := path.Base(name.s)
	if !name.lit || runsCode[base] || shells[base] {
		words[0].strict = true
	}
	for i := 1; i < len(words); i++ {
		if words[i].lit && strictOption(base, words[i].s) {
			words[i].strict = true
		}
	}
	w.parts = append(w.parts, part{words: words})
}

// runsCode are commands that run another command, or code given as
// text. Only a rule that names them allows them.
var runsCode = set("eval", "exec", "source", ".", "trap", "alias", "unalias", "builtin", "command", "enable", "hash",
	"env", "xargs", "nohup", "nice", "ionice", "timeout", "time", "stdbuf", "sudo", "doas", "su", "runuser",
	"setsid", "chroot", "unshare", "nsenter", "watch", "parallel", "fc", "flock", "script", "chrt", "taskset",
	"prlimit", "systemd-run", "busybox", "strace", "ltrace", "gdb", "coproc", "select", "caller", "compgen",
	"complete", "bind", "declare", "typeset", "local", "export", "readonly", "let", "mapfile", "readarray", "read",
	"getopts", "unset", "shopt", "set")

// shells run their argument as a script, or their -c option as code.
var shells = set("sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "rbash", "csh", "tcsh", "yash", "posh")

// strictOption reports whether word is an option of the command that
// runs code (or writes or deletes files where the command's name does
// not say so).
func strictOption(cmd, w string) bool {
	has := func(opts ...string) bool {
		for _, o := range opts {
			if w == o || (strings.HasPrefix(o, "--") && strings.HasPrefix(w, o+"=")) {
				return true
			}
		}
		return false
	}
	switch {
	case shells[cmd]:
		if len(w) > 1 && (w[0] == '-' || w[0] == '+') && w[1] != '-' && strings.ContainsRune(w[1:], 'c') {
			return true // -c, -ec, -lc, +c
		}
		return has("--rcfile", "--init-file")
	case cmd == "find":
		return has("-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls")
	case cmd == "git":
		return has("-c", "--config-env") || strings.HasPrefix(w, "--exec") || strings.HasPrefix(w, "--upload-pack") ||
			strings.HasPrefix(w, "--receive-pack")
	case cmd == "rg":
		return has("--pre")
	case cmd == "tar":
		return has("--to-command", "--use-compress-program", "-I", "-F", "--info-script", "--new-volume-script", "--checkpoint-action")
	case cmd == "printf":
		return has("-v")
	case cmd == "test" || cmd == "[":
		return has("-v", "-R")
	}
	return false
}

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// wordOf returns a word's value after quote removal, and whether the
// shell takes it as written.
func wordOf(w *syntax.Word) word {
	if w == nil {
		return dynamic
	}
	var b strings.Builder
	out := word{lit: true}
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			// Unquoted: a glob, a brace or a tilde expands.
			if strings.ContainsAny(p.Value, "*?[{~") {
				out.lit = false
			}
			b.WriteString(unescape(p.Value, false))
		case *syntax.SglQuoted:
			if p.Dollar {
				out.lit = false // $'...' escapes
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				out.lit = false // $"..." is translated
			}
			for _, q := range p.Parts {
				if l, ok := q.(*syntax.Lit); ok {
					b.WriteString(unescape(l.Value, true))
				} else {
					out.lit = false
				}
			}
		default:
			out.lit = false
		}
	}
	if out.lit {
		out.s = b.String()
	}
	return out
}

// unescape removes the backslashes of an unquoted or a double-quoted
// literal as the shell does.
func unescape(s string, quoted bool) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		next := s[i+1]
		switch {
		case next == '\n':
			i++ // a line continuation
		case !quoted || strings.IndexByte("$`\"\\", next) >= 0:
			b.WriteByte(next)
			i++
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// hasDotDot reports whether a path has a ".." element.
func hasDotDot(p string) bool {
	for _, e := range strings.Split(p, "/") {
		if e == ".." {
			return true
		}
	}
	return false
}
