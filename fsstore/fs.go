package fsstore

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
	"golang.org/x/sys/unix"
)

// FS is the seam through which fsstore performs all of its file I/O.
//
// The production implementation is OS, a thin layer over package os. The
// simulation package implements FS with an in-memory power-loss model, so
// every method here is a point where durability is either gained or lost:
//
//   - Data written through a File is durable only after File.Sync returns.
//   - A directory entry created, renamed or removed by Create, Mkdir,
//     Rename, RenameNoReplace, Exchange, Link, Remove, RemoveAll or
//     WriteFileAtomic is durable only after SyncDir of the directory that
//     holds it returns.
//   - FSSync.Sync makes durable, at once, every file's data and every
//     directory entry of the whole file system: what a File.Sync of each
//     file and a SyncDir of each directory would. It is the barrier of
//     group commit (group.go).
//   - WriteFileAtomic writes a temporary file in the target's directory,
//     fsyncs it and renames it over the target. It does not fsync the
//     directory; callers do (see writeFileDurable).
//
// Paths are plain OS paths built by Layout. Methods return errors that
// satisfy errors.Is(err, fs.ErrNotExist) and fs.ErrExist like package os.
type FS interface {
	ReadFile(name string) ([]byte, error)
	Open(name string) (io.ReadCloser, error)
	// ReadDir returns the entries of a directory sorted by name.
	ReadDir(name string) ([]fs.DirEntry, error)
	Stat(name string) (fs.FileInfo, error)

	// Create creates a new file for writing; it fails if name exists.
	Create(name string, perm fs.FileMode) (File, error)
	// OpenAppend opens an existing file for appending.
	OpenAppend(name string) (File, error)
	WriteFileAtomic(name string, data []byte, perm fs.FileMode) error
	Mkdir(name string, perm fs.FileMode) error
	Rename(oldname, newname string) error
	// Exchange swaps the files (or directories) a and b atomically, both
	// of which must exist. It fails with an error satisfying
	// errors.Is(err, ErrNoExchange) where the file system cannot.
	Exchange(a, b string) error
	// RenameNoReplace renames oldname to newname, failing with an error
	// satisfying errors.Is(err, fs.ErrExist) if newname exists.
	RenameNoReplace(oldname, newname string) error
	// Link makes newname a second name of the file oldname; it fails
	// with an error satisfying errors.Is(err, fs.ErrExist) if newname
	// exists.
	Link(oldname, newname string) error
	Remove(name string) error
	RemoveAll(name string) error
	SyncDir(name string) error
	// OpenFSSync returns a handle on the whole file system that holds
	// name, any file or directory on it, for syncfs(2).
	OpenFSSync(name string) (FSSync, error)
}

// FSSync is a handle on a whole file system.
type FSSync interface {
	// Sync makes every file and directory of the file system durable.
	// It fails if the data of any file of the file system failed to be
	// written back since the handle was opened or last reported such a
	// failure: the failure need not be in a file the caller wrote, and
	// it is reported once.
	Sync() error
	Close() error
}

// Ordered is implemented by an FS whose mutating calls must come in the
// same order run after run: the simulation replays a seed and crashes it
// at each call in turn. On it, the store makes one after another the
// fsyncs it makes at once on others (group.go).
type Ordered interface{ Ordered() }

// File is a file open for writing through the FS seam.
type File interface {
	Write(p []byte) (int, error)
	Truncate(size int64) error
	Sync() error
	Close() error
}

// OS is the FS backed by the real file system.
type OS struct{}

var _ FS = OS{}

// The size caps of the files read from the home (see the package
// comment, "Files that are not what they should be"): a file that grows
// without end cannot make a reader take all memory.
const (
	// MaxFileSize bounds what ReadFile reads of one file of the store
	// (session.json with its state blob, a message, workspace.json).
	MaxFileSize = 64 << 20
	// MaxJSONSize bounds the other JSON files of the home: config.json,
	// recovery.json, providers.json, a workspace's git marker and the
	// session-id files of providers/<name>/.
	MaxJSONSize = 16 << 20
)

// ReadFile reads a regular file as ReadRegular does, at most MaxFileSize
// bytes.
func (OS) ReadFile(name string) ([]byte, error) { return ReadRegular(name, MaxFileSize) }

