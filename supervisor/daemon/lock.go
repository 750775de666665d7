package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/substrat/substrat/fsstore"
)

// ErrAlreadyRunning means another daemon holds the home's lock.
var ErrAlreadyRunning = errors.New("supervisor: a daemon is already running on this home")

// Roles of the lock's holder.
const (
	RoleDaemon = "daemon"
	RoleRepair = "fsck --repair"
)

// RunningError says which process holds the lock, and as what.
type RunningError struct {
	Pid  int
	Role string // RoleDaemon or RoleRepair
	Home string
}

func (e *RunningError) Error() string {
	who := "a daemon is already running"
	if e.Role == RoleRepair {
		who = "'substrat fsck --repair' is repairing the store"
	}
	if e.Pid > 0 {
		return fmt.Sprintf("%s on %s (pid %d)", who, e.Home, e.Pid)
	}
	return fmt.Sprintf("%s on %s", who, e.Home)
}

func (e *RunningError) Unwrap() error { return ErrAlreadyRunning }

// Lock is the single-writer lock: flock(2) on daemon.lock, which also
// holds the owner's pid and role ("123 daemon"). The daemon holds it while
// it runs, and fsck --repair while it repairs, so that neither works on a
// store the other is changing. The kernel drops it when the process dies.
type Lock struct {
	f *os.File
}

// TryLock takes the lock for the daemon or returns a *RunningError.
func TryLock(path, home string) (*Lock, error) { return TryLockAs(path, home, RoleDaemon) }

// TryLockAs takes the lock in role or returns a *RunningError.
func TryLockAs(path, home, role string) (*Lock, error) {
	f, err := openLock(path, os.O_RDWR|os.O_CREATE)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			pid, r := readOwner(f)
			return nil, &RunningError{Pid: pid, Role: r, Home: home}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+" "+role+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Held reports whether some process holds the lock at path, and its pid.
func Held(path string) (bool, int) {
	held, pid, _ := HeldBy(path)
	return held, pid
}

// HeldBy reports whether some process holds the lock at path, its pid and
// its role.
func HeldBy(path string) (held bool, pid int, role string) {
	f, err := openLock(path, os.O_RDONLY)
	if err != nil {
		return false, 0, "" // missing, or not a regular file: TryLock refuses it too
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		pid, role := readOwner(f)
		return true, pid, role
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false, 0, ""
}

// openLock opens the lock file with flag (os.O_RDONLY, or os.O_RDWR with
// os.O_CREATE), without following a symlink and without blocking: the
// lock must be a regular file, and a FIFO, a device or a symlink put in
// its place is refused (fsstore.ErrNotRegular) rather than blocking the
// open, or the daemon writing its pid through the link.
func openLock(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0o600)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: a symlink", fsstore.ErrNotRegular)}
	case errors.Is(err, unix.EISDIR):
		return nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: a directory", fsstore.ErrNotRegular)}
	case err != nil:
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: %s", fsstore.ErrNotRegular, fsstore.TypeName(fi.Mode()))}
	}
	return f, nil
}

// readOwner reads "pid role" (a lock written before roles: "pid").
func readOwner(f *os.File) (int, string) {
	buf := make([]byte, 64)
	n, _ := f.ReadAt(buf, 0)
	fields := strings.Fields(string(buf[:n]))
	if len(fields) == 0 {
		return 0, RoleDaemon
	}
	pid, _ := strconv.Atoi(fields[0])
	role := strings.Join(fields[1:], " ")
	if role == "" {
		role = RoleDaemon
	}
	return pid, role
}

// Unlock releases the lock.
func (l *Lock) Unlock() error {
	unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	return l.f.Close()
}
