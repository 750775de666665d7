package fsstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"sync"

	"golang.org/x/sys/unix"
)

// agentDir reads the files of one agent directory while it is loaded. Each
// file is named twice: by its path relative to the directory, and by its
// full path, for errors and for the FS methods.
type agentDir interface {
	// readDir lists a directory, sorted by name; rel "" is the agent
	// directory itself.
	readDir(rel, path string) ([]dirEntry, error)
	// readFile reads a file into buf, which it grows as needed, and
	// returns the bytes read.
	readFile(rel, path string, buf []byte) ([]byte, error)
	open(rel, path string) (io.ReadCloser, error)
	// isDir stats a path, following symbolic links as os.Stat does.
	isDir(rel, path string) (bool, error)
	close()
}

// dirEntry is one entry of a listing: its name and its type bits.
type dirEntry struct {
	name string
	typ  fs.FileMode
}

// openAgentDir prepares to read the agent directory dir. It fails as
// os.ReadDir(dir) would if dir cannot be opened.
func (s *Store) openAgentDir(dir string) (agentDir, error) {
	if _, ok := s.fs.(OS); !ok {
		return fsAgentDir{s.fs}, nil
	}
	fd, err := openRaw(unix.AT_FDCWD, dir, dir, unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	return &osAgentDir{fd: fd}, nil
}

// fsAgentDir reads through the FS methods, by full path.
type fsAgentDir struct{ fsys FS }

func (d fsAgentDir) readDir(_, path string) ([]dirEntry, error) {
	entries, err := d.fsys.ReadDir(path)
	if err != nil || len(entries) == 0 {
		return nil, err
	}
	out := make([]dirEntry, len(entries))
	for i, e := range entries {
		out[i] = dirEntry{e.Name(), e.Type()}
	}
	return out, nil
}

func (d fsAgentDir) readFile(_, path string, _ []byte) ([]byte, error) { return d.fsys.ReadFile(path) }

func (d fsAgentDir) open(_, path string) (io.ReadCloser, error) { return d.fsys.Open(path) }

func (d fsAgentDir) isDir(_, path string) (bool, error) {
	fi, err := d.fsys.Stat(path)
	if err != nil {
		return false, err
	}
	return fi.IsDir(), nil
}

func (fsAgentDir) close() {}

// osAgentDir reads with system calls relative to the directory's
// descriptor.
type osAgentDir struct {
	fd     int
	listed bool // fd's own position is at the end of its listing
}

func (d *osAgentDir) readDir(rel, path string) ([]dirEntry, error) {
	if rel == "" {
		if !d.listed {
			d.listed = true
			return listRaw(d.fd, path)
		}
		rel = "."
	}
	fd, err := openRaw(d.fd, rel, path, unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return listRaw(fd, path)
}

func (d *osAgentDir) readFile(rel, path string, buf []byte) ([]byte, error) {
	fd, err := openRaw(d.fd, rel, path, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readAll(fd, path, buf, MaxFileSize)
}

// readAll reads the open file fd (path is its name, for errors) to its end
// into buf, which it grows as needed: at most max bytes, or it fails with
// ErrFileTooLarge.
func readAll(fd int, path string, buf []byte, max int64) ([]byte, error) {
	f := rawFile{fd: fd, name: path}
	buf = buf[:0]
	for {
		if int64(len(buf)) > max {
			return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (more than %d bytes)", ErrFileTooLarge, max)}
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		// Never read more than one byte past max: a file that grows
		// without end costs max+1 bytes, not more.
		room := buf[len(buf):cap(buf)]
		if left := max + 1 - int64(len(buf)); int64(len(room)) > left {
			room = room[:left]
		}
		n, err := f.Read(room)
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (d *osAgentDir) open(rel, path string) (io.ReadCloser, error) {
	fd, err := openRaw(d.fd, rel, path, 0)
	if err != nil {
		return nil, err
	}
	return &rawFile{fd: fd, name: path}, nil
}

func (d *osAgentDir) isDir(rel, path string) (bool, error) {
	var st unix.Stat_t
	for {
		err := unix.Fstatat(d.fd, rel, &st, 0)
		if err == nil {
			return st.Mode&unix.S_IFMT == unix.S_IFDIR, nil
		}
		if err != unix.EINTR {
			return false, &fs.PathError{Op: "stat", Path: path, Err: err}
		}
	}
}

func (d *osAgentDir) close() { unix.Close(d.fd) }

// openRaw opens rel (relative to dirfd) for reading, as os.Open opens
// path; flags adds to O_RDONLY|O_CLOEXEC. A file (flags without
// O_DIRECTORY) is opened without following a symlink and without blocking
// (a FIFO would block open and read forever), and must be a regular file:
// anything else fails with ErrNotRegular, so that a FIFO, a device or a
// symlink to /dev/zero put in the store by hand is reported as damage
// rather than wedging the reader.
func openRaw(dirfd int, rel, path string, flags int) (int, error) {
	file := flags&unix.O_DIRECTORY == 0
	if file {
		flags |= unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY
	}
	for {
		fd, err := unix.Openat(dirfd, rel, unix.O_RDONLY|unix.O_CLOEXEC|flags, 0)
		if err == unix.EINTR {
			continue
		}
		if err == unix.ELOOP && file {
			return -1, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: a symlink", ErrNotRegular)}
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		if !file {
			return fd, nil
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, &fs.PathError{Op: "stat", Path: path, Err: err}
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			unix.Close(fd)
			return -1, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: %s", ErrNotRegular, typeName(modeType(st.Mode)))}
		}
		return fd, nil
	}
}

// TypeName names the type of a file that is not a regular one, for
// messages: "a FIFO", "a symlink", "a directory"...
func TypeName(m fs.FileMode) string { return typeName(m.Type()) }

// typeName names the type bits of a file mode, for messages.
func typeName(t fs.FileMode) string {
	switch {
	case t&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeCharDevice != 0:
		return "a character device"
	case t&fs.ModeDevice != 0:
		return "a block device"
	case t&fs.ModeSymlink != 0:
		return "a symlink"
	case t&fs.ModeDir != 0:
		return "a directory"
	}
	return "not a regular file"
}

// direntBufs holds the buffers listRaw reads directory entries into.
var direntBufs = sync.Pool{New: func() any { b := make([]byte, 8<<10); return &b }}

// listRaw lists the open directory fd (path is its name, for errors) as
// os.ReadDir does: sorted by name, without "." and "..", each entry with
// its type, asking the file system with lstat where the listing does not
// say.
func listRaw(fd int, path string) ([]dirEntry, error) {
	bufp := direntBufs.Get().(*[]byte)
	defer direntBufs.Put(bufp)
	buf := *bufp
	var out []dirEntry
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "readdirent", Path: path, Err: err}
		}
		if n <= 0 {
			break
		}
		for b := buf[:n]; len(b) > 0; {
			// struct linux_dirent64: d_ino u64, d_off i64, d_reclen u16,
			// d_type u8, then the name, NUL-terminated.
			const nameOff = 19
			if len(b) < nameOff {
				break
			}
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < nameOff || reclen > len(b) {
				break
			}
			rec := b[:reclen]
			b = b[reclen:]
			if binary.NativeEndian.Uint64(rec[0:8]) == 0 {
				continue // a deleted entry
			}
			name := rec[nameOff:]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if string(name) == "." || string(name) == ".." {
				continue
			}
			e := dirEntry{name: string(name)}
			switch rec[18] {
			case unix.DT_REG:
			case unix.DT_DIR:
				e.typ = fs.ModeDir
			case unix.DT_LNK:
				e.typ = fs.ModeSymlink
			case unix.DT_FIFO:
				e.typ = fs.ModeNamedPipe
			case unix.DT_SOCK:
				e.typ = fs.ModeSocket
			case unix.DT_CHR:
				e.typ = fs.ModeDevice | fs.ModeCharDevice
			case unix.DT_BLK:
				e.typ = fs.ModeDevice
			default: // DT_UNKNOWN
				var st unix.Stat_t
				if err := unix.Fstatat(fd, e.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					if err == unix.ENOENT {
						continue // removed meanwhile, as os.ReadDir skips it
					}
					return nil, &fs.PathError{Op: "lstat", Path: filepath.Join(path, e.name), Err: err}
				}
				e.typ = modeType(st.Mode)
			}
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// modeType is the fs.FileMode type bits of a stat mode.
func modeType(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	}
	return 0
}

// scanOpen opens name for reading, as fsys.Open does, with open alone
// on the real file system.
func scanOpen(fsys FS, name string) (io.ReadCloser, error) {
	if _, ok := fsys.(OS); !ok {
		return fsys.Open(name)
	}
	fd, err := openRaw(unix.AT_FDCWD, name, name, 0)
	if err != nil {
		return nil, err
	}
	return &rawFile{fd: fd, name: name}, nil
}

// rawFile is a file opened by openRaw, read as an *os.File reads.
type rawFile struct {
	fd   int
	name string
}

func (f *rawFile) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, err := unix.Read(f.fd, p)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, &fs.PathError{Op: "read", Path: f.name, Err: err}
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// Seek sets the offset of the next Read.
func (f *rawFile) Seek(offset int64, whence int) (int64, error) {
	n, err := unix.Seek(f.fd, offset, whence)
	if err != nil {
		return 0, &fs.PathError{Op: "seek", Path: f.name, Err: err}
	}
	return n, nil
}

func (f *rawFile) Close() error {
	if err := unix.Close(f.fd); err != nil {
		return &fs.PathError{Op: "close", Path: f.name, Err: err}
	}
	return nil
}

// snapBufs holds the buffers session.json is read into.
var snapBufs = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}
