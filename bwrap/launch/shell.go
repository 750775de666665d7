package launch

import (
	"context"
	"fmt"
	"os"
	"os/exec"

	"github.com/substrat/substrat/bwrap"
)

// Shell returns a command that runs script with /bin/sh inside the sandbox
// s, in the shell state left by the previous Shell command with the same
// state directory: its working directory and exported variables. The
// state directory, state.Host, is a host directory kept outside the
// sandbox's root (it is created if missing) and bound read-write at
// bwrap.ShellDir, resolved as state says; that is the only place the
// wrapper (bwrap.ShellWrapper) writes, so the state persists in a
// read-only root too.
//
// The environment of s applies where the saved state does not say
// otherwise: a variable the previous command exported or changed keeps its
// value, but unsetting a variable that s sets does not persist. Two Shell
// commands that run at once on one stateDir each save their own state;
// the last to finish wins. The command's exit status is the wrapper's.
//
// It fails like Command, and like bwrap.PlanShell. Like Command, the
// caller closes the command's files (CloseFiles).
func Shell(ctx context.Context, s bwrap.Spec, state bwrap.Source, script string) (*exec.Cmd, error) {
	path, err := LookPath()
	if err != nil {
		return nil, err
	}
	p, err := bwrap.PlanShell(path, s, state, script)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(state.Host, 0o700); err != nil {
		return nil, fmt.Errorf("shell state directory: %w", err)
	}
	return start(ctx, p)
}
