package bwrap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// CheckLink decides whether a sandboxed agent whose sandbox grants granted
// (see Spec.Grants) may link the host path hostPath into another sandbox,
// read-write if wantWrite. The path must be absolute with no ".."
// component, and lie (by name, or by the real path of the grant) within
// the Host of a granted mount, a read-write one if wantWrite. It is
// resolved once, from that grant downward, the way Open resolves a bind
// source: a symlink below the grant is followed only while it stays below
// it. CheckLink returns the real path of what it resolved, which is what
// the caller should store and later bind (with no symlink allowed in it).
//
// A refusal wraps ErrLinkRefused and names the path and the reason: not
// absolute, contains "..", does not exist, is a symlink that leaves the
// grant it sits in, is not within anything the workspace grants, or is
// granted read-only.
func CheckLink(granted []Mount, hostPath string, wantWrite bool) (string, error) {
	refuse := func(format string, args ...any) (string, error) {
		return "", fmt.Errorf("%w: %q "+format, append([]any{ErrLinkRefused, hostPath}, args...)...)
	}
	switch {
	case hostPath == "":
		return "", fmt.Errorf("%w: empty path", ErrLinkRefused)
	case strings.ContainsRune(hostPath, 0):
		return refuse("contains a NUL byte")
	case !filepath.IsAbs(hostPath):
		return refuse("is not absolute; give the host path")
	}
	for _, c := range strings.Split(hostPath, "/") {
		if c == ".." {
			return refuse("contains '..'")
		}
	}
	clean := filepath.Clean(hostPath)

	var (
		readOnly bool
		leaves   *Mount // the grant a symlink left
		missing  error
	)
	for i := range granted {
		g := &granted[i]
		resolved, err := resolveIn(g.Source, clean)
		switch {
		case errors.Is(err, errNotInGrant):
			continue
		case errors.Is(err, ErrLeaves):
			if leaves == nil {
				leaves = g
			}
			continue
		case err != nil:
			if missing == nil {
				missing = err
			}
			continue
		case wantWrite && g.ReadOnly:
			readOnly = true
			continue
		case wantWrite && overlapsReadOnly(granted, resolved):
			// A read-only grant nested in a writable one (a git
			// workspace's config in its git directory) stays read-only:
			// no link may show it, or a directory holding it, writable.
			readOnly = true
			continue
		}
		return resolved, nil
	}
	switch {
	case readOnly:
		return refuse("is granted read-only; it cannot be linked read-write")
	case leaves != nil:
		to, _ := filepath.EvalSymlinks(clean) // for the message only
		return refuse("is a symlink that leaves %s (it resolves to %s)", leaves.Host, to)
	case missing != nil:
		return refuse("cannot be resolved: %v", missing)
	default:
		return refuse("is not within anything your workspace grants")
	}
}

// overlapsReadOnly reports whether the real path p is read-only by the
// most specific grant that holds it (a read-only grant nested in a
// writable one, as a git workspace's config in its git directory), or
// holds a read-only grant within it.
func overlapsReadOnly(granted []Mount, p string) bool {
	deepest, ro := -1, false
	for _, g := range granted {
		host := g.Host
		if r, err := filepath.EvalSymlinks(host); err == nil {
			host = r
		}
		switch {
		case within(host, p) && len(host) > deepest:
			deepest, ro = len(host), g.ReadOnly
		case g.ReadOnly && host != p && within(p, host):
			return true
		}
	}
	return ro
}

// errNotInGrant: the path does not lie within the grant.
var errNotInGrant = errors.New("not within the grant")

// resolveIn resolves the clean absolute path p beneath the grant g: g is
// opened as a bind source, and the part of p below it (by g's name or by
// its real path) is resolved from that descriptor, following symlinks that
// stay beneath it. It returns the real path of the result.
func resolveIn(g Source, p string) (string, error) {
	if g.validate() != nil {
		return "", errNotInGrant // a malformed grant grants nothing
	}
	dir, err := Open(g)
	if err != nil {
		if within(g.Host, p) {
			return "", err
		}
		return "", errNotInGrant
	}
	defer dir.Close()
	base, err := RealPath(dir)
	if err != nil {
		return "", err
	}
	var r string
	switch {
	case within(base, p):
		r = rel(base, p)
	case within(g.Host, p):
		r = rel(g.Host, p)
	default:
		return "", errNotInGrant
	}
	f, err := openBelow(dir, r, 0)
	if errors.Is(err, unix.EXDEV) {
		return "", ErrLeaves
	}
	if err != nil {
		return "", &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer f.Close()
	return RealPath(f)
}
