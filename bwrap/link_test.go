package bwrap

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckLink(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := func(rel string) string { return filepath.Join(base, rel) }
	for _, d := range []string{"rw/sub", "rw2", "ro/rwsub", "outside", "nest/cfg", "nest/other"} {
		if err := os.MkdirAll(p(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"rw/file", "outside/secret", "ro/file"} {
		if err := os.WriteFile(p(f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	symlinks := map[string]string{
		"rw/escape":      "../outside",        // relative link out of the grant
		"rw/abs-escape":  p("outside/secret"), // absolute link out of the grant
		"rw/inner":       "sub",               // link that stays inside
		"rw/sub/up":      "..",                // link to the grant itself
		"rw/to-ro":       "../ro/file",        // link into another, read-only grant
		"grant-via-link": "rw",                // a grant named through a symlink
	}
	for name, target := range symlinks {
		if err := os.Symlink(target, p(name)); err != nil {
			t.Fatal(err)
		}
	}
	granted := []Mount{
		// A grant named through a symlink in its trusted anchor (as a
		// workspace root in a home reached through a symlink).
		{Source: Source{Host: p("grant-via-link"), Anchor: p("grant-via-link")}, Target: "/workspace"},
		{Source: Source{Host: p("ro")}, Target: "/ro", ReadOnly: true},
		{Source: Source{Host: p("ro/rwsub")}, Target: "/ro/rwsub"},
		{Source: Source{Host: p("gone")}, Target: "/gone"}, // missing: grants nothing
		// A read-only grant nested in a writable one, as a git
		// workspace's config in its git directory.
		{Source: Source{Host: p("nest")}, Target: "/nest"},
		{Source: Source{Host: p("nest/cfg")}, Target: "/nest/cfg", ReadOnly: true},
	}

	accept := []struct {
		path  string
		write bool
		want  string
	}{
		{p("rw"), true, p("rw")},
		{p("rw/file"), true, p("rw/file")},
		{p("rw/sub/"), true, p("rw/sub")},
		{p("rw//sub"), false, p("rw/sub")},
		{p("rw/inner"), true, p("rw/sub")},
		{p("rw/sub/up"), true, p("rw")},
		{p("grant-via-link/sub"), true, p("rw/sub")},
		{p("ro/file"), false, p("ro/file")},
		{p("ro/rwsub"), true, p("ro/rwsub")},
		{p("nest/other"), true, p("nest/other")},
		{p("nest/cfg"), false, p("nest/cfg")},
		{p("nest"), false, p("nest")},
	}
	for _, a := range accept {
		got, err := CheckLink(granted, a.path, a.write)
		if err != nil {
			t.Errorf("CheckLink(%q, write=%v): %v", a.path, a.write, err)
			continue
		}
		if got != a.want {
			t.Errorf("CheckLink(%q) = %q, want %q", a.path, got, a.want)
		}
	}

	refuse := []struct {
		path  string
		write bool
		want  string
	}{
		{"rw/sub", false, `"rw/sub" is not absolute`},
		{"", false, "empty path"},
		{base + "/rw/../outside", false, "contains '..'"},
		{base + "/rw/sub/../../outside/secret", false, "contains '..'"},
		{p("rw/escape"), false, "is a symlink that leaves " + p("grant-via-link") + " (it resolves to " + p("outside") + ")"},
		{p("rw/escape/secret"), false, "is a symlink that leaves"},
		{p("rw/abs-escape"), true, "is a symlink that leaves"},
		{p("outside"), false, "is not within anything your workspace grants"},
		{p("outside/secret"), false, "is not within anything your workspace grants"},
		{p("rw2"), false, "is not within anything your workspace grants"}, // a name that merely starts like a grant
		{"/", false, "is not within anything your workspace grants"},
		{"/etc/passwd", false, "is not within anything your workspace grants"},
		{p("ro/file"), true, "is granted read-only"},
		{p("ro"), true, "is granted read-only"},
		{p("nest/cfg"), true, "is granted read-only"},
		{p("nest"), true, "is granted read-only"}, // it holds nest/cfg
		// A symlink out of its grant is refused even where it lands in
		// another grant: each path is resolved beneath one grant.
		{p("rw/to-ro"), false, "is a symlink that leaves"},
		{p("rw/to-ro"), true, "is a symlink that leaves"},
		{p("rw/missing"), false, "cannot be resolved"},
		{p("gone"), false, "cannot be resolved"},
	}
	for _, r := range refuse {
		got, err := CheckLink(granted, r.path, r.write)
		if err == nil {
			t.Errorf("CheckLink(%q, write=%v) = %q, want refusal", r.path, r.write, got)
			continue
		}
		if !errors.Is(err, ErrLinkRefused) {
			t.Errorf("CheckLink(%q): %v does not wrap ErrLinkRefused", r.path, err)
		}
		if !strings.Contains(err.Error(), r.want) {
			t.Errorf("CheckLink(%q, write=%v) error %q, want it to contain %q", r.path, r.write, err, r.want)
		}
		if r.path != "" && !strings.Contains(err.Error(), r.path) {
			t.Errorf("error %q does not name the path %q", err, r.path)
		}
	}
}

func TestCheckLinkNoGrants(t *testing.T) {
	dir := t.TempDir()
	if _, err := CheckLink(nil, dir, false); !errors.Is(err, ErrLinkRefused) {
		t.Fatalf("CheckLink with no grants: %v", err)
	}
}
