package fsstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A FIFO, a device or a symlink to one, put in an agent directory by hand,
// is damage: reported, the agent kept out, and nothing blocks or reads
// without end (a FIFO used to wedge the scan, the watcher and fsck).
func TestSpecialFilesAreDamage(t *testing.T) {
	for _, c := range []struct {
		name, file string
		plant      func(p string) error
		want       string
	}{
		{"session.json a FIFO", SessionName, func(p string) error { return syscall.Mkfifo(p, 0o600) }, "not a regular file: a FIFO"},
		{"session.json to /dev/zero", SessionName, func(p string) error { return os.Symlink("/dev/zero", p) }, "not a regular file: a symlink"},
		{"events.jsonl a FIFO", EventsName, func(p string) error { return syscall.Mkfifo(p, 0o600) }, "not a regular file: a FIFO"},
		{"events.jsonl to /dev/zero", EventsName, func(p string) error { return os.Symlink("/dev/zero", p) }, "not a regular file: a symlink"},
	} {
		t.Run(c.name, func(t *testing.T) {
			home := t.TempDir()
			s, err := Open(home, Options{})
			if err != nil {
				t.Fatal(err)
			}
			a, err := s.CreateAgent(&Session{Name: "a", Provider: "script"})
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(a.Files().Dir, c.file)
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := c.plant(p); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			var res *ScanResult
			go func() {
				defer close(done)
				res, err = s.Scan(context.Background(), ScanOptions{Deep: true})
			}()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the scan blocked on a special file")
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Agents) != 0 {
				t.Fatalf("the agent was loaded: %+v", res.Agents)
			}
			found := false
			for _, f := range res.Findings {
				found = found || (f.Kind == FindKeptOut && strings.Contains(f.Detail, c.want))
			}
			if !found {
				t.Fatalf("findings %+v, want the agent kept out saying %q", res.Findings, c.want)
			}
			if c.file == SessionName {
				// The owner's look at the file (the watcher's) does not
				// block either.
				_, changed, _, err := a.DiskSession()
				if !changed || !errors.Is(err, ErrNotRegular) {
					t.Fatalf("DiskSession: changed %v, %v", changed, err)
				}
			}
		})
	}
}

// A message file that is a FIFO is reported as a bad message and skipped;
// the others are read.
func TestFIFOMessageSkipped(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.CreateAgent(&Session{Name: "a", Provider: "script"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&Message{To: a.ID(), From: User, FromName: User, Kind: KindMessage, Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	fifo := a.Files().Inbox().Path("new", s.newID())
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	msgs, bad, err := a.Pending()
	if err != nil || len(msgs) != 1 || len(bad) != 1 || !strings.Contains(bad[0].Reason, "FIFO") {
		t.Fatalf("Pending: %d messages, bad %+v, %v", len(msgs), bad, err)
	}
}
