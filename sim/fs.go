package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/substrat/substrat/fsstore"
)

// ErrCrashed is returned by every FS call after the simulated machine
// crashed (see FS.CrashAfter), until FS.Crash reboots it.
var ErrCrashed = errors.New("sim: the machine has crashed")

// SectorSize is the granularity at which an unsynced append can be torn
// by a crash.
const SectorSize = 512

// FS is an in-memory fsstore.FS with a power-loss model. Every file and
// directory has a volatile state (what the running program sees) and a
// durable one (what survives a crash):
//
//   - File data (Write, Truncate) is volatile until File.Sync, or SyncDir
//     of the file's own path, copies it to the durable state.
//   - Directory entries (Create, Mkdir, Rename, RenameNoReplace, Exchange,
//     Link, Remove, RemoveAll, and the rename of WriteFileAtomic) are volatile
//     until SyncDir of the directory that holds them. The model is per
//     directory: fsyncing a file does not make its name durable, and a
//     rename across directories is durable only once both directories are
//     fsynced (with only the destination synced, the file has both names
//     after a crash; with only the source, it has neither).
//   - The Sync of OpenFSSync's handle makes every file and directory
//     durable as it is, as syncfs(2) does for a whole file system.
//   - WriteFileAtomic creates a temporary file ".<base><digits>" beside
//     the target, writes and fsyncs it, and renames it over the target; it
//     does not fsync the directory.
//
// Crash drops every volatile state, reverting each directory to its
// durable entries and each file to its durable data. With a random source
// it may instead keep part of an unsynced append, torn at SectorSize
// granularity, and possibly zero-filled, as a disk that lost power
// mid-write does.
//
// Every mutating call is a persist point and is counted (Ops). CrashAfter(k)
// makes call k+1 and everything after it fail with ErrCrashed; a hook
// (SetHook) can look at, or Clone, the file system before each one. FS is
// safe for concurrent use.
type FS struct {
	mu      sync.Mutex // guards the fields below and every inode
	root    *inode
	now     func() time.Time
	ops     int64
	limit   int64 // crash when ops reaches limit; negative: never
	crashed bool
	tempSeq int64
	hook    func(done int64, op string)
}

var _ fsstore.FS = (*FS)(nil)

// Ordered tells fsstore that a seed must replay the same calls in the
// same order: it makes its fsyncs one after another.
func (f *FS) Ordered() {}

var _ fsstore.Ordered = (*FS)(nil)

type inode struct {
	dir   bool
	mode  fs.FileMode
	ctime time.Time

	// A file's data. Slices are never written in place within their
	// length, so they are shared freely (between data and synced, and
	// between clones).
	data, synced []byte

	// A directory's entries.
	entries, durable map[string]*inode
}

// NewFS returns an empty file system whose root directory is durable.
// now stamps change times (nil: a fixed instant).
func NewFS(now func() time.Time) *FS {
	if now == nil {
		now = func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
	}
	return &FS{root: newDir(now()), now: now, limit: -1}
}

func newDir(t time.Time) *inode {
	return &inode{dir: true, mode: fs.ModeDir | 0o700, ctime: t,
		entries: map[string]*inode{}, durable: map[string]*inode{}}
}

// SetClock replaces the clock of change times.
func (f *FS) SetClock(now func() time.Time) {
	f.mu.Lock()
	f.now = now
	f.mu.Unlock()
}

// SetHook sets a function called before every mutating call with the
// number of calls done so far and the call about to run ("mkdir /a/b"). It
// runs outside the FS lock, so it may Clone the FS. nil removes it.
func (f *FS) SetHook(h func(done int64, op string)) {
	f.mu.Lock()
	f.hook = h
	f.mu.Unlock()
}

// Ops returns the number of mutating calls made so far.
func (f *FS) Ops() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ops
}

// CrashAfter makes the machine crash once k mutating calls have been made:
// call k+1 and every call after it fail with ErrCrashed. A negative k
// cancels it.
func (f *FS) CrashAfter(k int64) {
	f.mu.Lock()
	f.limit = k
	f.mu.Unlock()
}

