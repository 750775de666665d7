package bwrap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Errors of Open. Test for them with errors.Is.
var (
	// ErrSymlink: a bind source has a symlink where none may be.
	ErrSymlink = errors.New("bwrap: symlink in a bind source")
	// ErrLeaves: a symlink in a bind source leads out of the directory it
	// must stay beneath.
	ErrLeaves = errors.New("bwrap: bind source leaves its directory")
)

// A Source says where the host side of a bind is and how it is resolved.
//
// A sandboxed process can change what it can write. Between a check of a
// path by name and a bind of that name it can swap a directory for a
// symlink to "/", and the bind then shows the host's root. So no bind is
// made by name: Open resolves the source once, from Anchor downward,
// without following a symlink out of where it must stay, and keeps the
// descriptor; bwrap is handed the descriptor (--bind-fd), so that what was
// resolved is exactly what is bound.
type Source struct {
	// Host is the absolute, clean host path.
	Host string
	// Anchor is a directory at or above Host that no sandbox can change,
	// opened by its name (symlinks followed): the daemon's home, for
	// paths in the store. Empty means "/".
	Anchor string
	// Beneath is a directory at or below Anchor, and at or above Host.
	// From Anchor down to Beneath no component may be a symlink; below
	// Beneath a symlink is followed as long as it stays beneath Beneath.
	// Empty means Host itself: no symlink anywhere below Anchor.
	Beneath string
}

func (s Source) anchor() string {
	if s.Anchor == "" {
		return "/"
	}
	return s.Anchor
}

func (s Source) beneath() string {
	if s.Beneath == "" {
		return s.Host
	}
	return s.Beneath
}

// validate checks the form of s: absolute clean paths, Anchor at or above
// Beneath, Beneath at or above Host.
func (s Source) validate() error {
	if err := checkPath(s.Host); err != nil {
		return err
	}
	a, b := s.anchor(), s.beneath()
	if err := checkPath(a); err != nil {
		return fmt.Errorf("anchor: %v", err)
	}
	if err := checkPath(b); err != nil {
		return fmt.Errorf("beneath: %v", err)
	}
	if !within(a, b) {
		return fmt.Errorf("%s is not within its anchor %s", b, a)
	}
	if !within(b, s.Host) {
		return fmt.Errorf("%s is not within %s", s.Host, b)
	}
	return nil
}

// openat2 is unix.Openat2, a seam so that tests can take the fallback
// path of kernels without it.
var openat2 = unix.Openat2

// Open opens s.Host as s says, with O_PATH: a descriptor fit for
// --bind-fd, for fstat, and for RealPath, but not for reading. It fails
// with ErrInvalidSpec for a malformed Source, ErrSymlink when a component
// from Anchor down to Beneath is a symlink, ErrLeaves when a symlink below
// Beneath (or "..") leads out of it, and an error wrapping fs.ErrNotExist
// when the path is missing. Each error names the path and, for a symlink,
// where it leads.
//
// Open uses openat2(2) with RESOLVE_NO_SYMLINKS and RESOLVE_BENEATH. On a
// kernel without openat2 it walks the path one component at a time with
// O_NOFOLLOW and then refuses every symlink below Anchor, below Beneath
// too: stricter, never looser.
func Open(s Source) (*os.File, error) {
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("%w: bind source: %v", ErrInvalidSpec, err)
	}
	a, b := s.anchor(), s.beneath()
	anchor, err := os.OpenFile(a, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("bind source %s: %w", s.Host, err)
	}
	defer anchor.Close()

	// Anchor down to Beneath: no symlink at all.
	mid, err := openBelow(anchor, rel(a, b), unix.RESOLVE_NO_SYMLINKS)
	if err != nil {
		return nil, sourceErr(s, a, b, err)
	}
	if b == s.Host {
		return mid, nil
	}
	defer mid.Close()
	// Beneath down to Host: symlinks that stay beneath.
	f, err := openBelow(mid, rel(b, s.Host), 0)
	if err != nil {
		return nil, sourceErr(s, a, b, err)
	}
	return f, nil
}

// OpenBelow opens the clean relative path r ("." for dir itself) beneath
// the directory dir with O_PATH, following a symlink only while it stays
// beneath dir, as Open does below a Source's Beneath. It fails with
// ErrLeaves when a symlink or ".." leads out, and with the errno
// otherwise (wrapped in an *os.PathError). The result can be a directory
// for openat(2), or be reopened through ReopenPath.
func OpenBelow(dir *os.File, r string) (*os.File, error) {
	f, err := openBelow(dir, r, 0)
	switch {
	case errors.Is(err, unix.EXDEV):
		return nil, fmt.Errorf("%w: %s leads out of %s", ErrLeaves, r, dir.Name())
	case err != nil:
		return nil, &os.PathError{Op: "open", Path: r, Err: err}
	}
	return f, nil
}

