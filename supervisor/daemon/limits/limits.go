// Package limits enforces agents' resource limits (fsstore.Limits: memory,
// processes, CPU weight) on their provider processes and tool commands,
// with the best mechanism the machine has:
//
//   - cgroup2: a delegated subtree of the unified hierarchy (a systemd
//     user service with Delegate=yes, a container's own cgroup namespace)
//     whose cgroup.controllers offer memory and pids. Agents' groups are
//     <the daemon's cgroup>/substrat-<home hash>/<agent id>, with
//     memory.max, pids.max and cpu.weight; the daemon moves itself into
//     a leaf of its own (substrat-daemon) when its cgroup must have no
//     processes of its own to delegate controllers.
//   - cgroup1: the memory and pids hierarchies of cgroup v1, writable
//     (root, or a hierarchy delegated to the user), and the cpu one when
//     there is one. Groups are <mount>/substrat/<home hash>/<agent id> in
//     each, with memory.limit_in_bytes, pids.max and cpu.shares (weight
//     w is 1024*w/100 shares).
//   - rlimit: per-process rlimits, the last resort. RLIMIT_DATA (not
//     RLIMIT_AS: node and Go reserve gigabytes of address space they
//     never touch, so an address-space cap stops them from starting) caps
//     each process's memory, not the agent's together; RLIMIT_NPROC
//     counts every process of the user, and does not bind root. No CPU
//     weight; and whether a limit was reached cannot be told.
//
// A process joins its group before it runs anything: cgroup v1 has no
// CLONE_INTO_CGROUP, so the command is started through /bin/sh, which
// writes its own pid into each hierarchy's cgroup.procs and then execs
// the command (bwrap, or the program). The shell forks nothing before it
// is in the group, and everything the command starts is born in it. The
// alternative, moving a daemon thread into the group around the fork,
// would charge the daemon's own allocations to the agent and risk the
// daemon being what the OOM killer picks; the daemon is never in an
// agent's group. (Under rlimit the shell sets the limits with ulimit
// before the exec, which is what prlimit(1) would do.)
//
// Each agent's group is made at its first process, removed (what is left
// in it killed first) when the agent ends, and all of this home's groups
// are reaped when a daemon starts. Reached tells a turn killed by its
// limit from one that failed by itself: memory by the oom_kill count
// (memory.oom_control in v1, memory.events in v2), processes by the max
// count of pids.events.
package limits

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
)

// Mechanisms.
const (
	CgroupV2 = "cgroup2"
	CgroupV1 = "cgroup1"
	Rlimit   = "rlimit"
)

// Shell is the shell that puts a process in its group; a variable for
// tests.
var Shell = "/bin/sh"

// Manager enforces the limits of one Substrat home's agents.
type Manager struct {
	mech   string
	detail string
	log    *slog.Logger
	// bases are the directories holding the agents' groups: one per v1
	// hierarchy, keyed by controller ("memory", "pids", "cpu"), or one,
	// key "", for v2.
	bases map[string]string

	mu     sync.Mutex // guards the fields below
	agents map[string]*group
}

// group is an agent's cgroup, as far as the manager knows it.
type group struct {
	limits fsstore.Limits // as last applied
	oom    int64          // oom_kill count last seen
	pidMax int64          // pids.events max count last seen
}

// Status is how limits are enforced.
type Status struct {
	Mechanism string
	Detail    string
	Groups    int // agents' groups that exist now
}

// New chooses the mechanism for the home at home: cgroup v2 where a
// delegated subtree offers memory and pids, else cgroup v1's memory and
// pids hierarchies where they are writable, else rlimits.
func New(home string, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{log: log, agents: map[string]*group{}}
	mountinfo, _ := os.ReadFile("/proc/self/mountinfo")
	self, _ := os.ReadFile("/proc/self/cgroup")
	mounts := ParseMounts(mountinfo)
	paths := ParseCgroups(self)
	hash := HomeHash(home)
	var why []string
	if base, err := setupV2(mounts, paths, hash); err == nil {
		m.mech, m.bases = CgroupV2, map[string]string{"": base}
		m.detail = base
		return m
	} else {
		why = append(why, "cgroup v2: "+err.Error())
	}
	if bases, err := setupV1(mounts, hash); err == nil {
		m.mech, m.bases = CgroupV1, bases
		var ds []string
		for _, c := range []string{"memory", "pids", "cpu"} {
			if b, ok := bases[c]; ok {
				ds = append(ds, b)
			}
		}
		m.detail = strings.Join(ds, " ")
		return m
	} else {
		why = append(why, "cgroup v1: "+err.Error())
	}
	m.mech = Rlimit
	m.detail = "per-process RLIMIT_DATA and per-user RLIMIT_NPROC (no cgroup to use: " + strings.Join(why, "; ") + ")"
	return m
}

