package cli

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// WriteFile writes where a sandboxed CLI can plant things between turns:
// what it finds at the path is replaced, never followed, read without
// bound, or waited on.
func TestWriteFileReplacesWhatIsPlanted(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(outside, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	plant := map[string]func(p string) error{
		"symlink to dev-zero":   func(p string) error { return os.Symlink("/dev/zero", p) },
		"FIFO":                  func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"symlink outside":       func(p string) error { return os.Symlink(outside, p) },
		"dangling symlink":      func(p string) error { return os.Symlink("/nonexistent/x", p) },
		"regular, other bytes":  func(p string) error { return os.WriteFile(p, []byte("other"), 0o600) },
		"regular, longer bytes": func(p string) error { return os.WriteFile(p, []byte("config!!"), 0o600) },
	}
	for name, mk := range plant {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, name)
			if err := mk(p); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- WriteFile(p, []byte("config")) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("WriteFile blocked")
			}
			fi, err := os.Lstat(p)
			if err != nil || !fi.Mode().IsRegular() {
				t.Fatalf("after WriteFile: %v, %v; want a regular file", fi, err)
			}
			if b, _ := os.ReadFile(p); string(b) != "config" {
				t.Fatalf("content %q", b)
			}
		})
	}
	if b, _ := os.ReadFile(outside); string(b) != "keep" {
		t.Fatalf("the file a symlink pointed at was changed: %q", b)
	}

	// A directory that is a symlink is refused.
	real := t.TempDir()
	link := filepath.Join(dir, "linkdir")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(filepath.Join(link, "mcp.json"), []byte("x")); err == nil {
		t.Fatal("WriteFile wrote through a symlinked directory")
	}
	if _, err := os.Stat(filepath.Join(real, "mcp.json")); err == nil {
		t.Fatal("a file appeared behind the symlinked directory")
	}
}
