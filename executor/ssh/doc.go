// Package ssh is the executor that runs agents' processes on another
// host through the system OpenSSH client, so that ~/.ssh/config, agents,
// ProxyJump and the user's keys work as they do for ssh itself
// ($SUBSTRAT_SSH_CONFIG names an ssh_config of Substrat's own).
//
// Connections. A pool of master connections per host (ControlMaster,
// each with its socket in a private directory of the executor); every
// process, every rsync and every command of the executor is a session
// through one of them, so a turn does not pay a handshake. sshd's
// MaxSessions (10 by default) bounds the sessions one connection
// carries: each session is counted against its master, and a new
// master is opened when those open are at the bound, up to MaxMasters
// (4 by default, $SUBSTRAT_SSH_MAX_MASTERS). The bound is
// Options.MaxSessions (10, $SUBSTRAT_SSH_MAX_SESSIONS), and is learned
// lower when the host refuses a session ("Session open refused by
// peer", which OpenSSH's client prints before it makes, for that
// session, a connection of its own: it still runs, at the cost of a
// handshake). So does a session beyond the pool's, every master full.
// A master that exits (a lost connection) is replaced by the next
// session that needs one; Close stops them all.
//
// Processes. The host runs each command in a small /bin/sh wrapper
// (see wrapper in start.go) whose command line carries only fixed words
// and validated ids: $0 is Marker, then the agent, the incarnation and
// a random process id. The request itself (argv, environment, working
// directory) and then the command's standard input travel framed on the
// channel's standard input, so nothing of it is parsed by a shell or
// shown in the host's process list. The command is the daemon's bwrap
// command line, with paths of the host (Place). The wrapper relays the
// input to the command through a FIFO, and the relay doubles as a
// watchdog: the end of the channel (Kill, the daemon's death, a lost
// connection, a kill -9 of the ssh client) ends its input without the
// end-of-input frame having closed the command's, or after, and then
// it kills the wrapper's process group, bwrap included; bwrap's
// --die-with-parent and PID namespace take the sandbox with it.
//
// Fencing. Fence kills, on the host, every wrapper of an agent whose
// incarnation is not the current one (a process left by a daemon that
// died), found by the marker in its command line.
//
// Places. The agent's place (its workspace root) is copied to the host
// before a turn (Push) and back after (Pull) with rsync over the same
// connection; the extras (a CLI's own HOME, its config: files of this
// machine that its processes see besides the place) beside it
// (PushExtra, PullExtra). What comes back was written by the agent and
// is hostile: Pull takes no symlink that points out of the place, no
// device, FIFO or socket, no set-id or ownership bits, and refuses a
// place with a file or a total larger than the executor's bounds. No
// .git travels either way, at any depth, and the receiving side's are
// left alone: git would read an agent's hooks and config as code.
// Salvage brings back, before a push, what a process cut off before its
// pull left there: newer files only, nothing deleted.
//
// Layout on the host. Everything kept for a key (an agent's id, a
// workspace's key) is in Root/HOME/KEY: its place (place/) and its
// extras (extra/), where HOME is the id of the Substrat home
// whose copies they are (Options.Home, fsstore.HomeID): several homes
// may share a host's root, and each tells its own copies by that
// directory. Copies lists a home's keys; what is there was written on
// the host, by agents too, so only names that are ids are listed, and
// Remove removes one entry (a symlink, not what it leads to). The
// daemon removes, at its start or at its first use of a host, its
// home's copies that its store no longer has (supervisor/daemon's
// remotes). Copies made by daemons older than the homes' directories
// are directly under the root (Root/KEY), and nothing removes them:
// once no daemon of such a version uses the host, remove them by hand
// there. A home's directory holds only KEY directories; an old copy
// holds place/, extra/ or a tool-*.sock. With the default root, this
// lists the old copies, to remove (rm -rf) when no agent's process
// runs there:
//
//	cd ~/.substrat-exec && for d in *; do
//		{ [ -e "$d/place" ] || [ -e "$d/extra" ] || ls "$d" | grep -q '^tool-.*\.sock$'; } && echo "$d"
//	done
//
// Sockets. Forward makes a Unix socket on the host that reaches one of
// this machine through a master (a remote stream-local forwarding,
// ssh -R): the agent's tool socket, which the daemon binds into the
// sandbox for the CLI's MCP server. The socket is a file of the host,
// so the processes of every master reach it, while the one master that
// holds its forwarding runs; when that one is lost, its forwardings are
// made again on another. Its path there must fit a Unix
// socket's (107 bytes), so it is short: Root/sockets/HASH.sock, HASH
// 24 hex digits of a hash of the home, the agent and the socket's name
// (38 bytes past the root: a root of up to 68 bytes will do). The
// sockets of every home share that directory; one left behind is inert,
// and replaced by the next Forward of its agent.
//
// Limits, known. A remote exit status of 255 reads as ssh's own
// failure (a lost connection). More sessions at once than the pool's
// masters carry (MaxMasters times sshd's MaxSessions) each make a
// connection of their own (see Connections). A lost master ends the
// processes that ran through it, not the others'. The daemon puts an agent's limits on its
// processes there as rlimits (memory as the data segment, processes as
// the user's), not in a cgroup of the host. The host's login shell must take POSIX quoting and exec, and
// Fence reads the host's /proc (bwrap makes it Linux anyway).
//
// Check tells what a host lacks: ssh reachable, a working bwrap, rsync
// 3.4 or newer there and here (MinRsync), the POSIX tools the wrapper
// uses, and Unix socket forwarding.
package ssh