// ReadRegular reads the file at path as the daemon and the CLI read every
// file of the home that a person or an agent could replace: opened
// without following a symlink and without blocking (a FIFO would block
// open and read forever), it must be a regular file, or the error wraps
// ErrNotRegular and says what it is ("a FIFO", "a symlink", "a
// directory"...); and it is read up to max bytes, or the error wraps
// ErrFileTooLarge. Errors are *fs.PathError naming path; a missing file
// satisfies errors.Is(err, fs.ErrNotExist).
func ReadRegular(path string, max int64) ([]byte, error) {
	fd, err := openRaw(unix.AT_FDCWD, path, path, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readAll(fd, path, nil, max)
}

// OpenAppendRegular opens the file at path for appending, creating it
// with perm if it is missing, as a log is opened: without following a
// symlink and without blocking (a FIFO with no reader would block open),
// and it must be a regular file (ErrNotRegular).
func OpenAppendRegular(path string, perm fs.FileMode) (*os.File, error) {
	return openAppend(path, unix.O_CREAT, perm)
}

// openAppend is OpenAppendRegular, creating the file only with flags
// O_CREAT.
func openAppend(path string, flags int, perm fs.FileMode) (*os.File, error) {
	var fd int
	for {
		var err error
		fd, err = unix.Open(path, unix.O_WRONLY|unix.O_APPEND|flags|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, uint32(perm.Perm()))
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.ELOOP:
			return nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: a symlink", ErrNotRegular)}
		case err == unix.ENXIO: // a FIFO without a reader
			return nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: a FIFO", ErrNotRegular)}
		case err == unix.EISDIR:
			return nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: a directory", ErrNotRegular)}
		case err != nil:
			return nil, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		break
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: %s", ErrNotRegular, typeName(modeType(st.Mode)))}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// OpenRegular opens the file at path for reading as ReadRegular does,
// for a reader that wants only part of it (the end of a log).
func OpenRegular(path string) (*os.File, error) {
	fd, err := openRaw(unix.AT_FDCWD, path, path, 0)
	if err != nil {
		return nil, err
	}
	// A regular file: reads never block, so the descriptor can go back
	// to blocking mode and be an ordinary *os.File.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// Open opens a regular file for reading, as ReadFile would.
func (OS) Open(name string) (io.ReadCloser, error) { return scanOpen(OS{}, name) }

func (OS) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }
func (OS) Stat(name string) (fs.FileInfo, error)      { return os.Stat(name) }
func (OS) Mkdir(name string, perm fs.FileMode) error  { return os.Mkdir(name, perm) }
func (OS) Rename(oldname, newname string) error       { return os.Rename(oldname, newname) }
func (OS) Remove(name string) error                   { return os.Remove(name) }
func (OS) Link(oldname, newname string) error         { return os.Link(oldname, newname) }
func (OS) RemoveAll(name string) error                { return os.RemoveAll(name) }

func (OS) Create(name string, perm fs.FileMode) (File, error) {
	return os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
}

// OpenAppend opens an existing regular file for appending, as
// OpenAppendRegular does: a FIFO (which would block the open), a device or
// a symlink put in place of events.jsonl or transcript.txt is refused
// (ErrNotRegular).
func (OS) OpenAppend(name string) (File, error) {
	f, err := openAppend(name, 0, 0)
	if err != nil {
		return nil, err // not a typed nil
	}
	return f, nil
}

func (OS) WriteFileAtomic(name string, data []byte, perm fs.FileMode) error {
	return renameio.WriteFile(name, data, perm, renameio.WithTempDir(filepath.Dir(name)))
}

// Exchange uses renameat2(RENAME_EXCHANGE).
func (OS) Exchange(a, b string) error {
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS):
		return &os.LinkError{Op: "exchange", Old: a, New: b, Err: ErrNoExchange}
	}
	return &os.LinkError{Op: "exchange", Old: a, New: b, Err: err}
}

// RenameNoReplace uses renameat2(RENAME_NOREPLACE). File systems that do not
// support the flag fall back to link(2) and unlink(2), which also never
// overwrite.
func (OS) RenameNoReplace(oldname, newname string) error {
	err := unix.Renameat2(unix.AT_FDCWD, oldname, unix.AT_FDCWD, newname, unix.RENAME_NOREPLACE)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	if err := os.Link(oldname, newname); err != nil {
		return err
	}
	return os.Remove(oldname)
}

// SyncDir fsyncs a directory. It is opened with O_DIRECTORY: a FIFO put
// where the directory was fails at once (ENOTDIR) instead of blocking.
func (OS) SyncDir(name string) error {
	d, err := os.OpenFile(name, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// OpenFSSync opens name as the descriptor that syncfs(2) is called on.
// Since Linux 5.8 syncfs reports the write-back errors of the file system
// since the descriptor was opened (errseq), each once.
func (OS) OpenFSSync(name string) (FSSync, error) {
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return &osFSSync{fd: fd, name: name}, nil
}

type osFSSync struct {
	fd   int
	name string
}

func (s *osFSSync) Sync() error {
	if err := unix.Syncfs(s.fd); err != nil {
		return &fs.PathError{Op: "syncfs", Path: s.name, Err: err}
	}
	return nil
}

func (s *osFSSync) Close() error { return unix.Close(s.fd) }

var errNotExist = fs.ErrNotExist

func dirOf(name string) string { return filepath.Dir(name) }

var errExist = fs.ErrExist
