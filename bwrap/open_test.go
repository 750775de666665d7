package bwrap

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openTree builds, under a fresh directory:
//
//	grant/sub/file
//	grant/in -> sub             a symlink that stays inside grant
//	grant/sub/up -> ..          the grant itself
//	grant/out -> ../outside     a relative symlink out of grant
//	grant/abs -> /              the host's root
//	grant/mnt                   outside/ bind-mounted here (when root)
//	outside/secret
//	alias -> grant              a symlinked name of grant
func openTree(t *testing.T) (base string, mounted bool) {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := func(rel string) string { return filepath.Join(base, rel) }
	for _, d := range []string{"grant/sub", "grant/mnt", "outside"} {
		if err := os.MkdirAll(p(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"grant/sub/file", "outside/secret"} {
		if err := os.WriteFile(p(f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{"grant/in": "sub", "grant/sub/up": "..", "grant/out": "../outside", "grant/abs": "/", "alias": "grant"} {
		if err := os.Symlink(target, p(name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount(p("outside"), p("grant/mnt"), "", unix.MS_BIND, ""); err == nil {
		mounted = true
		t.Cleanup(func() { unix.Unmount(p("grant/mnt"), unix.MNT_DETACH) })
	} else {
		t.Logf("no bind mount (%v): the mount case is not checked", err)
	}
	return base, mounted
}

// Open resolves each source once, from its anchor down, and refuses a
// symlink where none may be and one that leaves where it must stay.
func TestOpen(t *testing.T) {
	base, mounted := openTree(t)
	p := func(rel string) string { return filepath.Join(base, rel) }
	type tc struct {
		name    string
		src     Source
		want    string // the real path opened; "" when refused
		err     error  // what the refusal wraps
		msg     string // and says
		strictr bool   // the fallback walk refuses it (a symlink below Beneath)
	}
	cases := []tc{
		{name: "plain directory", src: Source{Host: p("grant/sub")}, want: p("grant/sub")},
		{name: "plain file", src: Source{Host: p("grant/sub/file")}, want: p("grant/sub/file")},
		{name: "symlink at the end", src: Source{Host: p("grant/in")}, err: ErrSymlink, msg: p("grant/in") + " is a symlink"},
		{name: "symlink in the middle", src: Source{Host: p("grant/in/file")}, err: ErrSymlink, msg: p("grant/in") + " is a symlink"},
		{name: "symlink to / in the middle", src: Source{Host: p("grant/abs/etc")}, err: ErrSymlink, msg: "resolves to /etc"},
		{name: "dotdot", src: Source{Host: base + "/grant/../outside"}, err: ErrInvalidSpec, msg: "contains '..'"},
		{name: "relative", src: Source{Host: "grant"}, err: ErrInvalidSpec, msg: "not absolute"},
		{name: "missing", src: Source{Host: p("grant/gone")}, err: fs.ErrNotExist, msg: p("grant/gone")},
		{name: "missing anchor", src: Source{Host: p("nope/x"), Anchor: p("nope")}, err: fs.ErrNotExist},
		{name: "beneath: a symlink that stays", src: Source{Host: p("grant/in/file"), Beneath: p("grant")}, want: p("grant/sub/file"), strictr: true},
		{name: "beneath: up to the grant itself", src: Source{Host: p("grant/sub/up/sub"), Beneath: p("grant")}, want: p("grant/sub"), strictr: true},
		{name: "beneath: a relative symlink out", src: Source{Host: p("grant/out/secret"), Beneath: p("grant")}, err: ErrLeaves,
			msg: p("grant/out/secret") + " is a symlink that leaves " + p("grant") + " (it resolves to " + p("outside/secret") + ")", strictr: true},
		{name: "beneath: a symlink to /", src: Source{Host: p("grant/abs"), Beneath: p("grant")}, err: ErrLeaves, msg: "resolves to /)", strictr: true},
		{name: "beneath not containing host", src: Source{Host: p("outside"), Beneath: p("grant")}, err: ErrInvalidSpec, msg: "is not within"},
		{name: "anchor not containing beneath", src: Source{Host: p("grant/sub"), Anchor: p("outside")}, err: ErrInvalidSpec, msg: "is not within its anchor"},
		{name: "anchor through a symlink", src: Source{Host: p("alias/sub"), Anchor: p("alias")}, want: p("grant/sub")},
		{name: "symlink between anchor and beneath", src: Source{Host: p("alias/sub"), Anchor: base}, err: ErrSymlink, msg: p("alias") + " is a symlink"},
		{name: "anchor is the host", src: Source{Host: p("alias"), Anchor: p("alias")}, want: p("grant")},
	}
	if mounted {
		cases = append(cases,
			tc{name: "across a bind mount", src: Source{Host: p("grant/mnt/secret")}, want: p("grant/mnt/secret")},
			tc{name: "beneath, across a bind mount", src: Source{Host: p("grant/mnt/secret"), Beneath: p("grant")}, want: p("grant/mnt/secret")})
	}

	check := func(t *testing.T, c tc, fallback bool) {
		f, err := Open(c.src)
		want, wantErr := c.want, c.err
		if fallback && c.strictr {
			want, wantErr = "", ErrSymlink
		}
		if want != "" {
			if err != nil {
				t.Fatalf("Open(%+v): %v", c.src, err)
			}
			defer f.Close()
			got, err := RealPath(f)
			if err != nil || got != want {
				t.Fatalf("Open(%+v) opened %q (%v), want %q", c.src, got, err, want)
			}
			return
		}
		if err == nil {
			f.Close()
			t.Fatalf("Open(%+v) succeeded, want %v", c.src, wantErr)
		}
		if !errors.Is(err, wantErr) {
			t.Fatalf("Open(%+v): %v, want it to wrap %v", c.src, err, wantErr)
		}
		if c.msg != "" && !(fallback && c.strictr) && !strings.Contains(err.Error(), c.msg) {
			t.Fatalf("Open(%+v): %q, want it to say %q", c.src, err, c.msg)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { check(t, c, false) })
	}
	// The same on a kernel without openat2: the walk by hand.
	t.Run("fallback", func(t *testing.T) {
		old := openat2
		openat2 = func(int, string, *unix.OpenHow) (int, error) { return -1, unix.ENOSYS }
		t.Cleanup(func() { openat2 = old })
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) { check(t, c, true) })
		}
	})
}

// A descriptor keeps naming what was opened: a path that disappears or is
// swapped for a symlink afterwards does not change it.
func TestOpenHoldsWhatItResolved(t *testing.T) {
	base, _ := openTree(t)
	p := func(rel string) string { return filepath.Join(base, rel) }
	f, err := Open(Source{Host: p("grant/sub")})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Rename(p("grant/sub"), p("grant/moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", p("grant/sub")); err != nil {
		t.Fatal(err)
	}
	if got, err := RealPath(f); err != nil || got != p("grant/moved") {
		t.Fatalf("after the swap the descriptor names %q (%v), want %s", got, err, p("grant/moved"))
	}
	if err := os.RemoveAll(p("grant/moved")); err != nil {
		t.Fatal(err)
	}
	if _, err := RealPath(f); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("RealPath of a removed directory: %v", err)
	}
}
