package proc

import (
	"context"
	"os/exec"
	"sync"
)

// Containment of a provider process that runs without a sandbox.
//
// A process group is not a boundary: a CLI's background command can call
// setsid or daemonize, leave the group, and outlive the turn, the agent
// and the daemon (a gemini `sleep 3171 &` did). A provider process
// without a sandbox therefore runs in a PID namespace of its own, made
// by bwrap with the whole file system as it is (--dev-bind / /): when
// the CLI exits, or bwrap is killed (the turn's end, terminate, stop) or
// its parent dies (--die-with-parent: the daemon killed with SIGKILL),
// the kernel kills everything left in the namespace. A sandboxed process
// (Command.Wrap) has the same from its sandbox. Without bwrap installed
// the process runs in its own group only, as before.

var (
	bwrapOnce sync.Once
	bwrapPath string
)

// containPath returns the bwrap executable, or "".
func containPath() string {
	bwrapOnce.Do(func() { bwrapPath, _ = exec.LookPath("bwrap") })
	return bwrapPath
}

// contain returns cmd run in a PID namespace of its own, or cmd as it is
// when bwrap is not installed.
func contain(ctx context.Context, cmd *exec.Cmd) *exec.Cmd {
	bw := containPath()
	if bw == "" {
		return cmd
	}
	args := []string{"--dev-bind", "/", "/", "--unshare-pid", "--die-with-parent", "--proc", "/proc"}
	if cmd.Dir != "" {
		args = append(args, "--chdir", cmd.Dir)
	}
	args = append(append(args, "--", cmd.Path), cmd.Args[1:]...)
	c := exec.CommandContext(ctx, bw, args...)
	c.Dir, c.Env = cmd.Dir, cmd.Env
	return c
}
