package fsstore

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

// plainFS is OS hidden behind another type: the scan then reads through
// the FS methods instead of making its own system calls.
type plainFS struct{ FS }

// assertSameScan checks that two scans of the same home found the same:
// findings, live agents, their sessions and what they were loaded with.
func assertSameScan(t *testing.T, got, want *ScanResult) {
	t.Helper()
	defer closeAgents(want)
	if !reflect.DeepEqual(got.Findings, want.Findings) {
		t.Errorf("the scan on OS and through the FS methods differ:\n%s\nvs\n%s", fmtFindings(got.Findings), fmtFindings(want.Findings))
	}
	if len(got.Agents) != len(want.Agents) {
		t.Fatalf("the scan on OS loaded %v, through the FS methods %v", liveIDs(got), liveIDs(want))
	}
	for i, a := range got.Agents {
		b := want.Agents[i]
		if a.ID() != b.ID() || !reflect.DeepEqual(a.Session(), b.Session()) || a.PendingAtLoad() != b.PendingAtLoad() ||
			a.SnapshotSeq() != b.SnapshotSeq() || a.snapSum != b.snapSum || a.Log().LastSeq() != b.Log().LastSeq() {
			t.Errorf("agent %s loaded differently on OS and through the FS methods", a.ID())
		}
	}
}

// TestAgentDirMatchesOS: the system calls the scan makes itself on OS give
// what package os gives, errors included.
func TestAgentDirMatchesOS(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "file"), []byte("data"))
	writeFile(t, filepath.Join(dir, "empty"), nil)
	writeFile(t, filepath.Join(dir, "big"), []byte(strings.Repeat("x", 100<<10)))
	mkdir(t, filepath.Join(dir, "sub"))
	mkdir(t, filepath.Join(dir, "emptydir"))
	for i := range 300 { // more than one getdents buffer
		writeFile(t, filepath.Join(dir, "sub", strings.Repeat("n", 100)+string(rune('a'+i%26))+strings.Repeat("z", i/26)), nil)
	}
	if err := os.Symlink("file", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere", filepath.Join(dir, "dangling")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := mustOpen(t, t.TempDir(), Options{})
	d, err := s.openAgentDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if _, ok := d.(*osAgentDir); !ok {
		t.Fatalf("openAgentDir on OS gave a %T", d)
	}
	ref := fsAgentDir{OS{}}
	same := func(what string, got, want any, gerr, werr error) {
		t.Helper()
		if !reflect.DeepEqual(got, want) || !sameErr(gerr, werr) {
			t.Errorf("%s: got %v, %v; package os gives %v, %v", what, got, gerr, want, werr)
		}
	}
	for _, rel := range []string{"", "sub", "emptydir", "file", "missing", "link", "dangling"} {
		path := filepath.Join(dir, rel)
		got, gerr := d.readDir(rel, path)
		want, werr := ref.readDir(rel, path)
		same("readDir "+rel, got, want, gerr, werr)
		if rel == "" {
			// The directory's own descriptor has been listed; listing it
			// again opens it anew.
			got, gerr = d.readDir(rel, path)
			same("readDir again", got, want, gerr, werr)
		}
	}
	for _, rel := range []string{"file", "empty", "big", "sub", "missing", "link", "dangling", "file/x"} {
		path := filepath.Join(dir, rel)
		got, gerr := d.readFile(rel, path, make([]byte, 0, 16))
		want, werr := ref.readFile(rel, path, nil)
		if len(got) == 0 && len(want) == 0 {
			got, want = nil, nil
		}
		same("readFile "+rel, got, want, gerr, werr)
		gotDir, gerr := d.isDir(rel, path)
		wantDir, werr := ref.isDir(rel, path)
		same("isDir "+rel, gotDir, wantDir, gerr, werr)
		var gotAll, wantAll []byte
		r, gerr := d.open(rel, path)
		if gerr == nil {
			gotAll, gerr = io.ReadAll(r)
			r.Close()
		}
		r, werr = ref.open(rel, path)
		if werr == nil {
			wantAll, werr = io.ReadAll(r)
			r.Close()
		}
		same("open and read "+rel, gotAll, wantAll, gerr, werr)
	}
	if _, err := s.openAgentDir(filepath.Join(dir, "file")); !sameErr(err, func() error { _, err := os.ReadDir(filepath.Join(dir, "file")); return err }()) {
		t.Errorf("openAgentDir of a file: %v", err)
	}
	if _, err := s.openAgentDir(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("openAgentDir of nothing: %v", err)
	}
}

// sameErr reports whether two errors read the same and are the same kind.
func sameErr(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Error() == b.Error() && errors.Is(a, fs.ErrNotExist) == errors.Is(b, fs.ErrNotExist)
}
