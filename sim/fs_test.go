package sim

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/substrat/substrat/fsstore"
)

// must fails the test on an error.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// write creates name with data through f, fsyncing the data if sync.
func write(t *testing.T, f fsstore.FS, name, data string, sync bool) {
	t.Helper()
	w, err := f.Create(name, 0o600)
	must(t, err)
	_, err = w.Write([]byte(data))
	must(t, err)
	if sync {
		must(t, w.Sync())
	}
	must(t, w.Close())
}

// content returns the file's content, or "<none>".
func content(f fsstore.FS, name string) string {
	b, err := f.ReadFile(name)
	if err != nil {
		return "<none>"
	}
	return string(b)
}

func newTestFS(t *testing.T) *FS {
	f := NewFS(nil)
	must(t, f.Mkdir("/d", 0o700))
	must(t, f.SyncDir("/"))
	return f
}

func TestFSUnsyncedDataIsLost(t *testing.T) {
	f := newTestFS(t)
	write(t, f, "/d/a", "synced", true)
	write(t, f, "/d/b", "not synced", false)
	must(t, f.SyncDir("/d"))
	w, err := f.OpenAppend("/d/a")
	must(t, err)
	_, err = w.Write([]byte(" and more"))
	must(t, err)
	if got := content(f, "/d/a"); got != "synced and more" {
		t.Fatalf("before the crash the program sees %q", got)
	}
	f.Crash(nil)
	if got := content(f, "/d/a"); got != "synced" {
		t.Errorf("a: %q after the crash, want the synced part only", got)
	}
	if got := content(f, "/d/b"); got != "" {
		t.Errorf("b: %q after the crash, want an empty file (its name was synced, its data was not)", got)
	}
}

func TestFSFileSyncDoesNotMakeItsNameDurable(t *testing.T) {
	f := newTestFS(t)
	write(t, f, "/d/a", "data", true)
	f.Crash(nil)
	if _, err := f.Stat("/d/a"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a file whose directory was never fsynced survived the crash: %v", err)
	}
}

func TestFSNewDirectoryNeedsItsParentSynced(t *testing.T) {
	f := newTestFS(t)
	must(t, f.Mkdir("/d/sub", 0o700))
	write(t, f, "/d/sub/a", "data", true)
	must(t, f.SyncDir("/d/sub")) // the file's name, but not sub's own
	f.Crash(nil)
	if _, err := f.Stat("/d/sub"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("sub survived without /d being fsynced: %v", err)
	}
}

func TestFSRenameDurability(t *testing.T) {
	setup := func(t *testing.T) *FS {
		f := newTestFS(t)
		must(t, f.Mkdir("/e", 0o700))
		must(t, f.SyncDir("/"))
		write(t, f, "/d/a", "A", true)
		must(t, f.SyncDir("/d"))
		must(t, f.Rename("/d/a", "/e/a"))
		return f
	}
	names := func(f *FS) string {
		var out []string
		for _, p := range []string{"/d/a", "/e/a"} {
			if content(f, p) == "A" {
				out = append(out, p)
			}
		}
		return strings.Join(out, " ")
	}
	for _, c := range []struct {
		name string
		sync []string
		want string
	}{
		{"no sync", nil, "/d/a"},
		{"destination synced", []string{"/e"}, "/d/a /e/a"}, // two names, as after an interrupted rename
		{"source synced", []string{"/d"}, ""},               // neither: the reason to sync both
		{"both synced", []string{"/e", "/d"}, "/e/a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t)
			for _, d := range c.sync {
				must(t, f.SyncDir(d))
			}
			f.Crash(nil)
			if got := names(f); got != c.want {
				t.Errorf("after the crash the file is at %q, want %q", got, c.want)
			}
		})
	}
}

func TestFSDirectoryRenamedWithOnlyDestinationSyncedKeepsOneName(t *testing.T) {
	for seed := range uint64(20) {
		f := newTestFS(t)
		must(t, f.Mkdir("/e", 0o700))
		must(t, f.Mkdir("/d/x", 0o700))
		write(t, f, "/d/x/file", "F", true)
		must(t, f.SyncDir("/d/x"))
		must(t, f.SyncDir("/d"))
		must(t, f.SyncDir("/"))
		must(t, f.Rename("/d/x", "/e/x"))
		must(t, f.SyncDir("/e"))
		f.Crash(rand.New(rand.NewPCG(seed, 1)))
		in := 0
		for _, p := range []string{"/d/x/file", "/e/x/file"} {
			if content(f, p) == "F" {
				in++
			}
		}
		if in != 1 {
			t.Fatalf("seed %d: the directory has %d names after the crash, want 1", seed, in)
		}
	}
}

