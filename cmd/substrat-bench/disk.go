package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"

	"github.com/substrat/substrat/fsstore"
)

func (b *benchRun) diskLimits() error {
	dir := filepath.Join(b.dir, "disk")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	line := b.pay.Line
	base := dir // a new directory for each measurement
	fsyncOp := func(w int) (func() error, func(), error) {
		f, err := os.OpenFile(filepath.Join(base, fmt.Sprintf("w%02d.jsonl", w)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, nil, err
		}
		return func() error {
			if _, err := f.Write(line); err != nil {
				return err
			}
			return f.Sync()
		}, func() { f.Close() }, nil
	}
	data := b.pay.Session
	replaceOp := func(w int) (func() error, func(), error) {
		d := filepath.Join(base, fmt.Sprintf("r%02d", w))
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, nil, err
		}
		df, err := os.Open(d)
		if err != nil {
			return nil, nil, err
		}
		target, tmp := filepath.Join(d, "session.json"), filepath.Join(d, ".session.json.tmp")
		return func() error {
			f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			if _, err := f.Write(data); err != nil {
				f.Close()
				return err
			}
			if err := f.Sync(); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			if err := os.Rename(tmp, target); err != nil {
				return err
			}
			return df.Sync()
		}, func() { df.Close() }, nil
	}
	newFileOp := func(sync bool) benchFactory {
		return func(w int) (func() error, func(), error) {
			d := filepath.Join(base, fmt.Sprintf("n%02d", w))
			if err := os.Mkdir(d, 0o700); err != nil {
				return nil, nil, err
			}
			i := 0
			return func() error {
				i++
				name := filepath.Join(d, strconv.Itoa(i))
				if sync {
					return createSync(name, data)
				}
				f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
				if err != nil {
					return err
				}
				return f.Close()
			}, nil, nil
		}
	}
	n, d := b.cfg.Workers, b.cfg.Duration
	steps := []struct {
		what    string
		workers int
		f       benchFactory
		out     *benchRate
		fsyncs  float64
	}{
		{"write+fsync, 1 writer", 1, fsyncOp, &b.res.Disk.Fsync1, 1},
		{fmt.Sprintf("write+fsync, %d writers", n), n, fsyncOp, &b.res.Disk.FsyncN, 1},
		{"atomic replace, 1 writer", 1, replaceOp, &b.res.Disk.Replace1, 2},
		{fmt.Sprintf("atomic replace, %d writers", n), n, replaceOp, &b.res.Disk.ReplaceN, 2},
		{"new file+fsync, 1 writer", 1, newFileOp(true), &b.res.Disk.NewFile1, 1},
		{fmt.Sprintf("new file+fsync, %d writers", n), n, newFileOp(true), &b.res.Disk.NewFileN, 1},
		{"create empty file, no fsync", 1, newFileOp(false), &b.res.Disk.Create1, 0},
	}
	for i, s := range steps {
		base = filepath.Join(dir, strconv.Itoa(i))
		if err := os.Mkdir(base, 0o700); err != nil {
			return err
		}
		r, err := b.measure(s.workers, d, s.f)
		if err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
		r.FsyncsPerSec = r.OpsPerSec * s.fsyncs
		*s.out = r
		b.progress("disk: %-28s %9.0f ops/s", s.what, r.OpsPerSec)
	}
	return nil
}

// Substrat's operations.

// countFS counts the fsyncs that go through it. WriteFileAtomic counts as
// one: renameio fsyncs the temporary file; the directory fsync is a
// SyncDir of its own.
type countFS struct {
	fsstore.FS
	n *atomic.Int64
}

type countFile struct {
	fsstore.File
	n *atomic.Int64
}

func (f countFile) Sync() error { f.n.Add(1); return f.File.Sync() }

func (c countFS) Create(name string, perm fs.FileMode) (fsstore.File, error) {
	f, err := c.FS.Create(name, perm)
	if err != nil {
		return nil, err
	}
	return countFile{f, c.n}, nil
}

func (c countFS) OpenAppend(name string) (fsstore.File, error) {
	f, err := c.FS.OpenAppend(name)
	if err != nil {
		return nil, err
	}
	return countFile{f, c.n}, nil
}

func (c countFS) SyncDir(name string) error { c.n.Add(1); return c.FS.SyncDir(name) }

func (c countFS) OpenFSSync(name string) (fsstore.FSSync, error) {
	s, err := c.FS.OpenFSSync(name)
	if err != nil {
		return nil, err
	}
	return countFSSync{s, c.n}, nil
}

type countFSSync struct {
	fsstore.FSSync
	n *atomic.Int64
}

func (s countFSSync) Sync() error { s.n.Add(1); return s.FSSync.Sync() }

func (c countFS) WriteFileAtomic(name string, data []byte, perm fs.FileMode) error {
	c.n.Add(1)
	return c.FS.WriteFileAtomic(name, data, perm)
}

// noSyncFS skips every fsync: it builds fixtures fast.
type noSyncFS struct{ fsstore.FS }

type noSyncFile struct{ fsstore.File }

func (noSyncFile) Sync() error { return nil }

func (n noSyncFS) Create(name string, perm fs.FileMode) (fsstore.File, error) {
	f, err := n.FS.Create(name, perm)
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

func (n noSyncFS) OpenAppend(name string) (fsstore.File, error) {
	f, err := n.FS.OpenAppend(name)
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

func (noSyncFS) SyncDir(string) error { return nil }

func (noSyncFS) OpenFSSync(string) (fsstore.FSSync, error) { return noFSSync{}, nil }

type noFSSync struct{}

func (noFSSync) Sync() error  { return nil }
func (noFSSync) Close() error { return nil }
