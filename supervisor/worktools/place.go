// Package worktools runs the work tools that the daemon offers to agents
// whose provider brings none of its own (the openai provider): shell,
// read_file, write_file and edit_file, confined to where the agent works.
//
// A Place is either a bwrap sandbox, where paths are as the agent sees
// them inside (a relative path is relative to /workspace) and each is
// resolved through the sandbox's grants, or a host directory, which a
// path may not leave. Either way a path is resolved once, from an opened
// directory downward (openat2 RESOLVE_BENEATH: no "..", no symlink that
// leads out), and the file is read or written through that descriptor,
// because the agent's own processes can change what it can write.
// Writes replace a file atomically (a temporary file in the same
// directory, renamed), never through a symlink.
//
// Shell commands run through launch.Shell in a sandbox, or /bin/sh in the
// directory, with the working directory and exported variables persisted
// between calls, in a process group of their own that is killed whole on
// timeout; their output is capped, with a note saying what was cut.
package worktools

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/provider"
)

// Errors. Test for them with errors.Is.
var (
	// ErrOutside: a path outside the place (not in the sandbox's grants,
	// or outside the directory), with "..", or through a symlink that
	// leads out.
	ErrOutside = errors.New("worktools: path outside your workspace")
	// ErrReadOnly: a write to something the place shows read-only.
	ErrReadOnly = errors.New("worktools: read-only")
	// ErrNotFound: no such file.
	ErrNotFound = errors.New("worktools: no such file")
	// ErrInvalid: bad arguments (not a regular file, no unique match...).
	ErrInvalid = errors.New("worktools: invalid")
)

// Place is where an agent works: Sandbox or Dir.
type Place struct {
	// Sandbox, if set, is the agent's sandbox: shell commands run in it,
	// and paths are as the agent sees them inside.
	Sandbox *bwrap.Spec
	// Dir is the agent's working directory on the host when it has no
	// sandbox (absolute): a relative path is relative to it, and no path
	// may leave it.
	Dir string
	// ShellState is the directory where the shell's working directory and
	// exported variables persist between calls (outside Dir and the
	// sandbox's root).
	ShellState bwrap.Source
	// Env is the environment of shell commands outside a sandbox (inside,
	// it is the sandbox's own).
	Env []string
	// Limit, if set, puts shell commands under the agent's resource
	// limits (provider.Config.Limit).
	Limit provider.LimitFunc
	// RemoteSandbox and RemoteStart, if set, run shell commands on
	// another host, as the agent's provider processes run there
	// (provider.Config.Sandbox and Start), in its sandbox there, with the
	// shell state as a read-write need; the file tools still run here,
	// in Sandbox. Limit does not apply (RemoteStart applies the limits
	// as that host can).
	RemoteSandbox provider.SandboxFunc
	RemoteStart   provider.StartFunc
}

// target is a resolved request for a path: the grant it lies in and the
// path below it.
type target struct {
	grant    bwrap.Source
	rel      string // clean, relative; "." for the grant itself
	readOnly bool
	shown    string // the path as the agent named it, cleaned
}

// resolve maps p, as the agent names it, to the grant it lies in.
func (pl Place) resolve(p string) (target, error) {
	if p == "" {
		return target{}, fmt.Errorf("%w: empty path", ErrInvalid)
	}
	if strings.ContainsRune(p, 0) {
		return target{}, fmt.Errorf("%w: path %q contains a NUL byte", ErrInvalid, p)
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return target{}, fmt.Errorf("%w: %q contains '..'", ErrOutside, p)
		}
	}
	if pl.Sandbox == nil {
		if !filepath.IsAbs(pl.Dir) {
			return target{}, fmt.Errorf("%w: the agent has no working directory", ErrInvalid)
		}
		abs := p
		if !filepath.IsAbs(abs) {
			abs = filepath.Join(pl.Dir, p)
		}
		abs = filepath.Clean(abs)
		if abs != pl.Dir && !strings.HasPrefix(abs, strings.TrimSuffix(pl.Dir, "/")+"/") {
			return target{}, fmt.Errorf("%w: %s is outside your directory %s", ErrOutside, abs, pl.Dir)
		}
		return target{grant: bwrap.Source{Host: pl.Dir, Anchor: pl.Dir}, rel: relTo(pl.Dir, abs), shown: abs}, nil
	}
	wd := pl.Sandbox.Workdir
	if wd == "" {
		wd = bwrap.DefaultWorkdir
	}
	abs := p
	if !path.IsAbs(abs) {
		abs = path.Join(wd, p)
	}
	abs = path.Clean(abs)
	// The deepest grant wins, as in the sandbox, where a later bind at a
	// deeper target covers what is under it.
	best := -1
	grants := pl.Sandbox.Grants()
	for i, g := range grants {
		if within(g.Target, abs) && (best < 0 || len(g.Target) > len(grants[best].Target)) {
			best = i
		}
	}
	if best < 0 {
		if bwrap.SystemVisible(abs) {
			return target{grant: bwrap.Source{Host: "/"}, rel: strings.TrimPrefix(abs, "/"), readOnly: true, shown: abs}, nil
		}
		return target{}, fmt.Errorf("%w: %s is not in your sandbox (it shows %s and its links)", ErrOutside, abs, wd)
	}
	g := grants[best]
	return target{grant: g.Source, rel: relTo(g.Target, abs), readOnly: g.ReadOnly, shown: abs}, nil
}

// openGrant opens the grant t lies in (O_PATH), for the caller to open
// t.rel, or its parent, beneath it.
func (t target) openGrant() (*os.File, error) {
	f, err := bwrap.Open(t.grant)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrOutside, t.shown, err)
	}
	return f, nil
}

// openBelow opens r beneath the grant of t (O_PATH), mapping the errors.
func (t target) openBelow(dir *os.File, r string) (*os.File, error) {
	f, err := bwrap.OpenBelow(dir, r)
	switch {
	case errors.Is(err, bwrap.ErrLeaves):
		return nil, fmt.Errorf("%w: %s is a symlink that leads out of where it lies", ErrOutside, t.shown)
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("%w: %s", ErrNotFound, t.shown)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", t.shown, err)
	}
	return f, nil
}

func relTo(base, p string) string {
	if p == base {
		return "."
	}
	if base == "/" {
		return strings.TrimPrefix(p, "/")
	}
	return strings.TrimPrefix(p, base+"/")
}

func within(base, p string) bool {
	if base == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == base || strings.HasPrefix(p, base+"/")
}
