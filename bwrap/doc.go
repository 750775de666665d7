// Package bwrap describes a sandbox and turns it into a bubblewrap (bwrap)
// command line, as data: it runs nothing (package bwrap/launch does).
//
// A Spec names what a sandboxed process may see: one host directory bound
// at the working directory (the workspace root, "/workspace" by default),
// extra mounts, whether it has the network, and its environment. Argv builds
// the whole command line as a pure function, so tests compare it with
// literal tables; PlanCommand and PlanShell add what bwrap binds from
// descriptors and its environment (a Plan), which launch.Command and
// launch.Shell run.
//
// Inside the sandbox a process sees:
//
//   - the system directories /usr, /bin, /sbin, /lib and /lib64, read-only
//     (each one that exists on the host; on a merged-/usr system /bin and
//     friends are symlinks, and binding them follows the link);
//   - a minimal /etc: the dynamic linker cache, alternatives, passwd, group,
//     nsswitch.conf, localtime, ssl and ca-certificates, and with the
//     network also resolv.conf and hosts;
//   - a fresh /proc, a minimal /dev and an empty, private tmpfs at /tmp;
//   - the root and the mounts of the spec, in order;
//   - a read-only "/" holding all of these, so that /tmp and the
//     read-write binds are the only places a process can write;
//   - nothing else: not the host's /home, /root, /tmp or the rest of /etc.
//
// Every namespace is unshared (the network too unless Spec.Network), every
// capability is dropped even when the daemon runs as root, the environment
// is cleared and rebuilt from a fixed PATH, HOME=<workdir>, TERM=dumb and
// Spec.Env (and bwrap sets PWD=<workdir>), the process gets a new session (no terminal injection), and it
// dies with bwrap.
//
// Mount targets inside a read-only root must already exist in it: bwrap
// cannot create a mount point in a read-only bind, and says so.
//
// # Binds are made from descriptors
//
// A sandboxed process can change what it can write, and a bind made by
// name binds whatever the name means when bwrap gets to it: swap a bound
// directory for a symlink to "/" between the check and the bind, and the
// sandbox gets the host's root. So every bind of a Spec (the root, the
// mounts, Shell's state) names a Source: its host path, a trusted anchor
// opened by name (the daemon's home; "/" by default), and how far down
// symlinks may be followed. launch.Command resolves each source once, with
// openat2(2) (RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS), keeps the descriptor
// and hands it to bwrap (--bind-fd, --ro-bind-fd), so what was resolved is
// what is bound; bwrap checks again after its mount that the mount is the
// descriptor's file, and dies if not. A source with a symlink where none
// may be is refused (ErrSymlink), one whose symlink leads out of where it
// must stay too (ErrLeaves). The system directories and /etc files are
// still bound by name: no sandbox can write them.
//
// CheckLink is the policy for an agent that asks to link a host path: it
// may only link what its own sandbox already grants, resolved beneath the
// grant the same way.
package bwrap
