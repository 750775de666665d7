package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/alecthomas/kong"
	"github.com/posener/complete"
	"github.com/willabides/kongplete"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/rpc"
	"github.com/substrat/substrat/supervisor/workspace"
)

// CompletionCmd prints the shell code that completes substrat's commands,
// flags and live names.
type CompletionCmd struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"The shell: bash, zsh or fish."`
}

// completionScripts hand completion to the binary itself: the shell runs
// `substrat` with COMP_LINE set, and it answers (kongplete, on
// posener/complete).
var completionScripts = map[string]string{
	"bash": "complete -o default -C %[1]q %[2]s\n",
	"zsh":  "autoload -U +X bashcompinit && bashcompinit\ncomplete -o default -C %[1]q %[2]s\n",
	"fish": `function __complete_%[2]s
    set -lx COMP_LINE (commandline -cp)
    test -z (commandline -ct)
    and set COMP_LINE "$COMP_LINE "
    %[1]q
end
complete -f -c %[2]s -a "(__complete_%[2]s)"
`,
}

// Run prints the script. Add `source <(substrat completion bash)` to
// ~/.bashrc (zsh: ~/.zshrc; fish: substrat completion fish | source).
func (c *CompletionCmd) Run(g *Globals) error {
	bin, err := exec.LookPath(os.Args[0]) // as the shell finds it
	if err == nil {
		bin, err = filepath.Abs(bin)
	}
	if err != nil {
		if bin, err = os.Executable(); err != nil {
			return err
		}
	}
	fmt.Printf(completionScripts[c.Shell], bin, "substrat")
	return nil
}

// completeLine answers a completion request (COMP_LINE is set) and exits;
// otherwise it returns.
func completeLine(parser *kong.Kong) {
	line := os.Getenv("COMP_LINE")
	if line == "" {
		return
	}
	if p, err := strconv.Atoi(os.Getenv("COMP_POINT")); err == nil && p >= 0 && p <= len(line) {
		line = line[:p]
	}
	// kongplete knows only a command's own flags: the global ones, taken
	// out of the line, no longer count as its positional arguments.
	var rest string
	lineHome, rest = globalFlags(line)
	os.Setenv("COMP_LINE", rest)
	os.Setenv("COMP_POINT", strconv.Itoa(len(rest)))
	kongplete.Complete(parser, kongplete.WithExitFunc(os.Exit), kongplete.WithPredictors(map[string]complete.Predictor{
		"agent":     complete.PredictFunc(predictAgents),
		"workspace": complete.PredictFunc(predictWorkspaces),
		"provider":  complete.PredictSet(providers().Names()...),
		"mode":      complete.PredictSet(fsstore.PermissionModes...),
		"file":      complete.PredictFiles("*"),
		"dir":       complete.PredictDirs("*"),
	}))
}

// lineHome is the --home given on the line being completed, if any.
var lineHome string

// globalFlags returns the --home of a command line being completed, and
// the line without the global flags (--home, --json, --jq and their
// values) but for the word being typed.
func globalFlags(line string) (home, rest string) {
	words := strings.Fields(line)
	typing := ""
	if len(words) > 0 && !strings.HasSuffix(line, " ") {
		typing, words = words[len(words)-1], words[:len(words)-1]
	}
	var kept []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		name, value, hasValue := strings.Cut(w, "=")
		switch {
		case w == "--":
			kept = append(kept, words[i:]...)
			i = len(words)
		case name == "--json":
		case name == "--home" || name == "--jq":
			if !hasValue && i+1 < len(words) {
				i++
				value, hasValue = words[i], true
			}
			if !hasValue { // its value is the word being typed
				kept = append(kept, w)
			} else if name == "--home" {
				home = unquote(value)
			}
		default:
			kept = append(kept, w)
		}
	}
	rest = strings.Join(append(kept, typing), " ")
	return home, rest
}

// completionHome is the home of the line being completed: its --home
// (anywhere on it), by the rule every command follows (resolveHome).
func completionHome(complete.Args) string {
	return resolveHome(lineHome)
}

// unquote strips the quotes of a word quoted whole, as the shell would.
func unquote(w string) string {
	if len(w) >= 2 && (w[0] == '\'' || w[0] == '"') && w[len(w)-1] == w[0] {
		return w[1 : len(w)-1]
	}
	return w
}

// completionBudget bounds how long a completion may ask the daemon; the
// store's files answer when it does not.
const completionBudget = 50 * time.Millisecond

// predictAgents offers the refs of live agents: their paths, their names
// (unique or not: the shell filters by prefix) and their ids' prefixes are
// left out. The daemon answers when it runs; otherwise the names come
// from the session.json files.
func predictAgents(args complete.Args) []string {
	home := completionHome(args)
	if names := daemonAgents(home); names != nil {
		return names
	}
	return storedAgents(home)
}

// daemonAgents asks a running daemon for agent.list; nil if it does not
// answer within completionBudget.
func daemonAgents(home string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), completionBudget)
	defer cancel()
	c, err := rpc.Dial(ctx, fsstore.Layout{Home: home}.Socket())
	if err != nil {
		return nil
	}
	defer c.Close()
	list, err := rpc.Call(ctx, c, api.AgentList, api.ListParams{})
	if err != nil {
		return nil
	}
	out := []string{}
	for _, a := range list {
		out = append(out, a.Path)
		if a.Name != a.Path {
			out = append(out, a.Name)
		}
	}
	return dedupe(out)
}

// storedAgents reads the names and parents of the agents in agents/ and
// builds their paths, as the daemon would.
func storedAgents(home string) []string {
	dir := fsstore.Layout{Home: home}.AgentsDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	type agent struct{ name, parent string }
	agents := map[string]agent{}
	for _, e := range entries {
		if !fsstore.IsID(e.Name()) || !e.IsDir() {
			continue
		}
		s, err := fsstore.OS{}.ReadFile(filepath.Join(dir, e.Name(), fsstore.SessionName))
		if err != nil {
			continue
		}
		sess, err := fsstore.DecodeSession(s)
		if err != nil || sess.AgentState == fsstore.AgentTerminated {
			continue
		}
		agents[sess.ID] = agent{sess.Name, sess.ParentID}
	}
	var out []string
	for id, a := range agents {
		path, cur := a.name, a
		for depth := 0; cur.parent != "" && depth < 64; depth++ {
			p, ok := agents[cur.parent]
			if !ok {
				break
			}
			path, cur = p.name+"/"+path, p
		}
		out = append(out, path, a.name)
		_ = id
	}
	return dedupe(out)
}

// predictWorkspaces offers the workspaces of the store: USER's by name,
// every one as scope/name.
func predictWorkspaces(args complete.Args) []string {
	dir := fsstore.Layout{Home: completionHome(args)}.WorkspacesDir()
	scopes, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, s := range scopes {
		names, err := os.ReadDir(filepath.Join(dir, s.Name()))
		if err != nil {
			continue
		}
		for _, n := range names {
			if strings.HasPrefix(n.Name(), ".") || !n.IsDir() {
				continue
			}
			if s.Name() == workspace.UserScope {
				out = append(out, n.Name())
			}
			out = append(out, s.Name()+"/"+n.Name())
		}
	}
	return dedupe(out)
}

func dedupe(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}