func TestFSWriteFileAtomic(t *testing.T) {
	f := newTestFS(t)
	write(t, f, "/d/s", "old", true)
	must(t, f.SyncDir("/d"))
	must(t, f.WriteFileAtomic("/d/s", []byte("new"), 0o600))
	if got := content(f, "/d/s"); got != "new" {
		t.Fatalf("got %q", got)
	}
	g := f.Clone()
	f.Crash(nil)
	if got := content(f, "/d/s"); got != "old" {
		t.Errorf("without a directory fsync the replace must not be durable; got %q", got)
	}
	must(t, g.SyncDir("/d"))
	g.Crash(nil)
	if got := content(g, "/d/s"); got != "new" {
		t.Errorf("after the directory fsync, got %q", got)
	}
	entries, err := g.ReadDir("/d")
	must(t, err)
	if len(entries) != 1 {
		t.Errorf("the temporary file is left: %v", entries)
	}

	// An exchange swaps two names; like a rename, it is volatile until
	// the directory is synced.
	must(t, g.WriteFileAtomic("/d/t", []byte("other"), 0o600))
	must(t, g.SyncDir("/d"))
	must(t, g.Exchange("/d/s", "/d/t"))
	if content(g, "/d/s") != "other" || content(g, "/d/t") != "new" {
		t.Errorf("after Exchange: s=%q t=%q", content(g, "/d/s"), content(g, "/d/t"))
	}
	if err := g.Exchange("/d/s", "/d/none"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Exchange with a missing name: %v", err)
	}
	c := g.Clone()
	c.Crash(nil)
	if content(c, "/d/s") != "new" || content(c, "/d/t") != "other" {
		t.Errorf("an unsynced exchange survived a crash: s=%q t=%q", content(c, "/d/s"), content(c, "/d/t"))
	}
}

func TestFSRemoveAndLinkNeedDirectorySync(t *testing.T) {
	f := newTestFS(t)
	must(t, f.Mkdir("/d/new", 0o700))
	must(t, f.Mkdir("/d/cur", 0o700))
	must(t, f.SyncDir("/d"))
	write(t, f, "/d/new/m", "M", true)
	must(t, f.SyncDir("/d/new"))
	must(t, f.Link("/d/new/m", "/d/cur/m"))
	must(t, f.Remove("/d/new/m"))
	g := f.Clone()
	f.Crash(nil)
	if content(f, "/d/new/m") != "M" || content(f, "/d/cur/m") != "<none>" {
		t.Errorf("without syncs: new/m %q, cur/m %q; want the state before link and remove", content(f, "/d/new/m"), content(f, "/d/cur/m"))
	}
	must(t, g.SyncDir("/d/cur"))
	must(t, g.SyncDir("/d/new"))
	g.Crash(nil)
	if content(g, "/d/new/m") != "<none>" || content(g, "/d/cur/m") != "M" {
		t.Errorf("with syncs: new/m %q, cur/m %q", content(g, "/d/new/m"), content(g, "/d/cur/m"))
	}
}

func TestFSCrashAfter(t *testing.T) {
	f := newTestFS(t) // 2 ops
	if n := f.Ops(); n != 2 {
		t.Fatalf("Ops = %d after mkdir and syncdir", n)
	}
	var seen []int64
	f.SetHook(func(done int64, op string) { seen = append(seen, done) })
	f.CrashAfter(4)
	w, err := f.Create("/d/a", 0o600) // op 3
	must(t, err)
	_, err = w.Write([]byte("x")) // op 4
	must(t, err)
	if err := w.Sync(); !errors.Is(err, ErrCrashed) { // op 5: the machine is down
		t.Fatalf("op 5 after CrashAfter(4): %v", err)
	}
	if !f.Crashed() {
		t.Fatal("Crashed() = false")
	}
	for _, err := range []error{f.Mkdir("/x", 0o700), f.SyncDir("/d"), f.Remove("/d/a")} {
		if !errors.Is(err, ErrCrashed) {
			t.Errorf("a call after the crash returned %v", err)
		}
	}
	if _, err := f.ReadFile("/d/a"); !errors.Is(err, ErrCrashed) {
		t.Errorf("a read after the crash returned %v", err)
	}
	if n := f.Ops(); n != 4 {
		t.Errorf("Ops = %d, want 4", n)
	}
	if !slices.Equal(seen[:3], []int64{2, 3, 4}) {
		t.Errorf("hook saw %v", seen)
	}
	f.Crash(nil)
	if f.Crashed() {
		t.Error("still crashed after the reboot")
	}
	must(t, f.Mkdir("/d/after", 0o700))
}

