package daemon

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
)

// inTime fails the test if f blocks: nothing the daemon does with a file
// of its home may wait on a FIFO.
func inTime(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s blocked", what)
	}
}

// A daemon.lock that is a FIFO (which blocked 'daemon start' and 'daemon
// stop' in HeldBy) or a symlink (through which the daemon wrote its pid
// into another file) is refused at once: TryLock says what it is, and
// HeldBy sees no daemon.
func TestLockRefusesSpecialFiles(t *testing.T) {
	for _, c := range []struct {
		name string
		make func(p string) error
		want string
	}{
		{"a FIFO", func(p string) error { return syscall.Mkfifo(p, 0o600) }, "not a regular file: a FIFO"},
		{"a symlink", func(p string) error {
			if err := os.WriteFile(p+".victim", []byte("keep me\n"), 0o600); err != nil {
				return err
			}
			return os.Symlink(p+".victim", p)
		}, "not a regular file: a symlink"},
		{"a directory", func(p string) error { return os.Mkdir(p, 0o700) }, "not a regular file: a directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			home := t.TempDir()
			path := fsstore.Layout{Home: home}.Lock()
			if err := c.make(path); err != nil {
				t.Fatal(err)
			}
			inTime(t, "HeldBy", func() {
				if held, pid, _ := HeldBy(path); held {
					t.Errorf("HeldBy: held by %d", pid)
				}
			})
			inTime(t, "TryLock", func() {
				l, err := TryLock(path, home)
				if err == nil {
					l.Unlock()
				}
				if !errors.Is(err, fsstore.ErrNotRegular) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
					t.Errorf("TryLock: %v, want an error naming %s and saying %q", err, path, c.want)
				}
			})
			if data, err := os.ReadFile(path + ".victim"); err == nil && string(data) != "keep me\n" {
				t.Errorf("the lock wrote through the symlink: %q", data)
			}
		})
	}
}

// reap reads providers.json only if it is a regular file: a FIFO is
// reported and reaps nothing, at once.
func TestReapRefusesFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), fsstore.ProcsName)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	inTime(t, "reap", func() {
		if got := reap(path, slog.New(slog.NewTextHandler(&logged, nil))); len(got) != 0 {
			t.Errorf("reaped %v", got)
		}
	})
	if !strings.Contains(logged.String(), "not a regular file: a FIFO") {
		t.Errorf("the log says %q", logged.String())
	}
}
