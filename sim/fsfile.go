package sim

// The simulated file system's open files and the FileInfo it gives.

import (
	"io/fs"
	"os"
	"syscall"
	"time"
)

// file is a file open for writing.
type file struct {
	fs     *FS
	n      *inode
	name   string
	off    int64
	append bool
	closed bool
}

func (w *file) Write(p []byte) (int, error) {
	if err := w.fs.enter("write", w.name); err != nil {
		return 0, err
	}
	defer w.fs.mu.Unlock()
	if w.closed {
		return 0, pathErr("write", w.name, os.ErrClosed)
	}
	n := w.n
	if w.append {
		w.off = int64(len(n.data))
	}
	switch {
	case w.off == int64(len(n.data)):
		// Appending never changes bytes within the length of a slice
		// someone else holds.
		n.data = append(n.data, p...)
	default:
		end := max(int64(len(n.data)), w.off+int64(len(p)))
		d := make([]byte, end)
		copy(d, n.data)
		copy(d[w.off:], p)
		n.data = d
	}
	w.off += int64(len(p))
	n.ctime = w.fs.now()
	return len(p), nil
}

func (w *file) Truncate(size int64) error {
	if err := w.fs.enter("truncate", w.name); err != nil {
		return err
	}
	defer w.fs.mu.Unlock()
	if w.closed {
		return pathErr("truncate", w.name, os.ErrClosed)
	}
	if size < 0 {
		return pathErr("truncate", w.name, syscall.EINVAL)
	}
	n := w.n
	if size <= int64(len(n.data)) {
		n.data = n.data[:size:size] // the next append copies
	} else {
		d := make([]byte, size)
		copy(d, n.data)
		n.data = d
	}
	n.ctime = w.fs.now()
	return nil
}

func (w *file) Sync() error {
	if err := w.fs.enter("sync", w.name); err != nil {
		return err
	}
	defer w.fs.mu.Unlock()
	if w.closed {
		return pathErr("sync", w.name, os.ErrClosed)
	}
	w.n.synced = w.n.data
	return nil
}

func (w *file) Close() error {
	w.fs.mu.Lock()
	defer w.fs.mu.Unlock()
	if w.closed {
		return pathErr("close", w.name, os.ErrClosed)
	}
	w.closed = true
	return nil
}

// fileInfo describes an inode.
type fileInfo struct {
	name string
	size int64
	mode fs.FileMode
	mod  time.Time
}

func info(name string, n *inode) fileInfo {
	return fileInfo{name: name, size: int64(len(n.data)), mode: n.mode, mod: n.ctime}
}

func (i fileInfo) Name() string       { return i.name }
func (i fileInfo) Size() int64        { return i.size }
func (i fileInfo) Mode() fs.FileMode  { return i.mode }
func (i fileInfo) ModTime() time.Time { return i.mod } // the change time: fsstore reads it as such
func (i fileInfo) IsDir() bool        { return i.mode.IsDir() }
func (i fileInfo) Sys() any           { return nil }
