package ssh

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// write makes files (name -> content) under dir.
func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// tree lists dir: each entry with its kind, and a file's content.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			got[rel] = "-> " + target
		case fi.IsDir():
			got[rel] = "dir"
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			got[rel] = string(b)
		default:
			got[rel] = "special " + fi.Mode().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func same(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
	}
}

// TestPlaceRoundTrip: a place goes to the host and comes back, with the
// host's changes and deletions, and a symlink inside the place kept.
func TestPlaceRoundTrip(t *testing.T) {
	_, e := start(t)
	ctx := context.Background()
	local := t.TempDir()
	write(t, local, map[string]string{"a": "one", "sub/b": "two", "gone": "x"})
	if err := os.Symlink("sub/b", filepath.Join(local, "link")); err != nil {
		t.Fatal(err)
	}
	if err := e.Push(ctx, "agent1", local); err != nil {
		t.Fatal(err)
	}
	remoteDir, err := e.Place(ctx, "agent1")
	if err != nil {
		t.Fatal(err)
	}
	same(t, "pushed", tree(t, remoteDir), tree(t, local))
	// The turn, on the host: a file changed, one deleted, one made.
	write(t, remoteDir, map[string]string{"a": "one, changed", "sub/c": "three"})
	if err := os.Remove(filepath.Join(remoteDir, "gone")); err != nil {
		t.Fatal(err)
	}
	if err := e.Pull(ctx, "agent1", local); err != nil {
		t.Fatal(err)
	}
	same(t, "pulled", tree(t, local), map[string]string{
		"a": "one, changed", "sub": "dir", "sub/b": "two", "sub/c": "three", "link": "-> sub/b"})
	// A deletion on the local side travels too.
	os.Remove(filepath.Join(local, "a"))
	if err := e.Push(ctx, "agent1", local); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(remoteDir, "a")); !os.IsNotExist(err) {
		t.Fatalf("a deleted locally is still on the host: %v", err)
	}
}

// TestPullHostile: what an agent leaves in its place on the host does
// not reach past the place on this machine: links out of it, FIFOs,
// devices and set-id bits stay behind, a symlink planted on this side
// is not followed, and an oversized place is refused.
func TestPullHostile(t *testing.T) {
	s, e := start(t)
	ctx := context.Background()
	e.opts.MaxFileSize = 1 << 20
	local, outside := t.TempDir(), t.TempDir()
	// A symlink out of the place on this side, where the host's place
	// has a directory of that name.
	if err := os.Symlink(outside, filepath.Join(local, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := e.Push(ctx, "agent1", t.TempDir()); err != nil { // an empty place
		t.Fatal(err)
	}
	dir, _ := e.Place(ctx, "agent1")
	write(t, dir, map[string]string{"ok": "fine", "sub/x": "into the link?"})
	for name, target := range map[string]string{"passwd": "/etc/passwd", "up": "../../../etc", "in": "ok"} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	devices := os.Geteuid() == 0
	if devices {
		if err := syscall.Mknod(filepath.Join(dir, "null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "suid"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "suid"), 0o4755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(dir, "suid"), os.ModeSetuid|os.ModeSetgid|0o755)
	if err := e.Pull(ctx, "agent1", local); err != nil {
		t.Fatal(err)
	}
	got := tree(t, local)
	same(t, "pulled", got, map[string]string{"ok": "fine", "in": "-> ok", "sub": "dir", "sub/x": "into the link?", "suid": "#!/bin/sh\n"})
	if fi, err := os.Stat(filepath.Join(local, "suid")); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Mode()&0o100 == 0 {
		t.Fatalf("suid came back as %v, %v: want executable without set-id bits", fi.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); !os.IsNotExist(err) {
		t.Fatalf("Pull wrote through a symlink out of the place: %v", err)
	}
	if !devices {
		t.Log("not root: no device was planted")
	}

	// A file over the bound: the place is refused, and nothing of it
	// comes back.
	big := make([]byte, e.opts.MaxFileSize+1)
	if err := os.WriteFile(filepath.Join(dir, "big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	write(t, dir, map[string]string{"new": "after"})
	if err := e.Pull(ctx, "agent1", local); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "big") {
		t.Fatalf("Pull of an oversized file: %v, want ErrRefused naming it", err)
	}
	if _, err := os.Lstat(filepath.Join(local, "new")); !os.IsNotExist(err) {
		t.Fatal("a refused place came back in part")
	}
	// Many files under the file bound, over the total one.
	os.Remove(filepath.Join(dir, "big"))
	e.opts.MaxTotalSize = 3 << 20
	for _, n := range []string{"p1", "p2", "p3", "p4"} {
		if err := os.WriteFile(filepath.Join(dir, n), big[:1<<20], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Pull(ctx, "agent1", local); !errors.Is(err, ErrRefused) {
		t.Fatalf("Pull of an oversized place: %v, want ErrRefused", err)
	}
	_ = s
}
