package permrule

import (
	"encoding/json"
	"path"
	"regexp"
	"strings"
)

// Suggest returns the narrowest useful rule that allows this use of tool
// again, or "" when no rule should be suggested (a Bash command of more
// than one part, one that does not parse, or one no word rule allows).
// A suggestion always allows the use it was made for.
func Suggest(tool string, input json.RawMessage, o Options) string {
	if tool != BashTool {
		var in map[string]any
		json.Unmarshal(input, &in)
		p, ok := in["file_path"].(string)
		switch {
		case !ok:
			return tool
		case strings.HasPrefix(p, "/") && !hasDotDot(p) && !strings.Contains(path.Dir(p), "*"):
			if r := tool + "(" + path.Dir(p) + "/*)"; Check(r) == nil {
				return r
			}
		case !strings.Contains(p, "*"):
			if r := tool + "(" + p + ")"; Check(r) == nil {
				return r
			}
		}
		return ""
	}
	cmd, ok := commandOf(input)
	if !ok {
		return ""
	}
	parts, err := parse(cmd, o)
	if err != nil || len(parts) != 1 || parts[0].construct {
		return ""
	}
	words := parts[0].words
	if !words[0].lit {
		return ""
	}
	name := words[0].s
	var candidates []string
	exact := BashTool + "(" + parts[0].String() + ")" // checked below: an expanded word makes it match nothing
	switch base := path.Base(name); {
	case runsCode[base] || shells[base] || interpreters[base] || destroys[base] || strings.Contains(name, "/"):
		candidates = []string{exact}
	case len(words) > 1 && words[1].lit && subcommands[base] && subcommand.MatchString(words[1].s):
		candidates = []string{BashTool + "(" + quoteWord(name) + " " + words[1].s + " *)", exact}
	default:
		candidates = []string{BashTool + "(" + quoteWord(name) + " *)", exact}
	}
	for _, c := range candidates {
		if Check(c) != nil {
			continue
		}
		if _, ok := Allow([]string{c}, tool, input, o); ok {
			return c
		}
	}
	return ""
}

// subcommand is what a subcommand looks like (status, run-script), as
// opposed to a path or an option.
var subcommand = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// subcommands are tools whose first argument names what they do.
var subcommands = set("git", "go", "npm", "yarn", "pnpm", "cargo", "docker", "podman", "kubectl", "gh", "pip", "pip3",
	"uv", "poetry", "apt", "apt-get", "brew", "systemctl", "terraform", "helm", "dotnet", "bun", "deno", "rustup",
	"gcloud", "aws", "az", "make", "just", "task", "mvn", "gradle", "composer", "bundle", "rake", "nix", "conda",
	"journalctl", "ip", "hg", "svn", "jj", "opam", "stack", "cabal", "mix", "swift", "zig", "bazel", "pnpx")

// interpreters run any program they are given.
var interpreters = set("python", "python3", "python2", "node", "nodejs", "perl", "ruby", "php", "lua", "awk", "gawk",
	"mawk", "nawk", "sed", "gsed", "tclsh", "Rscript", "julia", "npx", "bunx", "expect", "osascript", "ssh", "pwsh", "vim", "vi", "nvim", "emacs", "less", "more", "man")

// destroys are commands whose arguments decide what is lost or sent:
// only the exact command is suggested.
var destroys = set("rm", "rmdir", "dd", "mkfs", "shred", "chmod", "chown", "chgrp", "mv", "cp", "ln", "truncate",
	"curl", "wget", "scp", "rsync", "nc", "ncat", "socat", "kill", "pkill", "killall", "shutdown", "reboot", "mount",
	"umount", "install", "tee", "crontab", "at", "git-receive-pack", "git-upload-pack")
