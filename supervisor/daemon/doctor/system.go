package doctor

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/daemon/limits"
)

// checkLimits says which mechanism enforces the agents' resource limits.
func checkLimits(ls *api.LimitsStatus) api.DoctorCheck {
	c := api.DoctorCheck{Check: "resource limits"}
	switch {
	case ls == nil:
		c.Status, c.Detail = api.DoctorOK, "chosen when the daemon starts (cgroup v2, cgroup v1 or rlimits); run doctor while it runs to see which"
	case ls.Mechanism == limits.Rlimit:
		c.Status, c.Detail = api.DoctorWarn, "rlimits: "+ls.Detail
		c.Hint = "for memory and process limits per agent, run the daemon with a delegated cgroup v2 subtree: the systemd user unit (Delegate=yes), or systemd-run --user -p Delegate=yes substrat daemon run"
	default:
		c.Status, c.Detail = api.DoctorOK, ls.Mechanism+": "+ls.Detail
	}
	return c
}

// Filesystem magic numbers (statfs f_type) doctor names.
var fsNames = map[int64]string{
	0xEF53: "ext4", 0x58465342: "xfs", 0x9123683E: "btrfs", 0x2FC12FC1: "zfs", 0x794c7630: "overlayfs",
	0x01021994: "tmpfs", 0x6969: "nfs", 0xFF534D42: "cifs", 0xFE534D42: "smb2", 0x517B: "smbfs", 0x65735546: "fuse",
}

// weakFS are the filesystems where the home's promises do not hold:
// memory only, or fsync, rename and locks that a network may break.
var weakFS = map[string]string{
	"tmpfs": "memory only: a reboot or power loss loses the whole home",
	"nfs":   "a network filesystem: fsync, rename and flock are only as good as the server",
	"cifs":  "a network filesystem: fsync, rename and flock are only as good as the server",
	"smb2":  "a network filesystem: fsync, rename and flock are only as good as the server",
	"smbfs": "a network filesystem: fsync, rename and flock are only as good as the server",
	"fuse":  "a FUSE filesystem: fsync and rename are only as good as its driver",
}

// checkHome writes a file in the home (or, before the first start, in
// its nearest existing parent) as the store does: a temporary file,
// fsync, rename, fsync of the directory; then reads it back.
func checkHome(home string) api.DoctorCheck {
	c := api.DoctorCheck{Check: "home"}
	dir, note := home, ""
	for {
		if _, err := os.Stat(dir); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir, note = parent, " (does not exist yet; tried its parent "+parent+")"
	}
	probeDir, err := os.MkdirTemp(dir, ".doctor-")
	if err != nil {
		c.Status, c.Detail, c.Hint = api.DoctorFail, home+" is not writable"+note+": "+err.Error(), "give a --home you can write to"
		return c
	}
	defer os.RemoveAll(probeDir)
	name, want := filepath.Join(probeDir, "probe"), []byte("substrat doctor\n")
	if err := fsstore.ReplaceFile(fsstore.OS{}, name, want); err != nil {
		c.Status, c.Detail = api.DoctorFail, "write, fsync and rename failed in "+dir+": "+err.Error()
		return c
	}
	if got, err := os.ReadFile(name); err != nil || !bytes.Equal(got, want) {
		c.Status, c.Detail = api.DoctorFail, fmt.Sprintf("a file written in %s reads back wrong (%q, %v)", dir, got, err)
		return c
	}
	var st unix.Statfs_t
	fs := "unknown filesystem"
	if unix.Statfs(dir, &st) == nil {
		if n, ok := fsNames[int64(st.Type)]; ok {
			fs = n
		} else {
			fs = fmt.Sprintf("filesystem 0x%x", st.Type)
		}
	}
	if why, weak := weakFS[fs]; weak {
		c.Status, c.Detail, c.Hint = api.DoctorWarn, home+note+" is on "+fs+": "+why, "put the home on a local disk (--home, SUBSTRAT_HOME)"
		return c
	}
	c.Status, c.Detail = api.DoctorOK, home+note+": write, fsync, rename and directory fsync work ("+fs+")"
	return c
}

// unitPath is the systemd user unit's path: given, or
// $XDG_CONFIG_HOME/systemd/user/substrat.service.
func unitPath(given string) string {
	if given != "" {
		return given
	}
	cfg := os.Getenv("XDG_CONFIG_HOME")
	if cfg == "" {
		cfg = filepath.Join(userHome(), ".config")
	}
	return filepath.Join(cfg, "systemd", "user", "substrat.service")
}