func TestFSTornAppend(t *testing.T) {
	synced := bytes.Repeat([]byte("s"), 700)
	added := bytes.Repeat([]byte("n"), 1500)
	kinds := map[string]bool{}
	for seed := range uint64(400) {
		f := newTestFS(t)
		write(t, f, "/d/log", string(synced), true)
		must(t, f.SyncDir("/d"))
		w, err := f.OpenAppend("/d/log")
		must(t, err)
		_, err = w.Write(added)
		must(t, err)
		f.Crash(rand.New(rand.NewPCG(seed, 2)))
		got, err := f.ReadFile("/d/log")
		must(t, err)
		if !bytes.HasPrefix(got, synced) {
			t.Fatalf("seed %d: synced data was damaged", seed)
		}
		rest := got[len(synced):]
		end := len(synced)
		for end < len(got) && got[end] == 'n' {
			end++
		}
		kept := end - len(synced)
		switch {
		case len(rest) == 0:
			kinds["dropped"] = true
		case end != len(synced) && end%SectorSize != 0 && end != len(synced)+len(added):
			t.Fatalf("seed %d: the kept part ends at %d, not at a sector boundary", seed, end)
		case len(got) > end && (len(got) != len(synced)+len(added) || bytes.Count(got[end:], []byte{0}) != len(got)-end):
			t.Fatalf("seed %d: after the kept %d bytes come %d bytes that are not a zero fill up to the written length", seed, kept, len(got)-end)
		case len(got) > end:
			kinds["zero-filled"] = true
		case kept == len(added):
			kinds["kept"] = true
		default:
			kinds["torn"] = true
		}
	}
	for _, k := range []string{"dropped", "kept", "torn", "zero-filled"} {
		if !kinds[k] {
			t.Errorf("400 crashes never left the append %s", k)
		}
	}
}

func TestFSCloneIsIndependent(t *testing.T) {
	f := newTestFS(t)
	write(t, f, "/d/a", "one", true)
	must(t, f.SyncDir("/d"))
	g := f.Clone()
	w, err := f.OpenAppend("/d/a")
	must(t, err)
	_, err = w.Write([]byte(" two"))
	must(t, err)
	wg, err := g.OpenAppend("/d/a")
	must(t, err)
	_, err = wg.Write([]byte(" three"))
	must(t, err)
	must(t, g.Remove("/d/a"))
	if got := content(f, "/d/a"); got != "one two" {
		t.Errorf("original: %q", got)
	}
	if got := content(g, "/d/a"); got != "<none>" {
		t.Errorf("clone: %q", got)
	}
}

