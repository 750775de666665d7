package bwrap

import (
	"fmt"
	"path/filepath"
	"strings"
)

// CheckLink decides whether a sandboxed agent whose sandbox grants granted
// (see Spec.Grants) may link the host path hostPath into another sandbox,
// read-write if wantWrite. The path must be absolute with no ".."
// component; it is resolved with filepath.EvalSymlinks, and the resolved
// path must be, or lie under, the resolved Host of a granted mount, a
// read-write one if wantWrite. CheckLink returns the resolved path, which
// is what the caller should bind.
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
	resolved, err := filepath.EvalSymlinks(clean)
	if err != nil {
		return refuse("cannot be resolved: %v", err)
	}

	var lexical *Mount // the grant hostPath sits in before resolution
	readOnly := false
	for i := range granted {
		g := &granted[i]
		if g.Host == "" || !filepath.IsAbs(g.Host) {
			continue
		}
		base := filepath.Clean(g.Host)
		rbase, err := filepath.EvalSymlinks(base)
		if err != nil {
			continue // a grant that is gone grants nothing
		}
		if within(rbase, resolved) {
			if wantWrite && g.ReadOnly {
				readOnly = true
				continue
			}
			return resolved, nil
		}
		if lexical == nil && (within(base, clean) || within(rbase, clean)) {
			lexical = g
		}
	}
	switch {
	case readOnly:
		return refuse("is granted read-only; it cannot be linked read-write")
	case lexical != nil:
		return refuse("is a symlink that leaves %s (it resolves to %s)", lexical.Host, resolved)
	default:
		return refuse("is not within anything your workspace grants")
	}
}
