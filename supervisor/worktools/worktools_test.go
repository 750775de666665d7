package worktools

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/bwrap/bwraptest"
)

// dirPlace is an unsandboxed place: dir/ holding a.txt, sub/, a symlink
// that stays (in -> sub) and one that leads out (out -> ../outside).
func dirPlace(t *testing.T) (Place, string) {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "dir")
	for _, d := range []string{"dir/sub", "outside", "state"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(dir, "a.txt"), "one\ntwo\nthree\n")
	write(t, filepath.Join(base, "outside", "secret"), "secret\n")
	for name, target := range map[string]string{"in": "sub", "out": "../outside"} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return Place{Dir: dir, ShellState: bwrap.Source{Host: filepath.Join(base, "state")}, Env: []string{"PATH=/usr/bin:/bin"}}, base
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, err error, target error, text string) {
	t.Helper()
	if !errors.Is(err, target) || !strings.Contains(err.Error(), text) {
		t.Fatalf("error %v, want %v saying %q", err, target, text)
	}
}

func TestFilesInDir(t *testing.T) {
	pl, base := dirPlace(t)
	got, err := pl.ReadFile("a.txt", 0, 0)
	if err != nil || got != "one\ntwo\nthree\n" {
		t.Fatalf("read: %q, %v", got, err)
	}
	got, err = pl.ReadFile(filepath.Join(pl.Dir, "a.txt"), 2, 2)
	if err != nil || got != "two\n[lines 2-2 of 3; read on with from=3]" {
		t.Fatalf("read 2-2: %q, %v", got, err)
	}
	if _, err := pl.ReadFile("a.txt", 5, 0); err == nil {
		t.Fatal("a read past the end succeeded")
	}

	// Writes: new files and directories, replacements keep the mode.
	if got, err := pl.WriteFile("new/deep/b.go", "package b\n"); err != nil || !strings.HasPrefix(got, "created ") {
		t.Fatalf("write: %q, %v", got, err)
	}
	if b, _ := os.ReadFile(filepath.Join(pl.Dir, "new/deep/b.go")); string(b) != "package b\n" {
		t.Fatalf("written %q", b)
	}
	if err := os.Chmod(filepath.Join(pl.Dir, "a.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := pl.EditFile("a.txt", "two", "TWO"); err != nil || got != "edited "+filepath.Join(pl.Dir, "a.txt")+" at line 2 (-1 +1 lines)" {
		t.Fatalf("edit: %q, %v", got, err)
	}
	fi, _ := os.Stat(filepath.Join(pl.Dir, "a.txt"))
	if b, _ := os.ReadFile(filepath.Join(pl.Dir, "a.txt")); string(b) != "one\nTWO\nthree\n" || fi.Mode().Perm() != 0o600 {
		t.Fatalf("after edit: %q mode %o", b, fi.Mode().Perm())
	}
	_, err = pl.EditFile("a.txt", "nope", "x")
	wantErr(t, err, ErrInvalid, "was not found")
	write(t, filepath.Join(pl.Dir, "twice"), "x x")
	_, err = pl.EditFile("twice", "x", "y")
	wantErr(t, err, ErrInvalid, "occurs 2 times")
	_, err = pl.EditFile("twice", "", "y")
	wantErr(t, err, ErrInvalid, "empty")

	// A symlink that stays inside is followed; one that leads out is not.
	if got, err := pl.WriteFile("in/c.txt", "c"); err != nil || !strings.Contains(got, "in/c.txt") {
		t.Fatalf("write through an inside symlink: %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(pl.Dir, "sub", "c.txt")); err != nil {
		t.Fatal(err)
	}
	_, err = pl.ReadFile("out/secret", 0, 0)
	wantErr(t, err, ErrOutside, "leads out")
	_, err = pl.WriteFile("out/planted", "x")
	wantErr(t, err, ErrOutside, "leads out")
	_, err = pl.WriteFile("in", "x")
	wantErr(t, err, ErrInvalid, "is a symlink")
	for _, p := range []string{"../outside/secret", "sub/../../outside/secret", filepath.Join(base, "outside", "secret"), "/etc/passwd"} {
		_, err := pl.ReadFile(p, 0, 0)
		if !errors.Is(err, ErrOutside) {
			t.Errorf("read %s: %v, want ErrOutside", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "outside", "planted")); err == nil {
		t.Fatal("a file was written outside the directory")
	}

	// What cannot be read as text is refused, without blocking.
	if err := syscall.Mkfifo(filepath.Join(pl.Dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = pl.ReadFile("fifo", 0, 0)
	wantErr(t, err, ErrInvalid, "not a regular file")
	_, err = pl.WriteFile("fifo", "x")
	wantErr(t, err, ErrInvalid, "not a regular file")
	_, err = pl.ReadFile("sub", 0, 0)
	wantErr(t, err, ErrInvalid, "is a directory")
	write(t, filepath.Join(pl.Dir, "bin"), "ab\x00cd")
	_, err = pl.ReadFile("bin", 0, 0)
	wantErr(t, err, ErrInvalid, "binary")
	_, err = pl.ReadFile("missing", 0, 0)
	wantErr(t, err, ErrNotFound, "missing")
}

func TestReadFileCaps(t *testing.T) {
	pl, _ := dirPlace(t)
	line := strings.Repeat("x", 1023) + "\n"
	write(t, filepath.Join(pl.Dir, "big"), strings.Repeat(line, 1000))
	got, err := pl.ReadFile("big", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) > MaxReadBytes+100 || !strings.HasSuffix(got, "[lines 1-256 of 1000; read on with from=257]") {
		t.Fatalf("read of a big file: %d bytes, ends %q", len(got), got[len(got)-60:])
	}
}

// In a sandbox, paths are as the agent sees them, resolved through the
// grants; what the sandbox shows read-only cannot be written.
func TestFilesInSandbox(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root, ro, rw := filepath.Join(base, "root"), filepath.Join(base, "ro"), filepath.Join(base, "rw")
	for _, d := range []string{root, ro, rw} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(ro, "doc"), "read me\n")
	pl := Place{Sandbox: &bwrap.Spec{Root: bwrap.Source{Host: root}, Mounts: []bwrap.Mount{
		{Source: bwrap.Source{Host: ro}, Target: "/ref", ReadOnly: true},
		{Source: bwrap.Source{Host: rw}, Target: "/workspace/out"},
	}}, ShellState: bwrap.Source{Host: filepath.Join(base, "state")}}

	if _, err := pl.WriteFile("main.go", "package main\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "main.go")); err != nil {
		t.Fatalf("relative paths are under /workspace: %v", err)
	}
	if _, err := pl.WriteFile("/workspace/out/r.txt", "r"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(rw, "r.txt")); err != nil {
		t.Fatalf("the deepest grant wins: %v", err)
	}
	if got, err := pl.ReadFile("/ref/doc", 0, 0); err != nil || got != "read me\n" {
		t.Fatalf("read a read-only link: %q, %v", got, err)
	}
	_, err = pl.WriteFile("/ref/doc", "x")
	wantErr(t, err, ErrReadOnly, "/ref/doc is read-only")
	_, err = pl.EditFile("/ref/doc", "read", "x")
	wantErr(t, err, ErrReadOnly, "read-only")
	_, err = pl.ReadFile("/etc/shadow", 0, 0)
	wantErr(t, err, ErrOutside, "not in your sandbox")
	_, err = pl.WriteFile("/usr/x", "x")
	wantErr(t, err, ErrReadOnly, "read-only")
	if _, err := pl.ReadFile("/usr/lib/os-release", 0, 0); err != nil && !errors.Is(err, ErrNotFound) {
		t.Fatalf("a system file the sandbox shows: %v", err)
	}

	// The shell runs in the sandbox, and keeps its state.
	ctx := context.Background()
	got, err := pl.Shell(ctx, "mkdir -p pkg && cd pkg && export GREETING=hi && ls /ref", 0)
	if err != nil || got != "doc\n[exit status 0]" {
		t.Fatalf("shell: %q, %v", got, err)
	}
	got, err = pl.Shell(ctx, "pwd; echo $GREETING; cat "+filepath.Join(ro, "doc")+"; exit 3", 0)
	if err != nil || !strings.HasPrefix(got, "/workspace/pkg\nhi\n") || !strings.Contains(got, "No such file") || !strings.HasSuffix(got, "[exit status 3]") {
		t.Fatalf("shell state and confinement: %q, %v", got, err)
	}
}

func TestShellInDir(t *testing.T) {
	pl, _ := dirPlace(t)
	ctx := context.Background()
	got, err := pl.Shell(ctx, "cd sub && export X=1 && echo ok", 0)
	if err != nil || got != "ok\n[exit status 0]" {
		t.Fatalf("shell: %q, %v", got, err)
	}
	got, err = pl.Shell(ctx, "pwd; echo X=$X", 0)
	if err != nil || got != filepath.Join(pl.Dir, "sub")+"\nX=1\n[exit status 0]" {
		t.Fatalf("state: %q, %v", got, err)
	}

	// Output is capped in the middle, and says so.
	got, err = pl.Shell(ctx, "head -c 300000 /dev/zero | tr '\\0' 'a'; echo; echo END", 0)
	if err != nil || len(got) > MaxShellOutput+200 || !strings.Contains(got, "bytes of output cut ...]") || !strings.HasSuffix(got, "END\n[exit status 0]") {
		t.Fatalf("capped output: %d bytes, %v", len(got), err)
	}

	// A command past its timeout is killed with everything it started,
	// even what left its process group (setsid): the shell runs in a PID
	// namespace of its own (launch.Contain).
	tag := fmt.Sprintf("3173%d", os.Getpid()%10000)
	start := time.Now()
	got, err = pl.Shell(ctx, "setsid sleep "+tag+" </dev/null >/dev/null 2>&1 & sleep 300", time.Second)
	if err != nil || !strings.Contains(got, "[killed after 1s") {
		t.Fatalf("timeout: %q, %v", got, err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the timeout took %v", d)
	}
	deadline := time.Now().Add(10 * time.Second)
	for running("sleep "+tag) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if running("sleep " + tag) {
		t.Fatalf("the background sleep outlived the timeout")
	}
}

// running reports whether a process whose command line is s runs.
func running(s string) bool {
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range dirs {
		if b, err := os.ReadFile(d); err == nil && strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " ")) == s {
			return true
		}
	}
	return false
}

// The file tools are not fooled by a swap: while a directory of the
// workspace is swapped for a symlink to a directory outside it, as fast
// as a process can, write_file into it never lands outside.
func TestWriteRace(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	bwraptest.MkSwapPair(t, filepath.Join(root, "shared"), filepath.Join(root, "alt"), "inside")
	os.Remove(filepath.Join(root, "alt"))
	if err := os.Symlink(outside, filepath.Join(root, "alt")); err != nil {
		t.Fatal(err)
	}
	pl := Place{Sandbox: &bwrap.Spec{Root: bwrap.Source{Host: root}}}
	stop := bwraptest.Swap(t, filepath.Join(root, "shared"), filepath.Join(root, "alt"))
	defer stop()
	var wrote, refused int
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		if _, err := pl.WriteFile("/workspace/shared/f", "x"); err != nil {
			refused++
		} else {
			wrote++
		}
		if _, err := pl.EditFile("/workspace/shared/f", "x", "y"); err == nil {
			wrote++
		}
	}
	stop()
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("files were written outside the workspace: %v", entries)
	}
	t.Logf("%d writes, %d refused", wrote, refused)
	if wrote == 0 || refused == 0 {
		t.Fatalf("the race did not play out both ways (%d written, %d refused)", wrote, refused)
	}
}
