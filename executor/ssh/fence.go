package ssh

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// fenceScript prints the pid of each wrapper of agent $1 whose
// incarnation is not $2 ($0 Marker, $1 agent, $2 incarnation in its
// command line, which /proc shows NUL-separated), and kills its process
// group. A wrapper leads its group (sshd made it a session leader), so a
// process that only looks like one, and does not lead its group, is
// left alone; and it runs in sshd's PID namespace, the script's, so a
// sandboxed process (bwrap's namespace of its own) that leads a group
// and dresses up as a stale wrapper of another agent is left alone too:
// it would make that agent's copies look unsynced, and salvaged.
const fenceScript = `a=$1; i=$2; ns=$(readlink /proc/$$/ns/pid) || exit 1;` +
	` for f in $(grep -l -a -s -F ` + Marker + ` /proc/[0-9]*/cmdline); do` +
	` p=${f#/proc/}; p=${p%/cmdline};` +
	` stale=$(tr '\0' '\n' <"$f" 2>/dev/null | { read -r _; read -r _; read -r _; read -r m; read -r ag; read -r in;` +
	` [ "$m" = ` + Marker + ` ] && [ "$ag" = "$a" ] && [ "$in" != "$i" ] && echo y; });` +
	` [ "$stale" = y ] || continue;` +
	` s=$(cat "/proc/$p/stat" 2>/dev/null) || continue; s=${s##*) }; set -- $s;` +
	` [ "$3" = "$p" ] || continue;` +
	` [ "$(readlink "/proc/$p/ns/pid" 2>/dev/null)" = "$ns" ] || continue;` +
	` kill -9 "-$p" 2>/dev/null && echo "$p";` +
	` done; exit 0`

