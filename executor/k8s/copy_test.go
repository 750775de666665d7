package k8s

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
)

// TestPushPull: a workspace goes into the pod and comes back through
// execs (on kwok, whose exec runs on this machine: the pod's workspace
// is a directory of the test, MountPath), under the hostile rules: no
// .git either way, no symlink out, no FIFO; a symlink inside stays.
func TestPushPull(t *testing.T) {
	inPod := t.TempDir()
	e := newExec(t, Options{Workspace: emptyDir, MountPath: inPod})
	ctx := ctxT(t)
	a := Agent{ID: fsstore.NewID(), Incarnation: "1"}
	running(t, e, a)

	local := t.TempDir()
	write := func(dir, name, text string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(local, "a.txt", "A", 0o644)
	write(local, "sub/run.sh", "#!/bin/sh\n", 0o755)
	write(local, ".git/config", "[core]\n", 0o644)
	write(local, "sub/.git/HEAD", "x", 0o644)
	write(local, "gone/.git/HEAD", "y", 0o644)
	write(local, "gone/deep/f", "z", 0o644)
	os.Symlink("a.txt", filepath.Join(local, "in-link"))
	os.Symlink("/etc/passwd", filepath.Join(local, "out-link"))
	write(inPod, "stale.txt", "from before", 0o644)

	t0 := time.Now()
	if err := e.Push(ctx, a.ID, a.Incarnation, local); err != nil {
		t.Fatal(err)
	}
	t.Logf("push: %v", time.Since(t0).Round(time.Millisecond))
	if b, err := os.ReadFile(filepath.Join(inPod, "a.txt")); err != nil || string(b) != "A" {
		t.Fatalf("a.txt in the pod: %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(inPod, "sub/run.sh")); err != nil || fi.Mode()&0o100 == 0 {
		t.Fatalf("sub/run.sh in the pod: %v, %v", fi, err)
	}
	for _, gone := range []string{"stale.txt", ".git", "sub/.git", "out-link"} {
		if _, err := os.Lstat(filepath.Join(inPod, gone)); !os.IsNotExist(err) {
			t.Errorf("%s in the pod: %v", gone, err)
		}
	}
	if l, err := os.Readlink(filepath.Join(inPod, "in-link")); err != nil || l != "a.txt" {
		t.Errorf("in-link in the pod: %q, %v", l, err)
	}

	// The agent's work, and its attack.
	write(inPod, "new/b.txt", "B", 0o644)
	write(inPod, "a.txt", "A2", 0o644)
	os.Remove(filepath.Join(inPod, "sub/run.sh"))
	os.RemoveAll(filepath.Join(inPod, "gone"))
	os.Symlink("/etc", filepath.Join(inPod, "etc"))
	os.Symlink("../../../../../../etc/passwd", filepath.Join(inPod, "new/passwd"))
	write(inPod, ".git/hooks/post-checkout", "#!/bin/sh\ntouch /tmp/pwned\n", 0o755)
	write(inPod, "deep/.git/config", "[core]\n\tfsmonitor = evil\n", 0o644)
	write(inPod, "setuid", "x", 0o644)
	os.Chmod(filepath.Join(inPod, "setuid"), 0o4755)
	if err := mkfifo(filepath.Join(inPod, "fifo")); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	if err := e.Pull(ctx, a.ID, a.Incarnation, local, ""); err != nil {
		t.Fatal(err)
	}
	t.Logf("pull: %v", time.Since(t0).Round(time.Millisecond))
	for name, want := range map[string]string{"a.txt": "A2", "new/b.txt": "B", ".git/config": "[core]\n", "sub/.git/HEAD": "x", "gone/.git/HEAD": "y"} {
		if b, err := os.ReadFile(filepath.Join(local, name)); err != nil || string(b) != want {
			t.Errorf("%s here: %q, %v; want %q", name, b, err, want)
		}
	}
	for _, gone := range []string{"sub/run.sh", "etc", "new/passwd", ".git/hooks", "deep/.git", "fifo", "out-link", "gone/deep"} {
		if _, err := os.Lstat(filepath.Join(local, gone)); !os.IsNotExist(err) {
			t.Errorf("%s came back: %v", gone, err)
		}
	}
	if fi, err := os.Lstat(filepath.Join(local, "setuid")); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("setuid here: %v, %v", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(local, "in-link")); err != nil || l != "a.txt" {
		t.Errorf("in-link here: %q, %v", l, err)
	}

	// Over a bound: refused, and local left as it was.
	big := filepath.Join(inPod, "big")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	lower(t, &maxFileSize, 1<<20)
	if err := f.Truncate(1<<20 + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	os.Remove(filepath.Join(inPod, "a.txt"))
	if err := e.Pull(ctx, a.ID, a.Incarnation, local, ""); !errors.Is(err, ErrRefused) {
		t.Fatalf("Pull of a workspace with a file over the bound: %v", err)
	}
	if _, err := os.Stat(filepath.Join(local, "a.txt")); err != nil {
		t.Errorf("a refused pull changed local: %v", err)
	}

	// A stale incarnation can neither push nor pull.
	if err := e.Pull(ctx, a.ID, "0", local, ""); !errors.Is(err, ErrNoPod) {
		t.Errorf("Pull of a stale incarnation: %v", err)
	}
}

// TestEnsureNewLimits: a pod whose resources are not the agent's limits
// (they changed since it was made) is replaced by Ensure; one that has
// them is kept.
func TestEnsureNewLimits(t *testing.T) {
	e := newExec(t, Options{Workspace: emptyDir})
	a := Agent{ID: fsstore.NewID(), Incarnation: "1", Limits: fsstore.Limits{MemoryBytes: 64 << 20}}
	first := running(t, e, a)
	if again := running(t, e, a); again.Name != first.Name {
		t.Fatalf("the same limits: pod %s replaced by %s", first.Name, again.Name)
	}
	a.Limits.MemoryBytes = 128 << 20
	second := running(t, e, a)
	if second.Name == first.Name {
		t.Fatal("new limits: the pod was kept")
	}
	gone(t, e, first.Name)
}

// TestReadTarHostile: what a hostile stream may hold that tar -c does
// not write: names out of the tree, entries through a symlink or a file
// of the stream, hard links out, devices; and the count bound.
func TestReadTarHostile(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body string) {
		h.Size = int64(len(body))
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	add(&tar.Header{Name: "../escape", Typeflag: tar.TypeReg}, "x")
	add(&tar.Header{Name: "/abs", Typeflag: tar.TypeReg}, "x") // cleaned into the tree
	add(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "d"}, "")
	add(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, "")
	add(&tar.Header{Name: "l/through", Typeflag: tar.TypeReg}, "x")
	add(&tar.Header{Name: "f", Typeflag: tar.TypeReg}, "F")
	add(&tar.Header{Name: "f/under", Typeflag: tar.TypeReg}, "x")
	add(&tar.Header{Name: "hard-out", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}, "")
	add(&tar.Header{Name: "hard-in", Typeflag: tar.TypeLink, Linkname: "f"}, "")
	add(&tar.Header{Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}, "")
	add(&tar.Header{Name: "x/.git/hooks/pre-commit", Typeflag: tar.TypeReg, Mode: 0o755}, "evil")
	tw.Close()
	stage := t.TempDir()
	names, err := readTar(&buf, stage, nil, &budget{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for n := range names {
		got = append(got, n)
	}
	want := map[string]kind{"escape": kindFile, "abs": kindFile, "l": kindLink, "d": kindDir, "f": kindFile, "hard-in": kindFile}
	if len(names) != len(want) {
		t.Errorf("kept %v, want %v", got, want)
	}
	for n, k := range want {
		if names[n] != k {
			t.Errorf("%s: kind %d, want %d (kept %v)", n, names[n], k, got)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(stage, "hard-in")); string(b) != "F" {
		t.Errorf("hard-in: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(stage), "escape")); err == nil {
		t.Error("../escape was written out of the tree")
	}
	if _, err := os.Lstat(filepath.Join(stage, "d", "through")); err == nil {
		t.Error("l/through was written through the symlink")
	}

	buf.Reset()
	tw = tar.NewWriter(&buf)
	lower(t, &maxFiles, 100)
	for i := 0; i <= 100; i++ {
		tw.WriteHeader(&tar.Header{Name: "d" + strings.Repeat("x", i%7) + "/", Typeflag: tar.TypeDir, Mode: 0o755})
	}
	tw.Close()
	if _, err := readTar(&buf, t.TempDir(), nil, &budget{}); !errors.Is(err, ErrRefused) {
		t.Errorf("more than MaxFiles entries: %v", err)
	}
}

func mkfifo(p string) error { return syscall.Mkfifo(p, 0o644) }

// lower sets a bound for the test.
func lower(t *testing.T, bound *int64, v int64) {
	old := *bound
	*bound = v
	t.Cleanup(func() { *bound = old })
}