// HomeHash names a home's groups: 12 hex digits of its path's SHA-256.
func HomeHash(home string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(home)))
	return hex.EncodeToString(sum[:6])
}

// Status says which mechanism is in force.
func (m *Manager) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Status{Mechanism: m.mech, Detail: m.detail, Groups: len(m.agents)}
}

// dirs returns agent's group directories, one per hierarchy.
func (m *Manager) dirs(agent string) map[string]string {
	out := map[string]string{}
	for c, b := range m.bases {
		out[c] = filepath.Join(b, agent)
	}
	return out
}

// Wrap rewrites p (its Path and Args) so that the process runs under
// limits l of agent: in the agent's group, made and set now, or under
// rlimits. l's zero fields limit nothing.
func (m *Manager) Wrap(agent string, l fsstore.Limits, p *provider.Process) error {
	if p.Path == "" {
		return nil // starting it fails anyway, with its own error
	}
	if !fsstore.IsID(agent) {
		return fmt.Errorf("agent id %q is not an id", agent)
	}
	if m.mech == Rlimit {
		Rlimits(l, p)
		return nil
	}
	files, err := m.setup(agent, l)
	if err != nil {
		return err
	}
	var b strings.Builder
	for i := range files {
		fmt.Fprintf(&b, `echo $$ > "$%d" || exit 126; `, i+1)
	}
	fmt.Fprintf(&b, `shift %d; exec "$@"`, len(files))
	wrapShell(p, b.String(), files)
	return nil
}

// Rlimits puts p under limits l as rlimits of its own, set by a shell
// in front of it (Shell): memory as its data segment (ulimit -d),
// processes as its user's (ulimit -u, which root is exempt from). It
// needs nothing of this machine, so it is also how limits apply on
// another host (an ssh executor), whose shell is at the same path.
func Rlimits(l fsstore.Limits, p *provider.Process) {
	if l.IsZero() || p.Path == "" {
		return
	}
	var b strings.Builder
	if l.MemoryBytes > 0 {
		fmt.Fprintf(&b, "ulimit -d %d || exit 126; ", (l.MemoryBytes+1023)/1024)
	}
	if l.Pids > 0 {
		// bash names RLIMIT_NPROC -u, dash -p.
		fmt.Fprintf(&b, "{ ulimit -u %d 2>/dev/null || ulimit -p %d; } || exit 126; ", l.Pids, l.Pids)
	}
	wrapShell(p, b.String()+`exec "$@"`, nil)
}

// wrapShell puts Shell with script, then the files (its $1, $2...), in front
// of p.
func wrapShell(p *provider.Process, script string, files []string) {
	args := append([]string{"substrat-limits", "-c", script, "substrat-limits"}, files...)
	p.Args = append(append(args, p.Path), p.Args[1:]...)
	p.Path = Shell
}

// setup makes agent's group if need be, writes its limits and returns
// the cgroup.procs files to join.
func (m *Manager) setup(agent string, l fsstore.Limits) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.agents[agent]
	dirs := m.dirs(agent)
	if g == nil {
		for _, d := range dirs {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, fmt.Errorf("making the agent's cgroup: %w", err)
			}
		}
		g = &group{}
		g.oom, g.pidMax = m.countersLocked(dirs)
		m.agents[agent] = g
	}
	type setting struct{ dir, file, value string }
	var set []setting
	if m.mech == CgroupV2 {
		d := dirs[""]
		set = append(set, setting{d, "memory.max", orMax(l.MemoryBytes)}, setting{d, "pids.max", orMax(l.Pids)})
		if l.MemoryBytes > 0 {
			set = append(set, setting{d, "memory.swap.max", "0"})
		}
		if w := l.CPUWeight; w > 0 {
			set = append(set, setting{d, "cpu.weight", strconv.FormatInt(w, 10)})
		} else {
			set = append(set, setting{d, "cpu.weight", "100"})
		}
	} else {
		mem := "-1"
		if l.MemoryBytes > 0 {
			mem = strconv.FormatInt(l.MemoryBytes, 10)
		}
		set = append(set, setting{dirs["memory"], "memory.limit_in_bytes", mem}, setting{dirs["pids"], "pids.max", orMax(l.Pids)})
		if d, ok := dirs["cpu"]; ok {
			shares := int64(1024)
			if l.CPUWeight > 0 {
				shares = max(2, l.CPUWeight*1024/100)
			}
			set = append(set, setting{d, "cpu.shares", strconv.FormatInt(shares, 10)})
		}
	}
	for _, s := range set {
		err := os.WriteFile(filepath.Join(s.dir, s.file), []byte(s.value), 0)
		if err != nil && !(s.file == "memory.swap.max" && errors.Is(err, os.ErrNotExist)) {
			return nil, fmt.Errorf("setting %s of the agent's cgroup: %w", s.file, err)
		}
	}
	g.limits = l
	var files []string
	for _, c := range []string{"", "memory", "pids", "cpu"} {
		if d, ok := dirs[c]; ok {
			files = append(files, filepath.Join(d, "cgroup.procs"))
		}
	}
	return files, nil
}

