package ssh

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/substrat/substrat/internal/sshtest"
)

// TestCopies: Copies lists the ids under the home's directory, and
// nothing of what else is there (names that are no ids, a name with a
// newline whose lines are ids); Remove of a symlink there removes it,
// not what it leads to. Another home's and the old layout's are not
// listed.
func TestCopies(t *testing.T) {
	if why := sshtest.Available(); why != "" {
		t.Skip(why)
	}
	s := sshtest.Start(t)
	root := t.TempDir()
	e, err := New(s.Host, Options{Config: s.Config, Root: root, Home: "home-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	if keys, err := e.Copies(ctx); err != nil || len(keys) != 0 {
		t.Fatalf("no home directory yet: %q, %v", keys, err)
	}
	if err := e.Push(ctx, "agent-1", t.TempDir()); err != nil {
		t.Fatal(err)
	}
	place, _ := e.Place(ctx, "agent-1")
	if want := filepath.Join(root, "home-1", "agent-1", "place"); place != want {
		t.Fatalf("place %s, want %s", place, want)
	}
	home := filepath.Join(root, "home-1")
	victim := t.TempDir()
	os.WriteFile(filepath.Join(victim, "precious"), nil, 0o644)
	for _, p := range []string{filepath.Join(root, "home-2", "agent-2"), filepath.Join(root, "agent-3"),
		filepath.Join(home, "not an id"), filepath.Join(home, ".hidden"), filepath.Join(home, "x\nws-abc\n")} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(victim, filepath.Join(home, "link-1")); err != nil {
		t.Fatal(err)
	}
	keys, err := e.Copies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	if want := []string{"agent-1", "link-1"}; !slices.Equal(keys, want) {
		t.Fatalf("copies %q, want %q", keys, want)
	}
	for _, k := range keys {
		if err := e.Remove(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(victim, "precious")); err != nil {
		t.Fatalf("Remove went through the symlink: %v", err)
	}
	if keys, err := e.Copies(ctx); err != nil || len(keys) != 0 {
		t.Fatalf("after Remove: %q, %v", keys, err)
	}
	// Without a home, nothing is listed; a home that is no id is refused.
	bare, err := New(s.Host, Options{Config: s.Config, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	if _, err := bare.Copies(ctx); err == nil {
		t.Fatal("Copies without a home")
	}
	if _, err := New(s.Host, Options{Root: root, Home: "../x"}); !errors.Is(err, ErrID) {
		t.Fatalf("a home ../x: %v", err)
	}
}
