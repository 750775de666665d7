package k8s

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/substrat/substrat/executor"
)

// reapScript kills, in the pod, every process but its PID 1 and the
// script's own line of parents (the exec's wrapper), twice over (what
// forked meanwhile): what the agent's processes left running, which
// setsid took out of the process group that the end of their exec
// kills. It acts only in the pod's container: not as root (the pod runs
// as UID; kwok's exec runs on its own machine, as its user), and only
// where PID 1's command line is the pod's ($1, podInit's words each
// followed by a space); elsewhere it does nothing.
const reapScript = `[ "$(id -u)" != 0 ] || exit 0;` +
	` [ "$(tr '\0' ' ' </proc/1/cmdline 2>/dev/null)" = "$1" ] || exit 0;` +
	` keep=" 1 "; p=$$; while [ -n "$p" ] && [ "$p" -gt 1 ]; do keep="$keep$p ";` +
	` p=$(grep '^PPid:' "/proc/$p/status" 2>/dev/null | tr -dc 0-9); done;` +
	` for i in 1 2; do for d in /proc/[0-9]*; do q=${d#/proc/};` +
	` case "$keep" in *" $q "*) continue;; esac; kill -9 "$q" 2>/dev/null; done; done; exit 0`

// Reap kills what the processes of agent's incarnation left running in
// its pod (a process that setsid took out of its exec's group, which
// locally the sandbox's end would have killed): call it before a copy
// into or out of the pod, when none of the agent's processes should
// run there, so that none changes or stalls the copy.
func (e *Executor) Reap(ctx context.Context, agent, incarnation string) error {
	var out bytes.Buffer
	w := &limitedBuffer{b: &out, n: 4096} // one writer for both: Start serializes its writes
	p, err := e.Start(ctx, &executor.Cmd{Agent: agent, Incarnation: incarnation, Env: []string{copyPath},
		Argv:   []string{"/bin/sh", "-c", reapScript, "substrat-reap", strings.Join(podInit, " ") + " "},
		Stdout: w, Stderr: w})
	if err != nil {
		return err
	}
	if err := p.Wait(); err != nil {
		return fmt.Errorf("reaping the pod of agent %s: %w: %s", agent, err, strings.TrimSpace(out.String()))
	}
	return nil
}
