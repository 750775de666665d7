package worktools

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/substrat/substrat/bwrap"
)

// Limits of the file tools.
const (
	// MaxReadBytes is the most read_file returns at once.
	MaxReadBytes = 256 << 10
	// MaxFileBytes is the largest file edit_file reads and write_file
	// writes.
	MaxFileBytes = 16 << 20
)

// ReadFile returns the text of lines from..to (1-based, inclusive; zero
// values mean the first and the last line) of the file p, at most
// MaxReadBytes of it. When it returns less than the whole file it ends
// with a note saying which lines it shows and how to ask for more.
func (pl Place) ReadFile(p string, from, to int) (string, error) {
	t, err := pl.resolve(p)
	if err != nil {
		return "", err
	}
	data, err := t.read()
	if err != nil {
		return "", err
	}
	if i := bytes.IndexByte(data[:min(len(data), 8192)], 0); i >= 0 {
		return "", fmt.Errorf("%w: %s is a binary file (%d bytes)", ErrInvalid, t.shown, len(data))
	}
	lines := strings.SplitAfter(string(data), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	n := len(lines)
	if from <= 0 {
		from = 1
	}
	if to <= 0 || to > n {
		to = n
	}
	if n == 0 {
		return "", nil
	}
	if from > n {
		return "", fmt.Errorf("%w: %s has %d lines; from %d is past the end", ErrInvalid, t.shown, n, from)
	}
	if from > to {
		return "", fmt.Errorf("%w: from %d is after to %d", ErrInvalid, from, to)
	}
	var b strings.Builder
	last := from - 1
	for i := from - 1; i < to; i++ {
		if b.Len()+len(lines[i]) > MaxReadBytes && i > from-1 {
			break
		}
		b.WriteString(lines[i])
		last = i + 1
	}
	if from > 1 || last < n {
		if !strings.HasSuffix(b.String(), "\n") {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "[lines %d-%d of %d", from, last, n)
		if last < n {
			fmt.Fprintf(&b, "; read on with from=%d", last+1)
		}
		b.WriteString("]")
	}
	return b.String(), nil
}

// WriteFile replaces (or creates) the file p with content, creating
// missing parent directories. It refuses a path the place shows
// read-only, a directory, and a symlink (name the file it points to).
func (pl Place) WriteFile(p, content string) (string, error) {
	t, err := pl.resolve(p)
	if err != nil {
		return "", err
	}
	if len(content) > MaxFileBytes {
		return "", fmt.Errorf("%w: %d bytes is more than write_file takes (%d)", ErrInvalid, len(content), MaxFileBytes)
	}
	created, err := t.write([]byte(content), true)
	if err != nil {
		return "", err
	}
	verb := "wrote"
	if created {
		verb = "created"
	}
	return fmt.Sprintf("%s %s (%d bytes, %d lines)", verb, t.shown, len(content), strings.Count(content, "\n")+boolInt(!strings.HasSuffix(content, "\n") && content != "")), nil
}

// EditFile replaces the one occurrence of old in the file p with new. It
// fails, changing nothing, when old is empty, equal to new, missing, or
// found more than once.
func (pl Place) EditFile(p, old, new string) (string, error) {
	t, err := pl.resolve(p)
	if err != nil {
		return "", err
	}
	switch {
	case old == "":
		return "", fmt.Errorf("%w: old_string is empty; to write a whole file use write_file", ErrInvalid)
	case old == new:
		return "", fmt.Errorf("%w: old_string and new_string are the same", ErrInvalid)
	case t.readOnly:
		return "", fmt.Errorf("%w: %s is read-only in your workspace", ErrReadOnly, t.shown)
	}
	data, err := t.read()
	if err != nil {
		return "", err
	}
	switch n := strings.Count(string(data), old); n {
	case 0:
		return "", fmt.Errorf("%w: old_string was not found in %s (it must match exactly, whitespace included)", ErrInvalid, t.shown)
	case 1:
	default:
		return "", fmt.Errorf("%w: old_string occurs %d times in %s; include more of the surrounding text to make it unique", ErrInvalid, n, t.shown)
	}
	at := strings.Index(string(data), old)
	out := string(data[:at]) + new + string(data[at+len(old):])
	if len(out) > MaxFileBytes {
		return "", fmt.Errorf("%w: the edited file would be %d bytes, more than %d", ErrInvalid, len(out), MaxFileBytes)
	}
	if _, err := t.write([]byte(out), false); err != nil {
		return "", err
	}
	line := strings.Count(string(data[:at]), "\n") + 1
	return fmt.Sprintf("edited %s at line %d (-%d +%d lines)", t.shown, line, strings.Count(old, "\n")+1, strings.Count(new, "\n")+1), nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// read returns the whole of the regular file t, at most MaxFileBytes,
// resolved beneath its grant and read through the descriptor.
func (t target) read() ([]byte, error) {
	g, err := t.openGrant()
	if err != nil {
		return nil, err
	}
	defer g.Close()
	pf, err := t.openBelow(g, t.rel)
	if err != nil {
		return nil, err
	}
	defer pf.Close()
	f, err := bwrap.ReopenPath(pf, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.shown, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: %w", t.shown, err)
	case fi.IsDir():
		return nil, fmt.Errorf("%w: %s is a directory; list it with the shell tool", ErrInvalid, t.shown)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%w: %s is not a regular file (%s)", ErrInvalid, t.shown, fi.Mode().Type())
	case fi.Size() > MaxFileBytes:
		return nil, fmt.Errorf("%w: %s is %d bytes, more than %d", ErrInvalid, t.shown, fi.Size(), MaxFileBytes)
	}
	return io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
}

// write replaces the file t with data: a temporary file in the same
// directory (found beneath the grant), renamed over it. mkdirs creates
// missing parent directories. It reports whether the file is new.
func (t target) write(data []byte, mkdirs bool) (created bool, err error) {
	if t.readOnly {
		return false, fmt.Errorf("%w: %s is read-only in your workspace", ErrReadOnly, t.shown)
	}
	if t.rel == "." {
		return false, fmt.Errorf("%w: %s is a directory", ErrInvalid, t.shown)
	}
	g, err := t.openGrant()
	if err != nil {
		return false, err
	}
	defer g.Close()
	dir, base := path.Split(t.rel)
	parent, err := t.parentDir(g, strings.TrimSuffix(dir, "/"), mkdirs)
	if err != nil {
		return false, err
	}
	defer parent.Close()
	pfd := int(parent.Fd())

	mode := uint32(0o644)
	var st unix.Stat_t
	switch err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case errors.Is(err, unix.ENOENT):
		created = true
	case err != nil:
		return false, fmt.Errorf("%s: %w", t.shown, err)
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return false, fmt.Errorf("%w: %s is a symlink; write to the file it points to", ErrInvalid, t.shown)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return false, fmt.Errorf("%w: %s is not a regular file", ErrInvalid, t.shown)
	default:
		mode = st.Mode & 0o7777
	}
	tmp := ".substrat-write-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	fd, err := unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return false, fmt.Errorf("%s: %w", t.shown, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(os.FileMode(mode)) // the umask may have cut it
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(pfd, tmp, pfd, base)
	}
	if err != nil {
		unix.Unlinkat(pfd, tmp, 0)
		return false, fmt.Errorf("writing %s: %w", t.shown, err)
	}
	return created, nil
}

// parentDir opens the directory dir ("" for the grant itself) beneath g,
// creating what is missing when mkdirs, one component at a time from a
// descriptor.
func (t target) parentDir(g *os.File, dir string, mkdirs bool) (*os.File, error) {
	if dir == "" {
		dir = "."
	}
	f, err := t.openBelow(g, dir)
	if err == nil || !mkdirs || !errors.Is(err, ErrNotFound) {
		return f, err
	}
	cur, err := t.openBelow(g, ".")
	if err != nil {
		return nil, err
	}
	for _, c := range strings.Split(dir, "/") {
		if err := unix.Mkdirat(int(cur.Fd()), c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			cur.Close()
			return nil, fmt.Errorf("creating the directories of %s: %w", t.shown, err)
		}
		next, err := t.openBelow(cur, c)
		cur.Close()
		if err != nil {
			return nil, err
		}
		cur = next
	}
	return cur, nil
}
