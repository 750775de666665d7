package supervisor

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrAlreadyRunning means another daemon holds the home's lock.
var ErrAlreadyRunning = errors.New("supervisor: a daemon is already running on this home")

// RunningError says which process holds the lock.
type RunningError struct {
	Pid  int
	Home string
}

func (e *RunningError) Error() string {
	if e.Pid > 0 {
		return fmt.Sprintf("a daemon is already running on %s (pid %d)", e.Home, e.Pid)
	}
	return fmt.Sprintf("a daemon is already running on %s", e.Home)
}

func (e *RunningError) Unwrap() error { return ErrAlreadyRunning }

// Lock is the single-daemon lock: flock(2) on daemon.lock, which also
// holds the owner's pid. The kernel drops it when the process dies.
type Lock struct {
	f *os.File
}

// TryLock takes the lock or returns a *RunningError.
func TryLock(path, home string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &RunningError{Pid: readPid(f), Home: home}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Held reports whether some process holds the lock at path, and its pid.
func Held(path string) (bool, int) {
	f, err := os.Open(path)
	if err != nil {
		return false, 0
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return true, readPid(f)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false, 0
}

func readPid(f *os.File) int {
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	return pid
}

// Unlock releases the lock.
func (l *Lock) Unlock() error {
	unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	return l.f.Close()
}
