package fsstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
)

// The identity of a home, and the mark of a copy of one.
//
// home.json names the home: {"version": 1, "id": "<uuidv7>", "created_at":
// ...}. It is made once, by the first daemon start (or backup) of the
// home, and never changed. A copy made by 'substrat backup' does not get
// it: the copy gets backup.json instead, {"version": 1, "backup_of":
// "<id of the home copied>", "source": "<its path>", "copied_at": ...},
// written before the first file is copied. A daemon started on a copy
// gives it a home.json of its own, so that a copy that comes to life is
// a home of its own, told apart from the one it was copied from (its git
// workspaces name the home they were made in: see package workspace).
const (
	HomeName   = "home.json"
	BackupName = "backup.json"
)

// HomeInfo is home.json.
type HomeInfo struct {
	Version   int       `json:"version"`
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
}

// BackupMark is backup.json.
type BackupMark struct {
	Version  int       `json:"version"`
	BackupOf string    `json:"backup_of"`
	Source   string    `json:"source,omitempty"`
	CopiedAt time.Time `json:"copied_at"`
}

// HomeID returns the id in home's home.json, or "" if it has none.
func HomeID(home string) (string, error) {
	path := Layout{Home: home}.HomeFile()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var h HomeInfo
	if err := json.Unmarshal(data, &h); err != nil || !IsID(h.ID) {
		return "", fmt.Errorf("%s is not a valid home identity (want {\"version\":1,\"id\":\"<uuid>\"}); put it back from a backup, or remove it to give the home a new one", path)
	}
	return h.ID, nil
}

// EnsureHomeID returns the id of home, giving it one (home.json, made
// without replacing one made meanwhile, and fsynced) if it has none.
func EnsureHomeID(home string) (string, error) {
	if id, err := HomeID(home); err != nil || id != "" {
		return id, err
	}
	l := Layout{Home: home}
	data, err := json.MarshalIndent(HomeInfo{Version: 1, ID: NewID(), CreatedAt: time.Now().UTC()}, "", "  ")
	if err != nil {
		return "", err
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
