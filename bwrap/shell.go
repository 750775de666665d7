package bwrap

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// shellScript is the wrapper Shell runs with /bin/sh -c; $1 is the user's
// command. It restores the state saved by the previous command (exported
// variables, then the working directory), evaluates the command in the
// same shell, so that cd and export take effect, and saves the state again
// on exit, whatever the command did, keeping its exit status. The state is
// written to a temporary file and renamed, so a killed command leaves the
// old state or the new one. It writes only under ShellDir, never into the
// root, so it works when the root is read-only.
var shellScript = ShellWrapper(ShellDir)

// ShellWrapper returns the wrapper script of Shell with its state kept in
// the directory stateDir (a path as the shell sees it): for a shell that
// runs outside a sandbox, with /bin/sh -c WRAPPER substrat-shell SCRIPT.
func ShellWrapper(stateDir string) string {
	stateDir = "'" + strings.ReplaceAll(stateDir, "'", `'\''`) + "'"
	return `__substrat_save() {
	__substrat_cwd=$PWD
	export __substrat_cwd
	export -p >` + stateDir + `/state.tmp && /bin/mv -f ` + stateDir + `/state.tmp ` + stateDir + `/state
}
trap '__substrat_status=$?; set +eu; __substrat_save; exit $__substrat_status' EXIT
if [ -f ` + stateDir + `/state ]; then
	. ` + stateDir + `/state
	cd -- "${__substrat_cwd:-$HOME}" 2>/dev/null || echo "substrat: cannot return to $__substrat_cwd; starting in $PWD" >&2
	unset __substrat_cwd
fi
__substrat_cmd=$1
shift
eval "unset __substrat_cmd; $__substrat_cmd"
`
}

// Shell returns a command that runs script with /bin/sh inside the sandbox
// s, in the shell state left by the previous Shell command with the same
// state directory: its working directory and exported variables. The
// state directory, state.Host, is a host directory kept outside the
// sandbox's root (it is created if missing) and bound read-write at
// ShellDir, resolved as state says; that is the only place the wrapper
// writes, so the state persists in a read-only root too.
//
// The environment of s applies where the saved state does not say
// otherwise: a variable the previous command exported or changed keeps its
// value, but unsetting a variable that s sets does not persist. Two Shell
// commands that run at once on one stateDir each save their own state;
// the last to finish wins. The command's exit status is the wrapper's.
//
// It fails like Command, and with ErrInvalidSpec when s already mounts
// something at ShellDir or state is not an absolute clean path within its
// anchor. Like Command, the caller closes the command's files (CloseFiles).
func Shell(ctx context.Context, s Spec, state Source, script string) (*exec.Cmd, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	if err := state.validate(); err != nil {
		return nil, fmt.Errorf("%w: shell state directory: %v", ErrInvalidSpec, err)
	}
	if err := os.MkdirAll(state.Host, 0o700); err != nil {
		return nil, fmt.Errorf("shell state directory: %w", err)
	}
	extra := []Mount{{Source: state, Target: ShellDir}}
	return command(ctx, s, extra, []string{"/bin/sh", "-c", shellScript, "substrat-shell", script})
}