func userHome() string {
	if h := os.Getenv("HOME"); h != "" {
		return h
	}
	h, _ := os.UserHomeDir()
	return h
}

// checkUnit checks that an installed systemd user unit hands the daemon
// a PATH and the keys of the providers in use: a service starts with
// systemd's small environment, not the shell's.
func checkUnit(path string, used map[string]int) []api.DoctorCheck {
	c := api.DoctorCheck{Check: "systemd unit"}
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		c.Status, c.Detail = api.DoctorOK, "no systemd user unit at "+path+" (the daemon is started by hand)"
		return []api.DoctorCheck{c}
	}
	if err != nil {
		c.Status, c.Detail = api.DoctorWarn, "cannot read "+path+": "+err.Error()
		return []api.DoctorCheck{c}
	}
	envFiles, inline := unitEnv(data)
	vars := map[string]bool{}
	for _, v := range inline {
		vars[v] = true
	}
	var out []api.DoctorCheck
	if len(envFiles) == 0 {
		c.Status, c.Detail = api.DoctorFail, path+" has no EnvironmentFile=: the service gets systemd's PATH and none of your keys"
		c.Hint = "add EnvironmentFile=-%h/.config/substrat/env to [Service] and put PATH=... and your keys in that file (see contrib/substrat.service)"
		out = append(out, c)
	}
	for _, f := range envFiles {
		optional := strings.HasPrefix(f, "-")
		name := strings.ReplaceAll(strings.TrimPrefix(f, "-"), "%h", userHome())
		fc := api.DoctorCheck{Check: "systemd unit"}
		data, err := os.ReadFile(name)
		switch {
		case err != nil && optional:
			fc.Status, fc.Detail = api.DoctorWarn, "EnvironmentFile "+name+" is missing: the service gets no PATH or keys from it"
			fc.Hint = "write PATH=... and your keys (VAR=value, one a line) into " + name
		case err != nil:
			fc.Status, fc.Detail = api.DoctorFail, "EnvironmentFile "+name+" cannot be read, so systemd will not start the service: "+err.Error()
			fc.Hint = "create " + name + ", or make it optional with a leading '-'"
		default:
			for _, v := range envFileVars(data) {
				vars[v] = true
			}
			fc.Status, fc.Detail = api.DoctorOK, path+" reads EnvironmentFile "+name
		}
		out = append(out, fc)
	}
	if len(envFiles) > 0 {
		var missing []string
		if !vars["PATH"] {
			missing = append(missing, "PATH")
		}
		for _, p := range Providers {
			if used[p.Name] > 0 && !slices.ContainsFunc(p.Keys, func(k string) bool { return vars[k] }) {
				missing = append(missing, p.Keys[0]+" (for "+p.Name+")")
			}
		}
		mc := api.DoctorCheck{Check: "systemd unit env", Status: api.DoctorOK, Detail: "the unit sets PATH and the keys of the providers in use"}
		if len(missing) > 0 {
			mc.Status, mc.Detail = api.DoctorWarn, "the unit's environment does not set "+strings.Join(missing, ", ")
			mc.Hint = "add them to its EnvironmentFile (the CLIs of the providers must be on that PATH)"
		}
		out = append(out, mc)
	}
	return out
}

// unitEnv returns a unit's EnvironmentFile= values and the names its
// Environment= lines set.
func unitEnv(unit []byte) (files, names []string) {
	sc := bufio.NewScanner(bytes.NewReader(unit))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, "EnvironmentFile="); ok && strings.TrimSpace(v) != "" {
			files = append(files, strings.TrimSpace(v))
		}
		if v, ok := strings.CutPrefix(line, "Environment="); ok {
			for _, w := range strings.Fields(v) {
				if n, _, ok := strings.Cut(strings.Trim(w, `"'`), "="); ok {
					names = append(names, n)
				}
			}
		}
	}
	return files, names
}

// envFileVars returns the names an EnvironmentFile sets.
func envFileVars(data []byte) []string {
	var names []string
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "export "))
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if n, _, ok := strings.Cut(line, "="); ok {
			names = append(names, strings.TrimSpace(n))
		}
	}
	return names
}
