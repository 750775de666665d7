package limits

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
)

const mountinfo = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 /sub /mnt/part rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified\040dir rw,relatime - cgroup2 cgroup2 rw
`

func TestParseMounts(t *testing.T) {
	got := ParseMounts([]byte(mountinfo))
	want := []Mount{
		{Dir: "/sys/fs/cgroup/cpu,cpuacct", Options: []string{"rw", "cpu", "cpuacct"}},
		{Dir: "/sys/fs/cgroup/memory", Options: []string{"rw", "memory"}},
		{Dir: "/sys/fs/cgroup/pids", Options: []string{"rw", "pids"}},
		{Dir: "/sys/fs/cgroup/unified dir", V2: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestParseCgroups(t *testing.T) {
	got := ParseCgroups([]byte("9:name=systemd:/\n4:memory:/process_api/x\n2:cpu,cpuacct:/a\n0::/user.slice/u.service\n"))
	want := map[string]string{"name=systemd": "/", "memory": "/process_api/x", "cpu": "/a", "cpuacct": "/a", "": "/user.slice/u.service"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestWrapArgv: the command is started through the shell, with the
// cgroup.procs files as arguments, never in the script.
func TestWrapArgv(t *testing.T) {
	base := t.TempDir()
	m := &Manager{mech: CgroupV1, bases: map[string]string{"memory": filepath.Join(base, "m"), "pids": filepath.Join(base, "p")}, agents: map[string]*group{}}
	for _, d := range m.bases {
		os.MkdirAll(d, 0o755)
	}
	id := fsstore.NewID()
	cmd := exec.Command("/bin/echo", "a b", "$x")
	if err := wrap(m, id, fsstore.Limits{MemoryBytes: 64 << 20, Pids: 32}, cmd); err != nil {
		t.Fatal(err)
	}
	mem, pids := filepath.Join(base, "m", id), filepath.Join(base, "p", id)
	want := []string{"substrat-limits", "-c", `echo $$ > "$1" || exit 126; echo $$ > "$2" || exit 126; shift 2; exec "$@"`,
		"substrat-limits", filepath.Join(mem, "cgroup.procs"), filepath.Join(pids, "cgroup.procs"), "/bin/echo", "a b", "$x"}
	if cmd.Path != Shell || !reflect.DeepEqual(cmd.Args, want) {
		t.Fatalf("got %s %q\nwant %q", cmd.Path, cmd.Args, want)
	}
	for file, v := range map[string]string{filepath.Join(mem, "memory.limit_in_bytes"): "67108864", filepath.Join(pids, "pids.max"): "32"} {
		if b, err := os.ReadFile(file); err != nil || string(b) != v {
			t.Errorf("%s: %q, %v; want %q", file, b, err, v)
		}
	}
	if err := wrap(m, "../../etc", fsstore.Limits{Pids: 32}, exec.Command("/bin/true")); err == nil {
		t.Fatal("a path as agent id was taken")
	}
}

// TestRlimit: the last resort sets the rlimits in the shell before the
// exec.
func TestRlimit(t *testing.T) {
	m := &Manager{mech: Rlimit, agents: map[string]*group{}}
	cmd := exec.Command("/bin/sh", "-c", "ulimit -d; ulimit -p 2>/dev/null || ulimit -u")
	if err := wrap(m, fsstore.NewID(), fsstore.Limits{MemoryBytes: 256 << 20, Pids: 4000}, cmd); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := strings.Fields(string(out)); len(got) < 2 || got[0] != "262144" || got[len(got)-1] != "4000" {
		t.Fatalf("limits in the process: %q", out)
	}
	if why := m.Reached("x"); why != "" {
		t.Fatalf("Reached under rlimits: %q", why)
	}
}

// TestCgroup runs a process in a real agent group (cgroup v1 or v2, as
// the machine has), tells a limit reached, and removes the group with
// what is left in it.
func TestCgroup(t *testing.T) {
	m := New(t.TempDir(), nil)
	if m.mech == Rlimit {
		t.Skipf("no cgroup here: %s", m.detail)
	}
	t.Cleanup(func() { m.Close() })
	id := fsstore.NewID()
	// A process that stays behind in the group (its own session, not
	// waited for), and one that runs out of processes.
	cmd := exec.Command("/bin/sh", "-c", "setsid sleep 60 </dev/null >/dev/null 2>&1 & for i in $(seq 40); do sleep 1 & done; wait")
	if err := wrap(m, id, fsstore.Limits{Pids: 16}, cmd); err != nil {
		t.Fatal(err)
	}
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "fork") {
		t.Logf("output: %s", out)
	}
	if why := m.Reached(id); why != "process limit 16 reached" {
		t.Fatalf("Reached: %q (output %s)", why, out)
	}
	if why := m.Reached(id); why != "" {
		t.Fatalf("Reached again: %q", why)
	}
	dirs := m.dirs(id)
	var left int
	for _, d := range dirs {
		left = max(left, len(procs(d)))
	}
	if left == 0 {
		t.Fatal("nothing stayed in the group")
	}
	if err := m.Remove(id); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Fatalf("%s still there: %v", d, err)
		}
	}
	if st := m.Status(); st.Groups != 0 {
		t.Fatalf("status: %+v", st)
	}
}

// TestV2Layout: in a delegated subtree of the unified hierarchy (here a
// plain directory standing in for it), the agents' groups go below the
// daemon's cgroup with the controllers enabled, and get memory.max,
// pids.max and cpu.weight.
func TestV2Layout(t *testing.T) {
	mnt := t.TempDir()
	own := filepath.Join(mnt, "user.slice", "substrat.service")
	os.MkdirAll(own, 0o755)
	os.WriteFile(filepath.Join(own, "cgroup.controllers"), []byte("cpu io memory pids\n"), 0o644)
	base, err := setupV2([]Mount{{Dir: mnt, V2: true}}, map[string]string{"": "/user.slice/substrat.service"}, "abc")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(own, "substrat-abc"); base != want {
		t.Fatalf("base %s, want %s", base, want)
	}
	for _, d := range []string{own, base} {
		if b, _ := os.ReadFile(filepath.Join(d, "cgroup.subtree_control")); string(b) != "+memory +pids +cpu" {
			t.Fatalf("%s: subtree_control %q", d, b)
		}
	}
	m := &Manager{mech: CgroupV2, bases: map[string]string{"": base}, agents: map[string]*group{}}
	id := fsstore.NewID()
	cmd := exec.Command("/bin/true")
	if err := wrap(m, id, fsstore.Limits{MemoryBytes: 1 << 30, CPUWeight: 50}, cmd); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(base, id, "cgroup.procs"); cmd.Args[4] != want {
		t.Fatalf("args %q", cmd.Args)
	}
	for file, v := range map[string]string{"memory.max": "1073741824", "pids.max": "max", "cpu.weight": "50", "memory.swap.max": "0"} {
		if b, _ := os.ReadFile(filepath.Join(base, id, file)); string(b) != v {
			t.Errorf("%s: %q, want %q", file, b, v)
		}
	}
	os.WriteFile(filepath.Join(base, id, "memory.events"), []byte("low 0\nhigh 0\nmax 9\noom 1\noom_kill 1\n"), 0o644)
	if why := m.Reached(id); why != "memory limit 1G reached" {
		t.Fatalf("Reached: %q", why)
	}
	// Without memory and pids offered, no v2.
	os.WriteFile(filepath.Join(own, "cgroup.controllers"), []byte("cpu io\n"), 0o644)
	if _, err := setupV2([]Mount{{Dir: mnt, V2: true}}, map[string]string{"": "/user.slice/substrat.service"}, "abc"); err == nil {
		t.Fatal("v2 chosen without memory and pids")
	}
}

// wrap puts cmd under limits l of agent with m.Wrap.
func wrap(m *Manager, agent string, l fsstore.Limits, cmd *exec.Cmd) error {
	p := provider.Process{Path: cmd.Path, Args: cmd.Args}
	if err := m.Wrap(agent, l, &p); err != nil {
		return err
	}
	cmd.Path, cmd.Args = p.Path, p.Args
	return nil
}
