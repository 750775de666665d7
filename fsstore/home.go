package fsstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// The identity of a home, and the mark of a copy of one.
//
// home.json names the home: {"version": 1, "id": "<uuidv7>", "path":
// "<the home's real path>", "created_at": ...}, and for a home that
// started as a copy, "copied_from": "<the id of the home copied>". It is
// made by the first daemon start (or backup) of the home. A copy made by
// 'substrat backup' does not get it: the copy gets backup.json instead,
// {"version": 1, "backup_of": "<id of the home copied>", "source": "<its
// path>", "copied_at": ...}, written before the first file is copied. A
// copy made by hand (rsync -a, cp -a) has the original's home.json, whose
// path is not its own, while the original at that path has that id (a
// home moved to another path keeps its id, and its start records the new
// path). A daemon started on a copy (of either kind) gives
// it a home.json of its own, so that a copy that comes to life is a home
// of its own, told apart from the one it was copied from: its git
// workspaces still name the home they were made in (package workspace),
// whose repository and branches they share, and are refused until
// re-attached.
const (
	HomeName   = "home.json"
	BackupName = "backup.json"
)

// HomeInfo is home.json.
type HomeInfo struct {
	Version    int       `json:"version"`
	ID         string    `json:"id"`
	Path       string    `json:"path,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	CopiedFrom string    `json:"copied_from,omitempty"`
}

// BackupMark is backup.json.
type BackupMark struct {
	Version  int       `json:"version"`
	BackupOf string    `json:"backup_of"`
	Source   string    `json:"source,omitempty"`
	CopiedAt time.Time `json:"copied_at"`
}

// readHomeInfo reads home.json, or returns nil if there is none.
func readHomeInfo(home string) (*HomeInfo, error) {
	path := Layout{Home: home}.HomeFile()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var h HomeInfo
	if err := json.Unmarshal(data, &h); err != nil || !IsID(h.ID) {
		return nil, fmt.Errorf("%s is not a valid home identity (want {\"version\":1,\"id\":\"<uuid>\"}); put it back from a backup, or remove it to give the home a new one", path)
	}
	return &h, nil
}

// realHome is home with its symlinks resolved.
func realHome(home string) string {
	if r, err := filepath.EvalSymlinks(home); err == nil {
		return r
	}
	return filepath.Clean(home)
}

// HomeIdentity says who home is: its id ("" while it has none of its
// own: a home never started, or a copy not started since it was made),
// and the id of the home it is a copy of ("" for an original): from
// backup.json, or from a home.json copied by hand (one whose path is not
// home's, while the home at that path still has that id; a home moved
// away from its path keeps its id).
func HomeIdentity(home string) (id, copiedFrom string, err error) {
	h, err := readHomeInfo(home)
	if err != nil {
		return "", "", err
	}
	if h != nil {
		if h.Path == "" || h.Path == realHome(home) || !stillThere(h) {
			id, copiedFrom = h.ID, h.CopiedFrom
		} else {
			copiedFrom = h.ID
		}
	}
	if copiedFrom == "" {
		if m, err := ReadBackupMark(home); err == nil && m != nil {
			copiedFrom = m.BackupOf
		}
	}
	return id, copiedFrom, nil
}

// stillThere reports whether the home h names is at its path.
func stillThere(h *HomeInfo) bool {
	at, err := readHomeInfo(h.Path)
	return err == nil && at != nil && at.ID == h.ID
}

// HomeID returns the id of home, or "" if it has none of its own.
func HomeID(home string) (string, error) {
	id, _, err := HomeIdentity(home)
	return id, err
}

// EnsureHomeID returns the id of home, giving it one if it has none of
// its own: home.json, made without replacing one made meanwhile (or, in a
// copy made by hand, replacing the original's), fsynced.
func EnsureHomeID(home string) (string, error) {
	id, from, err := HomeIdentity(home)
	if err != nil {
		return "", err
	}
	l := Layout{Home: home}
	if id != "" {
		// A home moved from its path: the same home, at its new path.
		if h, _ := readHomeInfo(home); h != nil && h.Path != realHome(home) {
			h.Path = realHome(home)
			data, err := json.MarshalIndent(h, "", "  ")
			if err == nil {
				err = writeFileDurable(OS{}, l.HomeFile(), append(data, '\n'))
			}
			if err != nil {
				return "", err
			}
		}
		return id, nil
	}
	data, err := json.MarshalIndent(HomeInfo{Version: 1, ID: NewID(), Path: realHome(home), CreatedAt: time.Now().UTC(), CopiedFrom: from}, "", "  ")
	if err != nil {
		return "", err
	}
	if old, _ := readHomeInfo(home); old != nil {
		// The original's, copied by hand: this copy gets its own.
		if err := writeFileDurable(OS{}, l.HomeFile(), append(data, '\n')); err != nil {
			return "", err
		}
		return HomeID(home)
	}
	tmp := l.HomeFile() + ".tmp-" + NewID()
	if err := writeFileDurable(OS{}, tmp, append(data, '\n')); err != nil {
		return "", err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, l.HomeFile()); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	if err := (OS{}).SyncDir(home); err != nil {
		return "", err
	}
	return HomeID(home)
}

// ReadBackupMark returns home's backup.json, or nil if it has none.
func ReadBackupMark(home string) (*BackupMark, error) {
	path := Layout{Home: home}.BackupFile()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m BackupMark
	if err := json.Unmarshal(data, &m); err != nil || !IsID(m.BackupOf) {
		return nil, fmt.Errorf("%s is not a valid backup mark", path)
	}
	return &m, nil
}

// WriteBackupMark writes m as home's backup.json.
func WriteBackupMark(home string, m BackupMark) error {
	m.Version = 1
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeFileDurable(OS{}, Layout{Home: home}.BackupFile(), append(data, '\n'))
}

// Copies in progress.
//
// An archive leaves agents/<id> in place (the same files, hard-linked) for
// a copy of the home that listed agents/ before the archive and copies
// the files after it. It is needed only while such a copy runs, and it
// stops 'mv archive/<id> agents/' from undoing the archive. So a copy
// says that it runs: it holds a shared flock(2) on HOME/copy.lock for as
// long as it copies ('substrat backup' does; by hand: flock -s
// HOME/copy.lock rsync -a HOME/ DEST/). The daemon (Options.NoCopy)
// takes the lock exclusively, without waiting, to remove such agents/<id>
// copies: at once after an archive when no copy runs, else at its sweep
// once none does.

// CopyLockName is the lock a copy of the home holds while it runs.
const CopyLockName = "copy.lock"

// CopyLock takes the copy lock of home, shared, waiting for the daemon to
// finish a removal; release ends the copy.
func CopyLock(home string) (release func(), err error) {
	f, err := os.OpenFile(Layout{Home: home}.CopyLock(), os.O_RDONLY|os.O_CREATE, filePerm)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// NoCopy returns the Options.NoCopy of home: the copy lock taken
// exclusively without waiting, ok false while a copy holds it.
func NoCopy(home string) func() (release func(), ok bool) {
	return func() (func(), bool) {
		f, err := os.OpenFile(Layout{Home: home}.CopyLock(), os.O_RDONLY|os.O_CREATE, filePerm)
		if err != nil {
			return nil, false
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			return nil, false
		}
		return func() { f.Close() }, true
	}
}
