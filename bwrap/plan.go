package bwrap

import (
	"fmt"
	"strings"
)

// A Plan is a sandboxed command as bwrap runs it, worked out without
// touching a file: its command line, the mounts it binds from
// descriptors (--bind-fd 3, 4, ..., in this order: the caller opens
// them, see Open) and its environment (Environ). Package launch runs it.
type Plan struct {
	Argv  []string
	Binds []Mount
	Env   []string
}

// PlanCommand returns the plan of cmd run inside the sandbox s by the
// bwrap at bwrapPath. It fails like Argv.
func PlanCommand(bwrapPath string, s Spec, cmd []string) (Plan, error) {
	if err := s.validate(); err != nil {
		return Plan{}, err
	}
	return plan(bwrapPath, s, nil, cmd)
}

// PlanShell returns the plan of Shell's command: script run with /bin/sh
// inside the sandbox s, in the shell state kept in the host directory
// state, bound read-write at ShellDir (see package launch). It fails like
// Argv, and with ErrInvalidSpec when s already mounts something at
// ShellDir or state is not an absolute clean path within its anchor.
func PlanShell(bwrapPath string, s Spec, state Source, script string) (Plan, error) {
	if err := s.validate(); err != nil {
		return Plan{}, err
	}
	if err := state.validate(); err != nil {
		return Plan{}, fmt.Errorf("%w: shell state directory: %v", ErrInvalidSpec, err)
	}
	extra := []Mount{{Source: state, Target: ShellDir}}
	return plan(bwrapPath, s, extra, []string{"/bin/sh", "-c", shellScript, "substrat-shell", script})
}

// plan returns the plan of cmd in s (validated) plus the extra mounts.
func plan(bwrapPath string, s Spec, extra []Mount, cmd []string) (Plan, error) {
	argv, err := build(bwrapPath, s, extra, cmd, false)
	if err != nil {
		return Plan{}, err
	}
	return Plan{Argv: argv, Binds: append(s.Grants(), extra...), Env: Environ(s)}, nil
}

// shellScript is the wrapper PlanShell runs with /bin/sh -c; $1 is the
// user's command. It restores the state saved by the previous command
// (exported variables, then the working directory), evaluates the command
// in the same shell, so that cd and export take effect, and saves the
// state again on exit, whatever the command did, keeping its exit status.
// The state is written to a temporary file and renamed, so a killed
// command leaves the old state or the new one. It writes only under
// ShellDir, never into the root, so it works when the root is read-only.
var shellScript = ShellWrapper(ShellDir)

// ShellWrapper returns the wrapper script of a shell with its state kept
// in the directory stateDir (a path as the shell sees it): for a shell
// that runs outside a sandbox, with /bin/sh -c WRAPPER substrat-shell
// SCRIPT.
func ShellWrapper(stateDir string) string {
	return shellWrapper("", "'"+strings.ReplaceAll(stateDir, "'", `'\''`)+"'")
}

// ShellStateEnv names the directory of ShellWrapperEnv's state.
const ShellStateEnv = "SUBSTRAT_SHELL_STATE"

// ShellWrapperEnv is ShellWrapper with the state kept in the directory
// that $SUBSTRAT_SHELL_STATE names (made if missing; the variable is
// not passed on to the command): for a shell whose state directory is
// known only where it runs (another host, a pod).
func ShellWrapperEnv() string {
	return shellWrapper(`__substrat_state=${`+ShellStateEnv+`:?}
unset `+ShellStateEnv+`
mkdir -p -- "$__substrat_state" || exit 125
`, `"$__substrat_state"`)
}

// shellWrapper is the wrapper after prelude, with the state directory
// the shell word dir.
func shellWrapper(prelude, dir string) string {
	return prelude + `__substrat_save() {
	__substrat_cwd=$PWD
	export __substrat_cwd
	export -p >` + dir + `/state.tmp && /bin/mv -f ` + dir + `/state.tmp ` + dir + `/state
}
trap '__substrat_status=$?; set +eu; __substrat_save; exit $__substrat_status' EXIT
if [ -f ` + dir + `/state ]; then
	. ` + dir + `/state
	cd -- "${__substrat_cwd:-$HOME}" 2>/dev/null || echo "substrat: cannot return to $__substrat_cwd; starting in $PWD" >&2
	unset __substrat_cwd
fi
__substrat_cmd=$1
shift
eval "unset __substrat_cmd; $__substrat_cmd"
`
}
