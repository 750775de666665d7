package launch

// These tests run the real bwrap to prove that the sandbox holds. They fail,
// never skip, when bwrap is missing: `make test` installs it.

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/bwrap"
)

// requireBwrap fails the test, with the install hint, when bwrap is missing.
func requireBwrap(t *testing.T) {
	t.Helper()
	if _, err := LookPath(); err != nil {
		t.Fatalf("the sandbox tests need the real bwrap: %v", err)
	}
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs cmd in the sandbox s and returns its output and exit code.
func run(t *testing.T, s bwrap.Spec, cmd ...string) result {
	t.Helper()
	requireBwrap(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Command(ctx, s, cmd)
	if err != nil {
		t.Fatal(err)
	}
	return wait(t, c)
}

func wait(t *testing.T, c *exec.Cmd) result {
	t.Helper()
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("running %q: %v", c.Args, err)
	}
	if strings.HasPrefix(r.stderr, "bwrap:") {
		t.Fatalf("bwrap itself failed: %s", r.stderr)
	}
	return r
}

// newRoot makes a workspace-like directory tree: dir/root is the root,
// dir/secret a file beside it that nothing grants.
func newRoot(t *testing.T) (dir, root string) {
	t.Helper()
	dir = t.TempDir()
	root = filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("TOP-SECRET-42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, root
}

func TestLookPathMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := LookPath()
	if !errors.Is(err, bwrap.ErrNotInstalled) {
		t.Fatalf("LookPath with no bwrap in PATH: %v, want ErrNotInstalled", err)
	}
	if !strings.Contains(err.Error(), "install bubblewrap: sudo apt-get install bubblewrap") {
		t.Fatalf("error %q lacks the install hint", err)
	}
	if _, err := Command(context.Background(), bwrap.Spec{Root: bwrap.Source{Host: "/r"}}, []string{"true"}); !errors.Is(err, bwrap.ErrNotInstalled) {
		t.Fatalf("Command with no bwrap: %v", err)
	}
}

func TestSandboxCannotReadUnlinkedFiles(t *testing.T) {
	dir, root := newRoot(t)
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(filepath.Join(root, "mine"), []byte("visible\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := bwrap.Spec{Root: bwrap.Source{Host: root}}

	// Positive controls: the root is readable, and the secret is once linked.
	if r := run(t, s, "/bin/cat", "/workspace/mine"); r.code != 0 || r.stdout != "visible\n" {
		t.Fatalf("reading the root: %+v", r)
	}
	linked := bwrap.Spec{Root: bwrap.Source{Host: root}, Mounts: []bwrap.Mount{{Source: bwrap.Source{Host: dir}, Target: "/linked", ReadOnly: true}}}
	if r := run(t, linked, "/bin/cat", "/linked/secret"); r.code != 0 || r.stdout != "TOP-SECRET-42\n" {
		t.Fatalf("reading a linked file: %+v", r)
	}

	for _, path := range []string{secret, "/workspace/../secret", "/proc/1/root" + secret} {
		r := run(t, s, "/bin/cat", path)
		if r.code == 0 || strings.Contains(r.stdout, "TOP-SECRET") {
			t.Errorf("cat %s inside the sandbox: %+v", path, r)
		}
	}
	// The host's private places are not there at all.
	r := run(t, s, "/bin/sh", "-c", `for p in /home /root /work /etc/shadow /etc/hostname `+dir+`; do [ -e "$p" ] && echo "$p"; done; ls -A /tmp; exit 0`)
	if r.stdout != "" {
		t.Errorf("host paths visible inside the sandbox:\n%s", r.stdout)
	}
}

func TestSandboxWrites(t *testing.T) {
	dir, root := newRoot(t)
	ro := filepath.Join(dir, "ro")
	rw := filepath.Join(dir, "rw")
	for _, d := range []string{ro, rw} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := bwrap.Spec{Root: bwrap.Source{Host: root}, Mounts: []bwrap.Mount{
		{Source: bwrap.Source{Host: ro}, Target: "/data/ro", ReadOnly: true},
		{Source: bwrap.Source{Host: rw}, Target: "/data/rw"},
	}}
	write := func(s bwrap.Spec, path string) result {
		return run(t, s, "/bin/sh", "-c", `echo written > "$1"`, "sh", path)
	}
	exists := func(path string) bool { _, err := os.Stat(path); return err == nil }

	if r := write(s, "/workspace/a"); r.code != 0 || !exists(filepath.Join(root, "a")) {
		t.Errorf("write to the rw root: %+v; on the host: %v", r, exists(filepath.Join(root, "a")))
	}
	if r := write(s, "/data/rw/b"); r.code != 0 || !exists(filepath.Join(rw, "b")) {
		t.Errorf("write to the rw mount: %+v", r)
	}
	if r := write(s, "/data/ro/c"); r.code == 0 || exists(filepath.Join(ro, "c")) {
		t.Errorf("write to the ro mount succeeded: %+v", r)
	}
	for _, p := range []string{"/x", "/etc/x", "/usr/x", "/data/x", "/proc/x"} {
		if r := write(s, p); r.code == 0 {
			t.Errorf("write to %s outside every rw bind succeeded", p)
		}
	}
	// /tmp is writable but private: nothing reaches the host's /tmp.
	name := "substrat-bwrap-test-" + filepath.Base(dir)
	if r := write(s, "/tmp/"+name); r.code != 0 {
		t.Errorf("write to the sandbox's /tmp: %+v", r)
	}
	if exists("/tmp/" + name) {
		t.Errorf("a write to the sandbox's /tmp reached the host")
	}

	ros := s
	ros.RootReadOnly = true
	if r := write(ros, "/workspace/d"); r.code == 0 || exists(filepath.Join(root, "d")) {
		t.Errorf("write to the read-only root succeeded: %+v", r)
	}
	if r := write(ros, "/data/rw/e"); r.code != 0 || !exists(filepath.Join(rw, "e")) {
		t.Errorf("write to a rw mount beside a ro root: %+v", r)
	}
}

// interfaces returns the interface names listed in a /proc/net/dev.
func interfaces(procNetDev string) []string {
	var names []string
	for _, line := range strings.Split(procNetDev, "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok && !strings.Contains(name, "|") {
			names = append(names, strings.TrimSpace(name))
		}
	}
	sort.Strings(names)
	return names
}

func TestSandboxNetwork(t *testing.T) {
	_, root := newRoot(t)
	r := run(t, bwrap.Spec{Root: bwrap.Source{Host: root}}, "/bin/cat", "/proc/net/dev")
	if got := interfaces(r.stdout); !reflect.DeepEqual(got, []string{"lo"}) {
		t.Fatalf("interfaces without network = %q, want only lo\n%s", got, r.stdout)
	}
	for _, f := range []string{"/etc/resolv.conf", "/etc/hosts"} {
		if r := run(t, bwrap.Spec{Root: bwrap.Source{Host: root}}, "/bin/cat", f); r.code == 0 {
			t.Errorf("%s present without network", f)
		}
	}

	host, err := os.ReadFile("/proc/net/dev")
	if err != nil {
		t.Fatal(err)
	}
	hostIfs := interfaces(string(host))
	r = run(t, bwrap.Spec{Root: bwrap.Source{Host: root}, Network: true}, "/bin/cat", "/proc/net/dev")
	inside := interfaces(r.stdout)
	if !reflect.DeepEqual(inside, hostIfs) {
		t.Fatalf("interfaces with network = %q, want the host's %q", inside, hostIfs)
	}
	if len(hostIfs) < 2 {
		t.Logf("the host has no interface but lo, so the network case shows only that the host's namespace is kept")
	}
}

func TestSandboxEnvironment(t *testing.T) {
	_, root := newRoot(t)
	t.Setenv("SUBSTRAT_LEAK_CHECK", "leaked")
	s := bwrap.Spec{Root: bwrap.Source{Host: root}, Env: map[string]string{"API_KEY": "k1", "EMPTY": "", "MULTI": "a b=c"}}
	r := run(t, s, "/usr/bin/env")
	if r.code != 0 {
		t.Fatalf("env: %+v", r)
	}
	got := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	sort.Strings(got)
	want := []string{
		"API_KEY=k1",
		"EMPTY=",
		"HOME=/workspace",
		"MULTI=a b=c",
		"PATH=" + bwrap.DefaultPath,
		"PWD=/workspace", // set by bwrap --chdir
		"TERM=dumb",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("environment inside:\n%q\nwant\n%q", got, want)
	}
}

func TestSandboxNoCapabilities(t *testing.T) {
	_, root := newRoot(t)
	r := run(t, bwrap.Spec{Root: bwrap.Source{Host: root}}, "/bin/grep", "^CapEff:", "/proc/self/status")
	if strings.TrimSpace(r.stdout) != "CapEff:\t0000000000000000" {
		t.Fatalf("effective capabilities inside: %q", r.stdout)
	}
}

func TestSandboxCancelKillsProcessGroup(t *testing.T) {
	requireBwrap(t)
	_, root := newRoot(t)
	const marker = "61.4172" // an unusual sleep length to find the process by
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := Command(ctx, bwrap.Spec{Root: bwrap.Source{Host: root}}, []string{"/bin/sh", "-c", "/bin/sleep " + marker + " & /bin/sleep " + marker + "; wait"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until both sleeps run, so that cancelling has something to kill.
	deadline := time.Now().Add(5 * time.Second)
	for len(sleepers(t, marker)) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the sandboxed sleeps never started (found %v)", sleepers(t, marker))
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	cancel()
	err = c.Wait()
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Wait took %v after cancel", took)
	}
	if err == nil {
		t.Fatal("Wait returned nil after the context was cancelled")
	}
	for time.Now().Before(start.Add(3 * time.Second)) {
		if len(sleepers(t, marker)) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("sandboxed processes survive cancellation: pids %v", sleepers(t, marker))
}

// sleepers returns the pids of live processes whose command line holds
// marker.
func sleepers(t *testing.T, marker string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) >= 2 && filepath.Base(args[0]) == "sleep" && args[1] == marker {
			if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && zombie(string(stat)) {
				continue
			}
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// zombie reports whether a /proc/<pid>/stat line is a zombie's.
func zombie(stat string) bool {
	i := strings.LastIndexByte(stat, ')')
	return i >= 0 && strings.HasPrefix(stat[i+1:], " Z")
}
