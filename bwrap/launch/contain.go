package launch

import (
	"context"
	"os/exec"
	"sync"
)

// Containment of a process that runs without a sandbox.
//
// A process group is not a boundary: a CLI's background command can call
// setsid or daemonize, leave the group, and outlive the turn, the agent
// and the daemon (a gemini `sleep 3171 &` did). A provider process or a
// shell command without a sandbox therefore runs in a PID namespace of
// its own, made by bwrap with the whole file system as it is (--dev-bind
// / /): when the command exits, or bwrap is killed (the turn's end,
// terminate, stop) or its parent dies (--die-with-parent: the daemon
// killed with SIGKILL), the kernel kills everything left in the
// namespace. A sandboxed process (Command, Shell) has the same from its
// sandbox (--unshare-all). Without bwrap installed the process runs in
// its own group only.

var (
	bwrapOnce sync.Once
	bwrapPath string
)

// containPath returns the bwrap executable, or "".
func containPath() string {
	bwrapOnce.Do(func() { bwrapPath, _ = exec.LookPath("bwrap") })
	return bwrapPath
}

// Contain returns cmd run in a PID namespace of its own, with the file
// system, environment and working directory it has, or cmd as it is when
// bwrap is not installed. The caller sets the streams, process group and
// cancellation of the command returned.
func Contain(ctx context.Context, cmd *exec.Cmd) *exec.Cmd {
	if containPath() == "" {
		return cmd
	}
	argv := ContainArgv(append([]string{cmd.Path}, cmd.Args[1:]...), cmd.Dir)
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Dir, c.Env = cmd.Dir, cmd.Env
	return c
}

// ContainArgv returns the command line that runs argv (the program's
// path first) as Contain does, in a PID namespace of its own with dir as
// its working directory; argv itself when bwrap is not installed.
func ContainArgv(argv []string, dir string) []string {
	bw := containPath()
	if bw == "" {
		return argv
	}
	args := []string{bw, "--dev-bind", "/", "/", "--unshare-pid", "--die-with-parent", "--proc", "/proc"}
	if dir != "" {
		args = append(args, "--chdir", dir)
	}
	return append(append(args, "--"), argv...)
}
