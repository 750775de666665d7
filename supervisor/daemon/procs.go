package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/substrat/substrat/fsstore"
)

// procTable records the provider processes the daemon runs in
// providers.json, each by pid and kernel start time (so that a pid reused
// by an unrelated process is never killed). It is bookkeeping for the
// next start after a kill -9, replaced atomically through the store's FS.
type procTable struct {
	fs   fsstore.FS
	path string
	log  *slog.Logger

	mu    sync.Mutex // guards procs
	procs map[int]procEntry
}

type procEntry struct {
	Pid   int    `json:"pid"`
	Start uint64 `json:"start"` // field 22 of /proc/<pid>/stat
	Agent string `json:"agent"`
}

func newProcTable(fs fsstore.FS, path string, log *slog.Logger) *procTable {
	return &procTable{fs: fs, path: path, log: log, procs: map[int]procEntry{}}
}

// track records a started process; the returned func forgets it.
func (t *procTable) track(agent string) func(pid int) func() {
	return func(pid int) func() {
		start, err := procStart(pid)
		if err != nil {
			return func() {}
		}
		t.mu.Lock()
		t.procs[pid] = procEntry{Pid: pid, Start: start, Agent: agent}
		t.saveLocked()
		t.mu.Unlock()
		return func() {
			t.mu.Lock()
			delete(t.procs, pid)
			t.saveLocked()
			t.mu.Unlock()
		}
	}
}

func (t *procTable) saveLocked() {
	list := make([]procEntry, 0, len(t.procs))
	for _, p := range t.procs {
		list = append(list, p)
	}
	data, _ := json.Marshal(map[string]any{"version": 1, "processes": list})
	// Through the store's FS, replaced atomically (renameio under it).
	if err := fsstore.ReplaceFile(t.fs, t.path, append(data, '\n')); err != nil {
		t.log.Warn("providers.json not written", "err", err)
	}
}

// reap kills, by process group, the provider processes recorded by a
// daemon that died without stopping them, and returns what it killed.
func reap(path string, log *slog.Logger) []string {
	data, err := fsstore.ReadRegular(path, fsstore.MaxJSONSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		log.Warn("providers.json unreadable; nothing reaped", "err", err)
		return nil
	}
	var f struct {
		Processes []procEntry `json:"processes"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		log.Warn("providers.json unreadable; nothing reaped", "err", err)
		return nil
	}
	var out []string
	for _, p := range f.Processes {
		start, err := procStart(p.Pid)
		if err == nil && start != p.Start {
			continue // the pid now belongs to someone else, so the group is gone
		}
		// The leader may be gone while its group lives on: under a
		// subreaper (systemd) a dead leader is reaped at once. Its group
		// is killed anyway: Linux does not give a pid to a new process
		// while a process group with that id exists, so if the number
		// names no process, it names our group or nothing.
		gerr := syscall.Kill(-p.Pid, syscall.SIGKILL)
		if err == nil {
			syscall.Kill(p.Pid, syscall.SIGKILL)
		}
		if err != nil && gerr != nil {
			continue // neither the leader nor its group is left
		}
		log.Warn("reaped a provider process group left by the previous daemon", "pgid", p.Pid, "agent", p.Agent, "leader_alive", err == nil)
		out = append(out, fmt.Sprintf("group %d (agent %s)", p.Pid, p.Agent))
	}
	os.Remove(path)
	return out
}

// procStart reads a process's start time (in clock ticks since boot).
func procStart(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after it follow
	// the last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("bad /proc/%d/stat", pid)
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return 0, fmt.Errorf("bad /proc/%d/stat", pid)
	}
	return strconv.ParseUint(fields[19], 10, 64) // field 22 overall
}
