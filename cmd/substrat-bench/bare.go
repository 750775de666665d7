package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/substrat/substrat/fsstore"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// bareFactory returns the system calls of Substrat's operation op, made
// directly with package os, in dir: what the file system allows for that
// pattern, so that Substrat's own overhead can be told from the file
// system's. Nil for an operation that has no bare form.
//
// With dir "" it only tells whether op has a bare form (a non-nil result).
func (b *benchRun) bareFactory(op, dir string, workers, perWorker int) benchFactory {
	line, msg, snap := b.pay.Line, b.pay.Message, b.pay.Session
	if dir == "" {
		switch op {
		case "create", "send", "deliver", "append":
			return func(int) (func() error, func(), error) { return nil, nil, errors.New("no directory") }
		}
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return func(int) (func() error, func(), error) { return nil, nil, err }
	}
	switch op {
	case "create":
		// All workers create in one agents/, as agents of one home do.
		agents := filepath.Join(dir, "agents")
		if err := os.Mkdir(agents, 0o700); err != nil {
			return func(int) (func() error, func(), error) { return nil, nil, err }
		}
		return func(w int) (func() error, func(), error) {
			i := 0
			return func() error {
				i++
				name := fmt.Sprintf("%d-%d", w, i)
				tmp, final := filepath.Join(agents, ".tmp-"+name), filepath.Join(agents, name)
				inbox := filepath.Join(tmp, "inbox")
				for _, d := range []string{tmp, inbox, filepath.Join(inbox, "tmp"), filepath.Join(inbox, "new"), filepath.Join(inbox, "cur")} {
					if err := os.Mkdir(d, 0o700); err != nil {
						return err
					}
				}
				if err := createSync(filepath.Join(tmp, "events.jsonl"), line); err != nil {
					return err
				}
				if err := createSync(filepath.Join(tmp, "session.json"), snap); err != nil {
					return err
				}
				for _, d := range []string{inbox, tmp} {
					if err := syncDir(d); err != nil {
						return err
					}
				}
				if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, final, unix.RENAME_NOREPLACE); err != nil {
					return err
				}
				return syncDir(agents)
			}, nil, nil
		}
	case "send":
		return func(w int) (func() error, func(), error) {
			inbox := filepath.Join(dir, strconv.Itoa(w))
			for _, d := range []string{inbox, filepath.Join(inbox, "tmp"), filepath.Join(inbox, "new")} {
				if err := os.Mkdir(d, 0o700); err != nil {
					return nil, nil, err
				}
			}
			return func() error {
				id := fsstore.NewID() + ".json"
				tmp, dst := filepath.Join(inbox, "tmp", id), filepath.Join(inbox, "new", id)
				if err := createSync(tmp, msg); err != nil {
					return err
				}
				if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE); err != nil {
					return err
				}
				return syncDir(filepath.Join(inbox, "new"))
			}, nil, nil
		}
	case "deliver":
		ids := make([][]string, workers)
		var g errgroup.Group
		g.SetLimit(8)
		for w := range workers {
			g.Go(func() error {
				inbox := filepath.Join(dir, strconv.Itoa(w))
				for _, d := range []string{inbox, filepath.Join(inbox, "new"), filepath.Join(inbox, "cur")} {
					if err := os.Mkdir(d, 0o700); err != nil {
						return err
					}
				}
				for range perWorker {
					id := fsstore.NewID() + ".json"
					if err := os.WriteFile(filepath.Join(inbox, "new", id), msg, 0o600); err != nil {
						return err
					}
					ids[w] = append(ids[w], id)
				}
				return nil
			})
		}
		err := g.Wait()
		if err == nil {
			err = syncFS(dir)
		}
		if err != nil {
			return func(int) (func() error, func(), error) { return nil, nil, err }
		}
		return func(w int) (func() error, func(), error) {
			inbox := filepath.Join(dir, strconv.Itoa(w))
			f, err := os.OpenFile(filepath.Join(inbox, "events.jsonl"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
			if err != nil {
				return nil, nil, err
			}
			i := 0
			return func() error {
				if i >= len(ids[w]) {
					return errWorkerDone
				}
				id := ids[w][i]
				i++
				// As a turn delivers: an event line, fsynced, then a hard
				// link into cur/ (the new/ name is swept later; cur/ is
				// fsynced with the next snapshot).
				if _, err := f.Write(line); err != nil {
					return err
				}
				if err := f.Sync(); err != nil {
					return err
				}
				return os.Link(filepath.Join(inbox, "new", id), filepath.Join(inbox, "cur", id))
			}, func() { f.Close() }, nil
		}
	case "append":
		return func(w int) (func() error, func(), error) {
			f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%d.jsonl", w)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
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
	}
	return nil
}

// createSync creates name exclusively, writes data and fsyncs it.
func createSync(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
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
	return f.Close()
}

// syncDir fsyncs a directory.
func syncDir(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// perWorker sizes the messages prepared for each worker so that they last
// about d at the given rate (ops/s of all workers together).
func perWorker(rate float64, d time.Duration, workers int) int {
	if rate <= 0 {
		rate = 1000
	}
	return min(max(int(math.Ceil(rate*d.Seconds()/float64(workers))), 4), 20000)
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// syncFS flushes the file system that holds dir, so that fixture writes
// are not written back during a measurement.
func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// SQLite.