func orMax(n int64) string {
	if n <= 0 {
		return "max"
	}
	return strconv.FormatInt(n, 10)
}

// countersLocked reads the oom_kill count and the pids.events max count
// of a group.
func (m *Manager) countersLocked(dirs map[string]string) (oom, pidMax int64) {
	if m.mech == CgroupV2 {
		oom = field(filepath.Join(dirs[""], "memory.events"), "oom_kill")
		pidMax = field(filepath.Join(dirs[""], "pids.events"), "max")
		return oom, pidMax
	}
	oom = field(filepath.Join(dirs["memory"], "memory.oom_control"), "oom_kill")
	if oom < 0 {
		// A kernel before 4.13 counts no OOM kills: any hit of the limit.
		oom = single(filepath.Join(dirs["memory"], "memory.failcnt"))
	}
	pidMax = field(filepath.Join(dirs["pids"], "pids.events"), "max")
	return oom, pidMax
}

// field reads "key value" from a flat-keyed cgroup file; -1 if absent.
func field(path, key string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}

// single reads a file holding one number; -1 if it cannot.
func single(path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// Reached says which of agent's limits its processes reached since the
// last call ("memory limit 512M reached", "process limit 64 reached"),
// or "": none, no group, or rlimits (which cannot tell).
func (m *Manager) Reached(agent string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.agents[agent]
	if g == nil {
		return ""
	}
	oom, pidMax := m.countersLocked(m.dirs(agent))
	var why []string
	if oom > g.oom && g.limits.MemoryBytes > 0 {
		why = append(why, fmt.Sprintf("memory limit %s reached", fsstore.FormatBytes(g.limits.MemoryBytes)))
	}
	if pidMax > g.pidMax && g.limits.Pids > 0 {
		why = append(why, fmt.Sprintf("process limit %d reached", g.limits.Pids))
	}
	g.oom, g.pidMax = oom, pidMax
	return strings.Join(why, "; ")
}

// Remove kills what is left in agent's group and removes it.
func (m *Manager) Remove(agent string) error {
	if m.mech == Rlimit {
		return nil
	}
	m.mu.Lock()
	delete(m.agents, agent)
	m.mu.Unlock()
	_, err := removeGroup(m.dirs(agent))
	return err
}

// RemoveAll removes every group of this home (the daemon's stop), and
// says what it killed.
func (m *Manager) RemoveAll() []string {
	if m.mech == Rlimit {
		return nil
	}
	m.mu.Lock()
	m.agents = map[string]*group{}
	m.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, b := range m.bases {
		entries, _ := os.ReadDir(b)
		for _, e := range entries {
			if !e.IsDir() || seen[e.Name()] || !fsstore.IsID(e.Name()) {
				continue
			}
			seen[e.Name()] = true
			n, err := removeGroup(m.dirs(e.Name()))
			if err != nil {
				m.log.Warn("agent cgroup not removed", "agent", e.Name(), "err", err)
			}
			if n > 0 {
				out = append(out, fmt.Sprintf("cgroup of agent %s (%d processes)", e.Name(), n))
			}
		}
	}
	return out
}

// Close removes every group of this home and the directories that held
// them (the daemon's stop): no group can be made after it.
func (m *Manager) Close() []string {
	out := m.RemoveAll()
	for _, b := range m.bases {
		// Not the "substrat" above it in v1, which other homes' daemons
		// may be making groups in.
		syscall.Rmdir(b)
	}
	return out
}

// removeGroup kills the processes of a group's directories until none is
// left (they may be forking), then removes the directories. It returns
// how many processes it killed.
func removeGroup(dirs map[string]string) (int, error) {
	killed := 0
	var errs []error
	for _, d := range dirs {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			continue
		}
		// cgroup v2's cgroup.kill does it at once (Linux 5.14).
		os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0)
		deadline := time.Now().Add(5 * time.Second)
		for {
			pids := procs(d)
			if len(pids) == 0 {
				break
			}
			for _, pid := range pids {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					killed++
				}
			}
			if time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("%s: %d processes would not die", d, len(pids)))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		// A killed process leaves the group once reaped by its parent;
		// rmdir fails (EBUSY) until then.
		for {
			err := syscall.Rmdir(d)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("removing %s: %w", d, err))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return killed, errors.Join(errs...)
}

// procs lists the pids in a group directory.
func procs(dir string) []int {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if n, err := strconv.Atoi(f); err == nil && n > 0 && n != os.Getpid() {
			out = append(out, n)
		}
	}
	return out
}
