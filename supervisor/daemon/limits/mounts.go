package limits

// Finding the cgroup file systems and this process's groups, and
// setting up the home's groups in them.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/substrat/substrat/fsstore"
)

// Mount is a cgroup file system mounted on the machine.
type Mount struct {
	Dir     string
	V2      bool
	Options []string // the v1 controllers ("memory", "pids", "cpu"...)
}

// ParseMounts returns the cgroup mounts of a /proc/self/mountinfo.
func ParseMounts(mountinfo []byte) []Mount {
	var out []Mount
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 || f[3] != "/" {
			continue // not the root of the hierarchy: a bind of a part
		}
		dir := unescape(f[4])
		switch g[0] {
		case "cgroup2":
			out = append(out, Mount{Dir: dir, V2: true})
		case "cgroup":
			out = append(out, Mount{Dir: dir, Options: strings.Split(g[2], ",")})
		}
	}
	return out
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ParseCgroups returns the cgroup path of each hierarchy in a
// /proc/self/cgroup, keyed by controller ("" for v2's).
func ParseCgroups(data []byte) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}

// setupV2 returns the directory for agents' groups in the daemon's own
// cgroup of the unified hierarchy, with memory and pids (and cpu, if
// offered) enabled for its children.
func setupV2(mounts []Mount, paths map[string]string, hash string) (string, error) {
	var mnt string
	for _, m := range mounts {
		if m.V2 {
			mnt = m.Dir
		}
	}
	own, ok := paths[""]
	if mnt == "" || !ok {
		return "", errors.New("no unified hierarchy")
	}
	dir := filepath.Join(mnt, own)
	ctrl, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return "", err
	}
	have := strings.Fields(string(ctrl))
	if !contains(have, "memory") || !contains(have, "pids") {
		return "", fmt.Errorf("%s offers %q, not memory and pids (no delegated subtree)", dir, strings.Join(have, " "))
	}
	want := "+memory +pids"
	if contains(have, "cpu") {
		want += " +cpu"
	}
	enable := func(d string) error {
		return os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte(want), 0)
	}
	if err := enable(dir); errors.Is(err, syscall.EBUSY) {
		// No internal processes: the daemon moves to a leaf of its own.
		leaf := filepath.Join(dir, "substrat-daemon")
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return "", fmt.Errorf("moving the daemon into %s: %w", leaf, err)
		}
		if err := enable(dir); err != nil {
			return "", fmt.Errorf("%s: other processes share the daemon's cgroup: %w", dir, err)
		}
	} else if err != nil {
		return "", err
	}
	base := filepath.Join(dir, "substrat-"+hash)
	if err := os.Mkdir(base, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	if err := enable(base); err != nil {
		return "", err
	}
	return base, nil
}

// setupV1 returns the directories for agents' groups in the memory, pids
// and (if mounted and writable) cpu hierarchies of cgroup v1.
func setupV1(mounts []Mount, hash string) (map[string]string, error) {
	bases := map[string]string{}
	for _, c := range []string{"memory", "pids", "cpu"} {
		for _, m := range mounts {
			if m.V2 || !contains(m.Options, c) {
				continue
			}
			base := filepath.Join(m.Dir, "substrat", hash)
			if err := os.MkdirAll(base, 0o755); err != nil {
				if c == "cpu" {
					break // optional
				}
				return nil, fmt.Errorf("%s: %w", c, err)
			}
			// Made with the first agent's group: a daemon that limits
			// nothing leaves nothing behind.
			if entries, _ := os.ReadDir(base); !hasGroups(entries) {
				syscall.Rmdir(base)
			}
			bases[c] = base
			break
		}
	}
	for _, c := range []string{"memory", "pids"} {
		if bases[c] == "" {
			return nil, fmt.Errorf("no %s hierarchy mounted", c)
		}
	}
	return bases, nil
}

// hasGroups reports whether a base directory holds agents' groups.
func hasGroups(entries []os.DirEntry) bool {
	for _, e := range entries {
		if e.IsDir() && fsstore.IsID(e.Name()) {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
