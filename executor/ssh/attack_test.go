package ssh

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestPullHardLinks: a place whose files are hard links of one big file
// is as large as rsync writes it here (each link a file of its own), not
// as du counts it (each inode once): Pull refuses it.
func TestPullHardLinks(t *testing.T) {
	_, e := start(t)
	ctx := context.Background()
	e.opts.MaxFileSize = 1 << 20
	e.opts.MaxTotalSize = 4 << 20
	if err := e.Push(ctx, "agenth", t.TempDir()); err != nil {
		t.Fatal(err)
	}
	dir, _ := e.Place(ctx, "agenth")
	one := filepath.Join(dir, "one")
	if err := os.WriteFile(one, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		if err := os.Link(one, filepath.Join(dir, "l"+string(rune('a'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	local := t.TempDir()
	if err := e.Pull(ctx, "agenth", local); !errors.Is(err, ErrRefused) {
		t.Fatalf("Pull of 17 MiB in hard links, over a bound of 4 MiB: %v, want ErrRefused", err)
	}
	if _, err := os.Lstat(filepath.Join(local, "la")); !os.IsNotExist(err) {
		t.Fatal("a refused place came back")
	}
}