// TestFSConformance runs the same calls against the real file system and
// the simulated one: what they return (by error class) and the trees they
// leave must match.
func TestFSConformance(t *testing.T) {
	type call struct {
		name string
		do   func(f fsstore.FS, root string) error
	}
	p := filepath.Join
	calls := []call{
		{"mkdir", func(f fsstore.FS, r string) error { return f.Mkdir(p(r, "a"), 0o700) }},
		{"mkdir again", func(f fsstore.FS, r string) error { return f.Mkdir(p(r, "a"), 0o700) }},
		{"mkdir under a missing dir", func(f fsstore.FS, r string) error { return f.Mkdir(p(r, "x", "y"), 0o700) }},
		{"create", func(f fsstore.FS, r string) error {
			w, err := f.Create(p(r, "a", "f"), 0o600)
			if err != nil {
				return err
			}
			w.Write([]byte("hello"))
			w.Sync()
			return w.Close()
		}},
		{"create again", func(f fsstore.FS, r string) error { _, err := f.Create(p(r, "a", "f"), 0o600); return err }},
		{"create under a file", func(f fsstore.FS, r string) error { _, err := f.Create(p(r, "a", "f", "g"), 0o600); return err }},
		{"append to a missing file", func(f fsstore.FS, r string) error { _, err := f.OpenAppend(p(r, "a", "nope")); return err }},
		{"append", func(f fsstore.FS, r string) error {
			w, err := f.OpenAppend(p(r, "a", "f"))
			if err != nil {
				return err
			}
			w.Write([]byte(" world"))
			w.Truncate(8)
			return w.Close()
		}},
		{"link", func(f fsstore.FS, r string) error { return f.Link(p(r, "a", "f"), p(r, "a", "l")) }},
		{"link onto a name", func(f fsstore.FS, r string) error { return f.Link(p(r, "a", "f"), p(r, "a", "l")) }},
		{"link a missing file", func(f fsstore.FS, r string) error { return f.Link(p(r, "a", "nope"), p(r, "a", "m")) }},
		{"rename no replace onto a name", func(f fsstore.FS, r string) error { return f.RenameNoReplace(p(r, "a", "f"), p(r, "a", "l")) }},
		{"rename no replace", func(f fsstore.FS, r string) error { return f.RenameNoReplace(p(r, "a", "f"), p(r, "a", "g")) }},
		{"rename a missing file", func(f fsstore.FS, r string) error { return f.Rename(p(r, "a", "f"), p(r, "a", "h")) }},
		{"rename over a file", func(f fsstore.FS, r string) error { return f.Rename(p(r, "a", "g"), p(r, "a", "l")) }},
		{"mkdir b", func(f fsstore.FS, r string) error { return f.Mkdir(p(r, "b"), 0o700) }},
		{"rename a dir onto a non-empty dir", func(f fsstore.FS, r string) error { return f.Rename(p(r, "b"), p(r, "a")) }},
		{"rename a dir into itself", func(f fsstore.FS, r string) error { return f.Rename(p(r, "a"), p(r, "a", "sub")) }},
		{"remove a non-empty dir", func(f fsstore.FS, r string) error { return f.Remove(p(r, "a")) }},
		{"remove a missing file", func(f fsstore.FS, r string) error { return f.Remove(p(r, "a", "nope")) }},
		{"write atomically", func(f fsstore.FS, r string) error { return f.WriteFileAtomic(p(r, "b", "s"), []byte("v1"), 0o600) }},
		{"write atomically again", func(f fsstore.FS, r string) error { return f.WriteFileAtomic(p(r, "b", "s"), []byte("v2"), 0o600) }},
		{"sync a dir", func(f fsstore.FS, r string) error { return f.SyncDir(p(r, "b")) }},
		{"sync a missing dir", func(f fsstore.FS, r string) error { return f.SyncDir(p(r, "nope")) }},
		{"read a dir", func(f fsstore.FS, r string) error { _, err := f.ReadDir(p(r, "a", "l")); return err }},
		{"remove all of a missing dir", func(f fsstore.FS, r string) error { return f.RemoveAll(p(r, "nope")) }},
		{"remove all", func(f fsstore.FS, r string) error { return f.RemoveAll(p(r, "a")) }},
	}
	class := func(err error) string {
		switch {
		case err == nil:
			return "ok"
		case errors.Is(err, fs.ErrNotExist):
			return "not exist"
		case errors.Is(err, fs.ErrExist), errors.Is(err, syscall.ENOTEMPTY):
			return "exist"
		case errors.Is(err, syscall.ENOTDIR):
			return "not a dir"
		case errors.Is(err, syscall.EINVAL):
			return "invalid"
		}
		return "other: " + err.Error()
	}
	tree := func(f fsstore.FS, root string) []string {
		var out []string
		var walk func(dir string)
		walk = func(dir string) {
			entries, err := f.ReadDir(dir)
			if err != nil {
				return
			}
			for _, e := range entries {
				path := p(dir, e.Name())
				rel := strings.TrimPrefix(path, root)
				if e.IsDir() {
					out = append(out, rel+"/")
					walk(path)
					continue
				}
				r, err := f.Open(path)
				if err != nil {
					continue
				}
				b, _ := io.ReadAll(r)
				r.Close()
				out = append(out, rel+"="+string(b))
			}
		}
		walk(root)
		return out
	}
	real := t.TempDir()
	sim := NewFS(nil)
	simRoot := "/root"
	must(t, sim.Mkdir(simRoot, 0o700))
	for _, c := range calls {
		want, got := class(c.do(fsstore.OS{}, real)), class(c.do(sim, simRoot))
		if want != got {
			t.Errorf("%s: the real file system says %s, the simulation %s", c.name, want, got)
		}
		if w, g := tree(fsstore.OS{}, real), tree(sim, simRoot); !slices.Equal(w, g) {
			t.Fatalf("after %s the trees differ:\nreal %v\nsim  %v", c.name, w, g)
		}
	}
	if _, err := os.Stat(real); err != nil {
		t.Fatal(err)
	}
}

// TestFSSyncFSMakesEverythingDurable: syncfs makes every file's data and
// every directory entry durable, new directories and renames included,
// and what was written after it is not.
func TestFSSyncFSMakesEverythingDurable(t *testing.T) {
	f := newTestFS(t)
	must(t, f.Mkdir("/d/sub", 0o700))
	write(t, f, "/d/sub/a", "a", false)
	write(t, f, "/d/b", "b", false)
	must(t, f.Rename("/d/b", "/d/sub/b"))
	h, err := f.OpenFSSync("/d")
	must(t, err)
	must(t, h.Sync())
	write(t, f, "/d/c", "after", true) // the file, but not its name
	f.Crash(nil)
	for path, want := range map[string]string{"/d/sub/a": "a", "/d/sub/b": "b"} {
		if got := content(f, path); got != want {
			t.Errorf("%s: %q after the crash, want %q", path, got, want)
		}
	}
	for _, gone := range []string{"/d/b", "/d/c"} {
		if _, err := f.Stat(gone); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s survived the crash: %v", gone, err)
		}
	}
}