// Crashed reports whether a call failed because of CrashAfter.
func (f *FS) Crashed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.crashed
}

func crashErr(op, path string) error {
	return &fs.PathError{Op: op, Path: path, Err: ErrCrashed}
}

// enter starts a mutating call: it runs the hook, takes the lock and
// counts the call, or fails if the machine crashed. On success the caller
// holds f.mu.
func (f *FS) enter(op, path string) error {
	f.mu.Lock()
	h := f.hook
	done := f.ops
	f.mu.Unlock()
	if h != nil {
		h(done, op+" "+path)
	}
	f.mu.Lock()
	if f.crashed || (f.limit >= 0 && f.ops >= f.limit) {
		f.crashed = true
		f.mu.Unlock()
		return crashErr(op, path)
	}
	f.ops++
	return nil
}

// read starts a non-mutating call: it takes the lock, or fails if the
// machine crashed.
func (f *FS) read(op, path string) error {
	f.mu.Lock()
	if f.crashed {
		f.mu.Unlock()
		return crashErr(op, path)
	}
	return nil
}

// split cleans an absolute path into its components.
func split(name string) ([]string, error) {
	if !filepath.IsAbs(name) {
		return nil, syscall.EINVAL
	}
	c := filepath.Clean(name)
	if c == "/" {
		return nil, nil
	}
	return strings.Split(c[1:], "/"), nil
}

// lookupLocked returns the inode at name.
func (f *FS) lookupLocked(name string) (*inode, error) {
	parts, err := split(name)
	if err != nil {
		return nil, err
	}
	n := f.root
	for _, p := range parts {
		if !n.dir {
			return nil, syscall.ENOTDIR
		}
		c := n.entries[p]
		if c == nil {
			return nil, syscall.ENOENT
		}
		n = c
	}
	return n, nil
}

// parentLocked returns the directory holding name and name's base.
func (f *FS) parentLocked(name string) (*inode, string, error) {
	parts, err := split(name)
	if err != nil {
		return nil, "", err
	}
	if len(parts) == 0 {
		return nil, "", syscall.EBUSY // the root has no parent
	}
	dir, err := f.lookupLocked("/" + strings.Join(parts[:len(parts)-1], "/"))
	if err != nil {
		return nil, "", err
	}
	if !dir.dir {
		return nil, "", syscall.ENOTDIR
	}
	return dir, parts[len(parts)-1], nil
}

func pathErr(op, path string, err error) error {
	return &fs.PathError{Op: op, Path: path, Err: err}
}

// ReadFile returns the (volatile) content of a file. As fsstore.OS's, it
// refuses a file of more than fsstore.MaxFileSize bytes (the model has no
// FIFOs, devices or symlinks to refuse).
func (f *FS) ReadFile(name string) ([]byte, error) {
	if err := f.read("open", name); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	n, err := f.lookupLocked(name)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	if n.dir {
		return nil, pathErr("read", name, syscall.EISDIR)
	}
	if len(n.data) > fsstore.MaxFileSize {
		return nil, pathErr("read", name, fmt.Errorf("%w (more than %d bytes)", fsstore.ErrFileTooLarge, fsstore.MaxFileSize))
	}
	return bytes.Clone(n.data), nil
}

// Open opens a file for reading.
func (f *FS) Open(name string) (io.ReadCloser, error) {
	data, err := f.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// ReadDir returns a directory's (volatile) entries sorted by name.
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	if err := f.read("open", name); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	n, err := f.lookupLocked(name)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	if !n.dir {
		return nil, pathErr("readdirent", name, syscall.ENOTDIR)
	}
	out := make([]fs.DirEntry, 0, len(n.entries))
	for _, k := range slices.Sorted(mapKeys(n.entries)) {
		out = append(out, fs.FileInfoToDirEntry(info(k, n.entries[k])))
	}
	return out, nil
}

// Stat describes a file or directory.
func (f *FS) Stat(name string) (fs.FileInfo, error) {
	if err := f.read("stat", name); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	n, err := f.lookupLocked(name)
	if err != nil {
		return nil, pathErr("stat", name, err)
	}
	return info(filepath.Base(name), n), nil
}

