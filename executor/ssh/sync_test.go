package ssh

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/internal/sshtest"
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

// TestGitStays: no .git travels, at any depth, either way, and this
// side's is neither replaced nor deleted by a Pull.
func TestGitStays(t *testing.T) {
	_, e := start(t)
	ctx := context.Background()
	local := t.TempDir()
	write(t, local, map[string]string{"a": "one", ".git/config": "mine", "sub/.git": "gitdir: /mine"})
	if err := e.Push(ctx, "agentg", local); err != nil {
		t.Fatal(err)
	}
	dir, _ := e.Place(ctx, "agentg")
	same(t, "pushed", tree(t, dir), map[string]string{"a": "one", "sub": "dir"})
	write(t, dir, map[string]string{".git/hooks/post-checkout": "#!/bin/sh\nevil", ".git/config": "[core]\n\tfsmonitor = evil", "sub/.git": "gitdir: /etc", "deep/x/.git/HEAD": "ref"})
	if err := e.Pull(ctx, "agentg", local); err != nil {
		t.Fatal(err)
	}
	same(t, "pulled", tree(t, local), map[string]string{"a": "one", ".git": "dir", ".git/config": "mine", "sub": "dir", "sub/.git": "gitdir: /mine",
		"deep": "dir", "deep/x": "dir"})
}

// TestSalvage: Salvage brings back what is newer on the host, deletes
// nothing and keeps what is newer here; without a place it does nothing.
func TestSalvage(t *testing.T) {
	_, e := start(t)
	ctx := context.Background()
	local := t.TempDir()
	if err := e.Salvage(ctx, "agents", local); err != nil {
		t.Fatalf("Salvage without a place: %v", err)
	}
	write(t, local, map[string]string{"a": "one", "b": "two", "mine": "here"})
	if err := e.Push(ctx, "agents", local); err != nil {
		t.Fatal(err)
	}
	dir, _ := e.Place(ctx, "agents")
	old := time.Now().Add(-time.Hour)
	write(t, dir, map[string]string{"a": "changed there", "new": "made there"})
	os.Remove(filepath.Join(dir, "b"))
	write(t, local, map[string]string{"mine": "changed here"})
	write(t, dir, map[string]string{"mine": "older there"})
	os.Chtimes(filepath.Join(dir, "mine"), old, old)
	if err := e.Salvage(ctx, "agents", local); err != nil {
		t.Fatal(err)
	}
	same(t, "salvaged", tree(t, local), map[string]string{"a": "changed there", "b": "two", "new": "made there", "mine": "changed here"})
}

// TestExtra: a directory and a file beside the place go there and the
// directory comes back; a symlink is refused, and so is a path that
// leaves the agent's directory.
func TestExtra(t *testing.T) {
	_, e := start(t)
	ctx := context.Background()
	home := t.TempDir()
	write(t, home, map[string]string{"providers/cli/homes/x/state": "s1", "agents/x/mcp.json": "{}"})
	if err := e.PushExtra(ctx, "agentx", "providers/cli/homes/x", filepath.Join(home, "providers/cli/homes/x")); err != nil {
		t.Fatal(err)
	}
	if err := e.PushExtra(ctx, "agentx", "agents/x/mcp.json", filepath.Join(home, "agents/x/mcp.json")); err != nil {
		t.Fatal(err)
	}
	dir, _ := e.Extra(ctx, "agentx", "providers/cli/homes/x")
	file, _ := e.Extra(ctx, "agentx", "agents/x/mcp.json")
	if b, err := os.ReadFile(file); err != nil || string(b) != "{}" {
		t.Fatalf("the file there: %q, %v", b, err)
	}
	write(t, dir, map[string]string{"state": "s2", "transcript": "t"})
	if err := os.Symlink("/etc", filepath.Join(dir, "etc")); err != nil {
		t.Fatal(err)
	}
	if err := e.PullExtra(ctx, "agentx", "providers/cli/homes/x", filepath.Join(home, "providers/cli/homes/x"), false); err != nil {
		t.Fatal(err)
	}
	same(t, "pulled", tree(t, filepath.Join(home, "providers/cli/homes/x")), map[string]string{"state": "s2", "transcript": "t"})
	if err := os.Symlink(home, filepath.Join(home, "link")); err != nil {
		t.Fatal(err)
	}
	if err := e.PushExtra(ctx, "agentx", "link", filepath.Join(home, "link")); err == nil {
		t.Error("a symlink was pushed")
	}
	for _, rel := range []string{"../x", "/etc", "a/../../b", ""} {
		if _, err := e.Extra(ctx, "agentx", rel); err == nil {
			t.Errorf("Extra(%q) was taken", rel)
		}
	}
}

// TestPullGlobRoot: a root whose path holds wildcards ([, *, ?) is taken
// as it is, on the host too: the remote rsync expands the wildcards of a
// source path, so a pull from a[1] would read a1, a sibling that
// matches it.
func TestPullGlobRoot(t *testing.T) {
	if why := sshtest.Available(); why != "" {
		t.Skip(why)
	}
	s := sshtest.Start(t)
	base := t.TempDir()
	for _, name := range []string{"r[1]*?", "r1xy"} {
		if err := os.Mkdir(filepath.Join(base, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e, err := New(s.Host, Options{Config: s.Config, Root: filepath.Join(base, "r[1]*?")})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	local := t.TempDir()
	os.WriteFile(filepath.Join(local, "mine.txt"), []byte("mine"), 0o644)
	if err := e.Push(context.Background(), "a", local); err != nil {
		t.Fatal(err)
	}
	// The sibling holds a place of the same agent, with other files.
	decoy := filepath.Join(base, "r1xy", "a", "place")
	os.MkdirAll(decoy, 0o755)
	os.WriteFile(filepath.Join(decoy, "decoy.txt"), []byte("not mine"), 0o644)
	if err := e.Pull(context.Background(), "a", local); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(local, "decoy.txt")); err == nil {
		t.Fatal("the pull read the sibling that the root's wildcards match")
	}
	if b, err := os.ReadFile(filepath.Join(local, "mine.txt")); err != nil || string(b) != "mine" {
		t.Fatalf("mine.txt after the pull: %q, %v", b, err)
	}
}
