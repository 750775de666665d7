package daemon

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/substrat/substrat/supervisor/config"
)

// settings are the daemon's settings in force: from config.json, the
// environment it started with and its flags (package config). The file is
// read again when it changes; an edit that does not parse or check is
// refused, and the settings in force stay.
type settings struct {
	path   string
	getenv func(string) string
	flags  map[string]string

	mu    sync.Mutex // guards the fields below
	eff   config.Effective
	stamp fileStamp // of the file last read
}

// fileStamp tells a changed file from the one last read.
type fileStamp struct {
	ino, size int64
	mtime     time.Time
	present   bool
}

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime(), present: true}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = int64(sys.Ino)
	}
	return st
}

// loadSettings works out the settings at start. A bad flag or environment
// variable is an error (the user typed it just now); a bad file is
// refused and reported, and the start goes on without it.
func loadSettings(path string, getenv func(string) string, flags map[string]string) (*settings, error) {
	s := &settings{path: path, getenv: getenv, flags: flags}
	base, err := config.Resolve(nil, getenv, flags)
	if err != nil {
		return nil, fmt.Errorf("settings: %w", err)
	}
	base.Path = path
	s.eff = base
	s.reload(nil)
	return s, nil
}

// reload reads the file again; apply, if set, is given what it yields
// (and may refuse it). It reports whether the settings changed.
func (s *settings) reload(apply func(config.Effective) error) (changed bool, err error) {
	stamp := stampOf(s.path)
	f, err := config.Load(s.path)
	var eff config.Effective
	if err == nil {
		eff, err = config.Resolve(f, s.getenv, s.flags)
	}
	if err == nil && apply != nil {
		err = apply(eff)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stamp = stamp
	s.eff.Present = stamp.present
	if err != nil {
		s.eff.FileError = err.Error()
		return false, err
	}
	eff.Path, eff.Present = s.path, stamp.present
	s.eff = eff
	return true, nil
}

// changed reports whether the file is not the one last read.
func (s *settings) changed() bool {
	st := stampOf(s.path)
	s.mu.Lock()
	defer s.mu.Unlock()
	return st != s.stamp
}

// effective returns the settings in force.
func (s *settings) effective() config.Effective {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.eff
}

// checkConfig adopts an edit of config.json, or refuses it and says why
// (in the log and in config.show). max_slots changes the default pool's
// size at once; the number of turns at once, at the next start.
func (d *Daemon) checkConfig() {
	if !d.settings.changed() {
		return
	}
	changed, err := d.settings.reload(func(eff config.Effective) error { return d.core.SetSettings(eff.Settings) })
	switch {
	case err != nil && errors.Is(err, os.ErrPermission):
		d.log.Error("config.json cannot be read; the settings in force stay", "err", err)
	case err != nil:
		d.log.Error("config.json refused; the settings in force stay", "err", err)
	case changed:
		d.log.Info("config.json adopted", "path", d.settings.path)
	}
}
