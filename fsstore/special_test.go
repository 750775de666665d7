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

// within fails the test if f takes more than a few seconds: what it does
// must not block on a FIFO or read without end.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s blocked", what)
	}
}

// ReadRegular, OpenRegular and OpenAppendRegular, with which the daemon
// and the CLI read the files of the home (config.json, recovery.json...),
// refuse at once, naming the file, anything but a regular file within
// the cap.
func TestReadRegular(t *testing.T) {
	dir := t.TempDir()
	const max = 1 << 10
	for _, c := range []struct {
		name string
		make func(p string) error
		want string // "" for success
		is   error
	}{
		{"regular", func(p string) error { return os.WriteFile(p, []byte(`{"version":1}`), 0o600) }, "", nil},
		{"exactly the cap", func(p string) error { return os.WriteFile(p, make([]byte, max), 0o600) }, "", nil},
		{"missing", func(string) error { return nil }, "no such file", os.ErrNotExist},
		{"a FIFO", func(p string) error { return syscall.Mkfifo(p, 0o600) }, "not a regular file: a FIFO", ErrNotRegular},
		{"a symlink to /dev/zero", func(p string) error { return os.Symlink("/dev/zero", p) }, "not a regular file: a symlink", ErrNotRegular},
		{"a symlink to a regular file", func(p string) error {
			if err := os.WriteFile(p+".target", []byte("{}"), 0o600); err != nil {
				return err
			}
			return os.Symlink(p+".target", p)
		}, "not a regular file: a symlink", ErrNotRegular},
		{"a directory", func(p string) error { return os.Mkdir(p, 0o700) }, "not a regular file: a directory", ErrNotRegular},
		{"oversized", func(p string) error { return os.WriteFile(p, make([]byte, max+1), 0o600) }, "file too large (more than 1024 bytes)", ErrFileTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.NewReplacer(" ", "-", "/", "-").Replace(c.name)+".json")
			if err := c.make(p); err != nil {
				t.Fatal(err)
			}
			var (
				data []byte
				err  error
			)
			within(t, "ReadRegular", func() { data, err = ReadRegular(p, max) })
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("ReadRegular: %v", err)
			case c.want == "":
				if want, _ := os.ReadFile(p); string(data) != string(want) {
					t.Fatalf("ReadRegular read %d bytes, want %d", len(data), len(want))
				}
				return
			case err == nil || !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p):
				t.Fatalf("ReadRegular: %v, want an error naming %s and saying %q", err, p, c.want)
			}
			if c.is == ErrNotRegular {
				var f *os.File
				within(t, "OpenRegular", func() { f, err = OpenRegular(p) })
				if !errors.Is(err, ErrNotRegular) {
					f.Close()
					t.Errorf("OpenRegular: %v", err)
				}
				within(t, "OpenAppendRegular", func() { f, err = OpenAppendRegular(p, 0o600) })
				if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), p) {
					f.Close()
					t.Errorf("OpenAppendRegular: %v", err)
				}
			}
		})
	}
	// OpenAppendRegular creates a missing file, and appends.
	log := filepath.Join(dir, "daemon.log")
	for _, line := range []string{"a\n", "b\n"} {
		f, err := OpenAppendRegular(log, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(line)
		f.Close()
	}
	if data, _ := os.ReadFile(log); string(data) != "a\nb\n" {
		t.Fatalf("the log holds %q", data)
	}
}

// SyncDir of a FIFO put where a directory was fails at once (it used to
// block in open).
func TestSyncDirFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "new")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	within(t, "SyncDir", func() { err = OS{}.SyncDir(p) })
	if !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("SyncDir of a FIFO: %v", err)
	}
}

// OS.OpenAppend (events.jsonl, transcript.txt) of a FIFO or a symlink
// fails at once (a FIFO without a reader used to block the open).
func TestOpenAppendSpecial(t *testing.T) {
	dir := t.TempDir()
	fifo, link := filepath.Join(dir, "transcript.txt"), filepath.Join(dir, "events.jsonl")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, link} {
		var err error
		within(t, "OpenAppend", func() { _, err = OS{}.OpenAppend(p) })
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), p) {
			t.Errorf("OpenAppend(%s): %v", p, err)
		}
	}
	if _, err := (OS{}).OpenAppend(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenAppend of a missing file: %v", err)
	}
}
