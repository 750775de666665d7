package main

import (
	"os"
	"os/user"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/alecthomas/kong"
	"mvdan.cc/sh/v3/syntax"
)

// The home rule, the only one (the CLI's flags, completion, hints, demo):
// --home if given, else $SUBSTRAT_HOME, else $HOME/.substrat. A leading
// "~/" means $HOME, as the shell has it, not the passwd entry; the passwd
// entry is used only when HOME is unset (a bare service environment). A
// relative path is made absolute.
const homeHelp = "Substrat home directory: --home, else $SUBSTRAT_HOME, else $HOME/.substrat."

// resolveHome applies the home rule to flag, the --home given ("" if none).
func resolveHome(flag string) string {
	h := flag
	if h == "" {
		h = os.Getenv("SUBSTRAT_HOME")
	}
	if h == "" {
		return filepath.Join(userHome(), ".substrat")
	}
	return expandPath(h)
}

// expandPath is p with a leading "~" or "~/" taken as $HOME (userHome)
// and made absolute. It replaces kong's "path" type (pathMapper), which
// takes "~" from the passwd entry.
func expandPath(p string) string {
	if p == "~" {
		return userHome()
	}
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		return filepath.Join(userHome(), rest)
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// pathMapper decodes the flags and arguments of type "path": expandPath,
// except "-" (standard input) and "".
type pathMapper struct{}

func (pathMapper) Decode(ctx *kong.DecodeContext, target reflect.Value) error {
	var p string
	if err := ctx.Scan.PopValueInto("path", &p); err != nil {
		return err
	}
	if p != "" && p != "-" {
		p = expandPath(p)
	}
	target.SetString(p)
	return nil
}

// userHome is $HOME, or the passwd entry's home when HOME is unset.
func userHome() string {
	if h := os.Getenv("HOME"); h != "" {
		return h
	}
	if u, err := user.Current(); err == nil && u.HomeDir != "" {
		return u.HomeDir
	}
	return "/"
}

// homeFlag is " --home DIR" for a hint's command, if the user typed
// --home, and "" otherwise: a hint never names a home nobody typed.
func (g *Globals) homeFlag() string {
	if !g.homeTyped {
		return ""
	}
	return " --home " + shellWord(g.Home)
}

// shellWord quotes s for a POSIX shell if it needs it.
func shellWord(s string) string {
	if q, err := syntax.Quote(s, syntax.LangPOSIX); err == nil {
		return q
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