// Create creates a new file for writing; it fails if name exists.
func (f *FS) Create(name string, perm fs.FileMode) (fsstore.File, error) {
	if err := f.enter("create", name); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	dir, base, err := f.parentLocked(name)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	if dir.entries[base] != nil {
		return nil, pathErr("open", name, syscall.EEXIST)
	}
	n := &inode{mode: perm & fs.ModePerm, ctime: f.now()}
	dir.entries[base] = n
	return &file{fs: f, n: n, name: name}, nil
}

// OpenAppend opens an existing file for appending.
func (f *FS) OpenAppend(name string) (fsstore.File, error) {
	if err := f.read("open", name); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	n, err := f.lookupLocked(name)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	if n.dir {
		return nil, pathErr("open", name, syscall.EISDIR)
	}
	return &file{fs: f, n: n, name: name, append: true}, nil
}

// WriteFileAtomic replaces name: a temporary file beside it is created,
// written, fsynced and renamed over it. The directory is not fsynced.
func (f *FS) WriteFileAtomic(name string, data []byte, perm fs.FileMode) error {
	f.mu.Lock()
	f.tempSeq++
	tmp := filepath.Join(filepath.Dir(name), "."+filepath.Base(name)+strconv.FormatInt(f.tempSeq, 10))
	f.mu.Unlock()
	t, err := f.Create(tmp, perm)
	if err != nil {
		return err
	}
	_, err = t.Write(data)
	if err == nil {
		err = t.Sync()
	}
	t.Close()
	if err == nil {
		err = f.Rename(tmp, name)
	}
	if err != nil {
		f.Remove(tmp)
	}
	return err
}

// Exchange swaps the entries a and b, as renameat2(RENAME_EXCHANGE) does.
// Like a rename, the change is volatile until both directories are synced.
func (f *FS) Exchange(a, b string) error {
	if err := f.enter("exchange", a+" <-> "+b); err != nil {
		return err
	}
	defer f.mu.Unlock()
	lerr := func(err error) error { return &os.LinkError{Op: "exchange", Old: a, New: b, Err: err} }
	adir, abase, err := f.parentLocked(a)
	if err != nil {
		return lerr(err)
	}
	bdir, bbase, err := f.parentLocked(b)
	if err != nil {
		return lerr(err)
	}
	an, bn := adir.entries[abase], bdir.entries[bbase]
	if an == nil || bn == nil {
		return lerr(syscall.ENOENT)
	}
	if (an.dir && f.insideLocked(bdir, an)) || (bn.dir && f.insideLocked(adir, bn)) {
		return lerr(syscall.EINVAL)
	}
	adir.entries[abase], bdir.entries[bbase] = bn, an
	an.ctime, bn.ctime = f.now(), f.now()
	return nil
}

// Mkdir creates a directory.
func (f *FS) Mkdir(name string, perm fs.FileMode) error {
	if err := f.enter("mkdir", name); err != nil {
		return err
	}
	defer f.mu.Unlock()
	dir, base, err := f.parentLocked(name)
	if err != nil {
		return pathErr("mkdir", name, err)
	}
	if dir.entries[base] != nil {
		return pathErr("mkdir", name, syscall.EEXIST)
	}
	n := newDir(f.now())
	n.mode = fs.ModeDir | perm&fs.ModePerm
	dir.entries[base] = n
	return nil
}

// Rename renames oldname to newname, replacing a file there (or an empty
// directory, if oldname is a directory), as rename(2) does.
func (f *FS) Rename(oldname, newname string) error {
	return f.rename("rename", oldname, newname, false)
}

// RenameNoReplace renames oldname to newname, failing with an error
// satisfying errors.Is(err, fs.ErrExist) if newname exists.
func (f *FS) RenameNoReplace(oldname, newname string) error {
	return f.rename("renamenoreplace", oldname, newname, true)
}