// ReopenPath opens the file that the O_PATH descriptor f refers to with
// flags (through /proc/self/fd, which names the file itself, not a path).
func ReopenPath(f *os.File, flags int) (*os.File, error) {
	return os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), flags|unix.O_CLOEXEC, 0)
}

// rel is p relative to the directory base it lies in; "." for base itself.
func rel(base, p string) string {
	if p == base {
		return "."
	}
	if base == "/" {
		return strings.TrimPrefix(p, "/")
	}
	return strings.TrimPrefix(p, base+"/")
}

// openBelow opens the relative path r beneath dir with O_PATH, never
// leaving dir and never through a magic link; extra adds
// RESOLVE_NO_SYMLINKS.
func openBelow(dir *os.File, r string, extra uint64) (*os.File, error) {
	how := &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS | extra,
	}
	for {
		fd, err := openat2(int(dir.Fd()), r, how)
		switch {
		case err == nil:
			return os.NewFile(uintptr(fd), r), nil
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			continue // EAGAIN: a rename raced the lookup; try again
		case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM):
			// No openat2 (before Linux 5.6, or a seccomp filter that
			// refuses it): walk by hand.
			return walkNoFollow(dir, r)
		default:
			return nil, err
		}
	}
}

// walkNoFollow opens r beneath dir one component at a time, refusing any
// symlink (ELOOP). r is clean and has no "..".
func walkNoFollow(dir *os.File, r string) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), ".", unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if r != "." {
		for _, c := range strings.Split(r, "/") {
			if c == ".." {
				unix.Close(fd)
				return nil, unix.EXDEV
			}
			next, err := unix.Openat(fd, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			unix.Close(fd)
			if err != nil {
				return nil, err
			}
			var st unix.Stat_t
			if err := unix.Fstat(next, &st); err != nil {
				unix.Close(next)
				return nil, err
			}
			if st.Mode&unix.S_IFMT == unix.S_IFLNK {
				unix.Close(next)
				return nil, unix.ELOOP
			}
			fd = next
		}
	}
	return os.NewFile(uintptr(fd), r), nil
}

// sourceErr turns an errno of Open into an error that says what is wrong
// with s, where the symlinks lead (read by name, for the message only).
func sourceErr(s Source, anchor, beneath string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		link := firstSymlink(anchor, s.Host)
		to, _ := filepath.EvalSymlinks(s.Host)
		if to == "" {
			to = "nowhere that exists"
		}
		if link == s.Host {
			return fmt.Errorf("%w: %s is a symlink (it resolves to %s); a bind source may have none below %s",
				ErrSymlink, s.Host, to, anchor)
		}
		return fmt.Errorf("%w: %s: %s is a symlink (the path resolves to %s); a bind source may have none below %s",
			ErrSymlink, s.Host, link, to, anchor)
	case errors.Is(err, unix.EXDEV):
		to, _ := filepath.EvalSymlinks(s.Host)
		if to == "" {
			to = "nowhere that exists"
		}
		return fmt.Errorf("%w: %s is a symlink that leaves %s (it resolves to %s)", ErrLeaves, s.Host, beneath, to)
	default:
		return &os.PathError{Op: "open bind source", Path: s.Host, Err: err}
	}
}

// firstSymlink names the first component of p below anchor that is a
// symlink now (by name; for messages), or p itself if none is.
func firstSymlink(anchor, p string) string {
	cur := anchor
	for _, c := range strings.Split(rel(anchor, p), "/") {
		if c == "." {
			break
		}
		cur = filepath.Join(cur, c)
		if fi, err := os.Lstat(cur); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			return cur
		}
	}
	return p
}

// RealPath returns the host path of the file that f, an open descriptor,
// refers to now, as the kernel names it.
func RealPath(f *os.File) (string, error) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		return "", err
	}
	if strings.HasSuffix(p, " (deleted)") {
		return "", fmt.Errorf("%s: %w", strings.TrimSuffix(p, " (deleted)"), os.ErrNotExist)
	}
	return p, nil
}

// IsDir reports whether the open file f is a directory.
func IsDir(f *os.File) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false, err
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR, nil
}