// Fence kills, on the host, every process of agent whose incarnation is
// not incarnation: what a daemon that died left running there. It
// returns the host's pids of the killed wrappers (each with its process
// group; their sandboxes die with them).
func (e *Executor) Fence(ctx context.Context, agent, incarnation string) ([]int, error) {
	if !idRE.MatchString(agent) || !idRE.MatchString(incarnation) {
		return nil, fmt.Errorf("%w: agent %q, incarnation %q", ErrID, agent, incarnation)
	}
	out, err := e.run(ctx, fenceScript, agent, incarnation)
	if err != nil {
		return nil, fmt.Errorf("fence %s on %s: %w", agent, e.host, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids, nil
}

// checkScript prints one line per thing the host lacks, and a line of
// the host's rsync version, beginning with $1 (rsyncLine).
const checkScript = `for c in bwrap rsync head mkfifo mktemp tr grep find du cut wc; do` +
	` command -v "$c" >/dev/null 2>&1 || echo "$c is not installed"; done;` +
	` if command -v bwrap >/dev/null 2>&1 && ! bwrap --die-with-parent --unshare-all --ro-bind / / true >/dev/null 2>&1; then` +
	` echo "bwrap cannot make a sandbox (unprivileged user namespaces may be off)"; fi;` +
	` [ "$(printf abc | { head -c 1 >/dev/null; cat; })" = bc ] || echo "head -c reads more than it is asked to (GNU coreutils is needed)";` +
	` if command -v rsync >/dev/null 2>&1; then printf '%s %s\n' "$1" "$(rsync --version 2>&1 | head -n 1)"; fi;` +
	` exit 0`

// rsyncLine begins checkScript's line of the host's `rsync --version`.
const rsyncLine = "rsync-version:"

// MinRsync is the oldest rsync that Check accepts, here and on the
// host: 3.4.0 fixed CVE-2024-12084 to 12088 and CVE-2024-12747, among
// them a sender that makes the receiver write outside its destination
// and a --safe-links bypass. A pull receives what the agent wrote from
// the host's rsync, so both ends matter.
var MinRsync = [3]int{3, 4, 0}

var rsyncVersionRE = regexp.MustCompile(`^rsync +version +v?(\d+)\.(\d+)\.(\d+)`)

// rsyncProblem tells what is wrong with the rsync whose `rsync
// --version` began with first, of where ("this machine", a host): ""
// if it is MinRsync or newer.
func rsyncProblem(where, first string) string {
	m := rsyncVersionRE.FindStringSubmatch(strings.TrimSpace(first))
	if m == nil {
		return fmt.Sprintf("the rsync of %s said %q to --version", where, cut(first, 100))
	}
	var v [3]int
	for i := range v {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	if slices.Compare(v[:], MinRsync[:]) < 0 {
		return fmt.Sprintf("the rsync of %s is %d.%d.%d, older than %d.%d.%d, which fixed CVE-2024-12084 to 12088 and CVE-2024-12747",
			where, v[0], v[1], v[2], MinRsync[0], MinRsync[1], MinRsync[2])
	}
	return ""
}

// cut shortens s to n bytes at most.
func cut(s string, n int) string {
	if len(s) > n {
		return strings.ToValidUTF8(s[:n], "") + "..."
	}
	return s
}

// Check tells what the host lacks to run agents: it is reachable over
// ssh, bwrap makes a sandbox there, rsync is there, the tools the
// wrapper uses behave, and its sshd forwards a Unix socket to this
// machine (the agent's tool socket, see Forward). It returns nil when
// the host is fit, or an error that lists each problem.
func (e *Executor) Check(ctx context.Context) error {
	out, err := e.run(ctx, checkScript, rsyncLine)
	if err != nil {
		return fmt.Errorf("%s is not reachable: %w", e.host, err)
	}
	var problems []string
	for l := range strings.Lines(string(out)) {
		l = strings.TrimSuffix(l, "\n")
		if v, ok := strings.CutPrefix(l, rsyncLine+" "); ok {
			l = rsyncProblem(e.host, v)
		}
		if l != "" {
			problems = append(problems, l)
		}
	}
	local, err := exec.CommandContext(ctx, "rsync", "--version").CombinedOutput()
	if err != nil {
		problems = append(problems, fmt.Sprintf("this machine has no working rsync: %v", err))
	} else if p := rsyncProblem("this machine", strings.SplitN(string(local), "\n", 2)[0]); p != "" {
		problems = append(problems, p)
	}
	msg := strings.Join(problems, "\n")
	if err := e.checkForward(ctx); err != nil {
		msg = strings.TrimSpace(msg + "\n" + err.Error())
	}
	if msg != "" {
		return fmt.Errorf("%s cannot run agents: %s", e.host, strings.ReplaceAll(msg, "\n", "; "))
	}
	return nil
}

// checkForward forwards a Unix socket of the host, in a temporary
// directory there, to one of this machine, and tells whether it listens.
func (e *Executor) checkForward(ctx context.Context) error {
	dir, err := os.MkdirTemp(e.ctlDir, "fw")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	local := filepath.Join(dir, "s")
	l, err := net.Listen("unix", local)
	if err != nil {
		return err
	}
	defer l.Close()
	out, err := e.run(ctx, `mktemp -d`)
	if err != nil {
		return err
	}
	rdir := strings.TrimSuffix(string(out), "\n")
	if !filepath.IsAbs(rdir) || strings.ContainsAny(rdir, ": \n") {
		return fmt.Errorf("mktemp -d said %q", out)
	}
	defer e.run(context.WithoutCancel(ctx), `rm -rf -- "$1"`, rdir)
	spec := rdir + "/s:" + local
	m, err := e.acquire(ctx)
	if err != nil {
		return err
	}
	defer e.release(m)
	if out, err := exec.CommandContext(ctx, "ssh", e.args(m.sock, "-O", "forward", "-R", spec, "--", e.host)...).CombinedOutput(); err != nil {
		return fmt.Errorf("its sshd does not forward a Unix socket (AllowStreamLocalForwarding), which agents' tools need: %s", bytes.TrimSpace(out))
	}
	defer exec.Command("ssh", e.args(m.sock, "-O", "cancel", "-R", spec, "--", e.host)...).Run()
	if _, err := e.run(ctx, `[ -S "$1" ]`, rdir+"/s"); err != nil {
		return fmt.Errorf("its sshd does not forward a Unix socket (AllowStreamLocalForwarding), which agents' tools need")
	}
	return nil
}