func (f *FS) rename(op, oldname, newname string, noReplace bool) error {
	if err := f.enter(op, oldname+" -> "+newname); err != nil {
		return err
	}
	defer f.mu.Unlock()
	lerr := func(err error) error { return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err} }
	sdir, sbase, err := f.parentLocked(oldname)
	if err != nil {
		return lerr(err)
	}
	src := sdir.entries[sbase]
	if src == nil {
		return lerr(syscall.ENOENT)
	}
	ddir, dbase, err := f.parentLocked(newname)
	if err != nil {
		return lerr(err)
	}
	dst := ddir.entries[dbase]
	switch {
	case dst == src:
		if noReplace {
			return lerr(syscall.EEXIST)
		}
		return nil
	case dst != nil && noReplace:
		return lerr(syscall.EEXIST)
	case dst != nil && src.dir && !dst.dir:
		return lerr(syscall.ENOTDIR)
	case dst != nil && !src.dir && dst.dir:
		return lerr(syscall.EISDIR)
	case dst != nil && dst.dir && len(dst.entries) > 0:
		return lerr(syscall.ENOTEMPTY)
	}
	if src.dir && f.insideLocked(ddir, src) {
		return lerr(syscall.EINVAL) // into its own subtree
	}
	delete(sdir.entries, sbase)
	ddir.entries[dbase] = src
	src.ctime = f.now()
	return nil
}

// insideLocked reports whether dir is d or lies below it.
func (f *FS) insideLocked(dir, d *inode) bool {
	if dir == d {
		return true
	}
	for _, c := range d.entries {
		if c.dir && f.insideLocked(dir, c) {
			return true
		}
	}
	return false
}

// Link makes newname a second name of the file oldname.
func (f *FS) Link(oldname, newname string) error {
	if err := f.enter("link", oldname+" -> "+newname); err != nil {
		return err
	}
	defer f.mu.Unlock()
	lerr := func(err error) error { return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: err} }
	src, err := f.lookupLocked(oldname)
	if err != nil {
		return lerr(err)
	}
	if src.dir {
		return lerr(syscall.EPERM)
	}
	ddir, dbase, err := f.parentLocked(newname)
	if err != nil {
		return lerr(err)
	}
	if ddir.entries[dbase] != nil {
		return lerr(syscall.EEXIST)
	}
	ddir.entries[dbase] = src
	src.ctime = f.now()
	return nil
}

// Remove removes a file or an empty directory.
func (f *FS) Remove(name string) error {
	if err := f.enter("remove", name); err != nil {
		return err
	}
	defer f.mu.Unlock()
	dir, base, err := f.parentLocked(name)
	if err != nil {
		return pathErr("remove", name, err)
	}
	n := dir.entries[base]
	switch {
	case n == nil:
		return pathErr("remove", name, syscall.ENOENT)
	case n.dir && len(n.entries) > 0:
		return pathErr("remove", name, syscall.ENOTEMPTY)
	}
	delete(dir.entries, base)
	return nil
}

// RemoveAll removes name and everything below it. A missing name is not
// an error.
func (f *FS) RemoveAll(name string) error {
	if err := f.enter("removeall", name); err != nil {
		return err
	}
	defer f.mu.Unlock()
	dir, base, err := f.parentLocked(name)
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	if err != nil {
		return pathErr("unlinkat", name, err)
	}
	n := dir.entries[base]
	if n == nil {
		return nil
	}
	var clear func(n *inode)
	clear = func(n *inode) {
		for k, c := range n.entries {
			if c.dir {
				clear(c)
			}
			delete(n.entries, k)
		}
	}
	if n.dir {
		clear(n)
	}
	delete(dir.entries, base)
	return nil
}

// SyncDir makes a directory's entries durable (or, for a file, its data).
func (f *FS) SyncDir(name string) error {
	if err := f.enter("syncdir", name); err != nil {
		return err
	}
	defer f.mu.Unlock()
	n, err := f.lookupLocked(name)
	if err != nil {
		return pathErr("open", name, err)
	}
	if n.dir {
		n.durable = copyEntries(n.entries)
	} else {
		n.synced = n.data
	}
	return nil
}

func copyEntries(m map[string]*inode) map[string]*inode {
	out := make(map[string]*inode, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func mapKeys(m map[string]*inode) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
