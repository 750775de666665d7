package bwrap

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Errors. Test for them with errors.Is.
var (
	// ErrInvalidSpec: a Spec or command that Argv refuses to build.
	ErrInvalidSpec = errors.New("bwrap: invalid spec")
	// ErrNotInstalled: no bwrap executable was found.
	ErrNotInstalled = errors.New("bwrap: bubblewrap is not installed")
	// ErrLinkRefused: CheckLink refused a host path.
	ErrLinkRefused = errors.New("bwrap: link refused")
)

// InstallHint is the fix for ErrNotInstalled.
const InstallHint = "install bubblewrap: sudo apt-get install bubblewrap"

const (
	// DefaultWorkdir is where Spec.Root is bound, and the working directory
	// inside the sandbox, when Spec.Workdir is empty.
	DefaultWorkdir = "/workspace"

	// DefaultPath is PATH inside the sandbox unless Spec.Env sets it.
	DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

	// ShellDir is where a shell (PlanShell) binds its state directory. Spec mounts may
	// not use it.
	ShellDir = "/.substrat-shell"
)

// systemDirs are bound read-only from the host when they exist. /usr is
// required; the others are symlinks into /usr on a merged-/usr system, and
// binding them follows the link, so --ro-bind-try works on both layouts.
var systemDirs = []string{"/bin", "/sbin", "/lib", "/lib64"}

// etcFiles are the parts of /etc a program needs to start, find users and
// check certificates. The rest of /etc stays out.
var etcFiles = []string{
	"/etc/ld.so.cache",
	"/etc/alternatives",
	"/etc/passwd",
	"/etc/group",
	"/etc/nsswitch.conf",
	"/etc/localtime",
	"/etc/ssl",
	"/etc/ca-certificates",
}

// etcNetFiles are added to etcFiles when the sandbox has the network.
var etcNetFiles = []string{"/etc/resolv.conf", "/etc/hosts"}

// reserved are the targets a Spec may not bind at or under: the system
// directories, the sandbox's own /etc, /proc and /dev, and Shell's state.
var reserved = []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/proc", "/dev", ShellDir}

// Mount binds a host path into the sandbox.
type Mount struct {
	Source          // the host side, and how it is resolved
	Target   string // absolute, clean path inside the sandbox
	ReadOnly bool
}

// Spec describes a sandbox.
type Spec struct {
	// Root is the host directory bound at Workdir: the workspace root.
	// Required.
	Root Source
	// RootReadOnly binds Root read-only.
	RootReadOnly bool
	// Mounts are bound after Root, in order; a later mount may sit inside
	// Root or inside an earlier mount.
	Mounts []Mount
	// Network keeps the host's network namespace. Without it the sandbox
	// has only a loopback interface.
	Network bool
	// Env is the environment inside the sandbox, together with PATH
	// (DefaultPath), HOME (Workdir) and TERM (dumb); Env may override
	// those three. bwrap sets PWD to Workdir as it enters it. Nothing
	// else of the caller's environment gets in.
	Env map[string]string
	// Workdir is where Root is bound and the working directory inside;
	// DefaultWorkdir when empty.
	Workdir string
}

// workdir returns s.Workdir or its default.
func (s Spec) workdir() string {
	if s.Workdir == "" {
		return DefaultWorkdir
	}
	return s.Workdir
}

// Grants lists what the spec makes visible from the host: Root (at
// Workdir) first, then the mounts. It is what CheckLink takes.
func (s Spec) Grants() []Mount {
	g := make([]Mount, 0, 1+len(s.Mounts))
	g = append(g, Mount{Source: s.Root, Target: s.workdir(), ReadOnly: s.RootReadOnly})
	return append(g, s.Mounts...)
}

// Argv returns the full command line that runs cmd inside the sandbox s,
// starting with bwrapPath. It touches no file: paths are checked for form
// only. Every bind of the spec is made from a descriptor, --bind-fd N or
// --ro-bind-fd N, numbered from 3 in the order of Grants: the root, then
// the mounts. launch.Command opens them (Open) and passes them in that order.
//
// It fails with ErrInvalidSpec when a path is relative, unclean or has a
// ".." component, when a source's anchor or beneath does not contain it,
// when a target is "/", shadows a system directory, /etc, /proc, /dev or
// ShellDir, or is used twice, when an environment variable cannot be
// passed, or when cmd is empty.
func Argv(bwrapPath string, s Spec, cmd []string) ([]string, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	return build(bwrapPath, s, nil, cmd, false)
}

// PathArgv is Argv for another machine, where no descriptor can be
// passed: every bind is made from its Source.Host path as that machine
// has it (--bind PATH TARGET, --ro-bind PATH TARGET), which bwrap there
// resolves, following symlinks. The caller chooses paths that nobody it
// does not trust can change on that machine (an executor's place for
// the root, the host's own installation for the rest); Anchor and
// Beneath are not enforced there.
func PathArgv(bwrapPath string, s Spec, cmd []string) ([]string, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	return build(bwrapPath, s, nil, cmd, true)
}

// build returns the command line for s plus the extra mounts, which are not
// checked against the reserved targets (PlanShell uses one for its state),
// binding from descriptors, or from paths if byPath.
func build(bwrapPath string, s Spec, extra []Mount, cmd []string, byPath bool) ([]string, error) {
	if bwrapPath == "" {
		return nil, fmt.Errorf("%w: empty bwrap path", ErrInvalidSpec)
	}
	if len(cmd) == 0 || cmd[0] == "" {
		return nil, fmt.Errorf("%w: empty command", ErrInvalidSpec)
	}
	for _, a := range cmd {
		if strings.ContainsRune(a, 0) {
			return nil, fmt.Errorf("%w: command argument %q contains a NUL byte", ErrInvalidSpec, a)
		}
	}
	wd := s.workdir()

	argv := []string{bwrapPath,
		"--die-with-parent",
		"--new-session",
		"--unshare-all",
	}
	if s.Network {
		argv = append(argv, "--share-net")
	}
	argv = append(argv, "--cap-drop", "ALL")
	argv = append(argv, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--ro-bind", "/usr", "/usr")
	for _, d := range systemDirs {
		argv = append(argv, "--ro-bind-try", d, d)
	}
	for _, f := range etcFiles {
		argv = append(argv, "--ro-bind-try", f, f)
	}
	if s.Network {
		for _, f := range etcNetFiles {
			argv = append(argv, "--ro-bind-try", f, f)
		}
	}

	for i, m := range append(s.Grants(), extra...) {
		if byPath {
			argv = append(argv, strings.TrimSuffix(bindFlag(m.ReadOnly), "-fd"), m.Host, m.Target)
			continue
		}
		argv = append(argv, bindFlag(m.ReadOnly), strconv.Itoa(firstFD+i), m.Target)
	}
	argv = append(argv, "--remount-ro", "/", "--chdir", wd, "--")
	return append(argv, cmd...), nil
}

// Environ returns the environment of the sandbox s, sorted: s.Env with
// PATH (DefaultPath), HOME (the workdir) and TERM (dumb) unless s.Env sets
// them. launch.Command gives bwrap exactly this environment, which bwrap hands on;
// it is not on the command line, where any user could read a secret in it.
func Environ(s Spec) []string {
	env := map[string]string{"PATH": DefaultPath, "HOME": s.workdir(), "TERM": "dumb"}
	for k, v := range s.Env {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// firstFD is the descriptor number of the first bind source in the
// sandboxed command: exec.Cmd.ExtraFiles start after stdin, stdout and
// stderr.
const firstFD = 3

func bindFlag(readOnly bool) string {
	if readOnly {
		return "--ro-bind-fd"
	}
	return "--bind-fd"
}

// validate checks the form of every path and variable of s.
func (s Spec) validate() error {
	if err := s.Root.validate(); err != nil {
		return fmt.Errorf("%w: root: %v", ErrInvalidSpec, err)
	}
	wd := s.workdir()
	if err := ValidateTarget(wd); err != nil {
		return fmt.Errorf("%w: workdir: %v", ErrInvalidSpec, err)
	}
	seen := map[string]bool{wd: true}
	for i, m := range s.Mounts {
		if err := m.Source.validate(); err != nil {
			return fmt.Errorf("%w: mount %d: host: %v", ErrInvalidSpec, i+1, err)
		}
		if err := ValidateTarget(m.Target); err != nil {
			return fmt.Errorf("%w: mount %d: target: %v", ErrInvalidSpec, i+1, err)
		}
		if m.Target == wd {
			return fmt.Errorf("%w: mount %d: target %s would hide the root bound there", ErrInvalidSpec, i+1, m.Target)
		}
		if seen[m.Target] {
			return fmt.Errorf("%w: mount %d: target %s is used twice", ErrInvalidSpec, i+1, m.Target)
		}
		seen[m.Target] = true
	}
	for k, v := range s.Env {
		switch {
		case k == "":
			return fmt.Errorf("%w: environment variable with an empty name", ErrInvalidSpec)
		case strings.ContainsAny(k, "=\x00"):
			return fmt.Errorf("%w: environment variable name %q contains '=' or NUL", ErrInvalidSpec, k)
		case strings.ContainsRune(v, 0):
			return fmt.Errorf("%w: environment variable %s contains a NUL byte", ErrInvalidSpec, k)
		}
	}
	return nil
}

// checkPath checks that p is absolute, clean and has no ".." component.
func checkPath(p string) error {
	switch {
	case p == "":
		return errors.New("empty path")
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("%q contains a NUL byte", p)
	case !filepath.IsAbs(p):
		return fmt.Errorf("%q is not absolute", p)
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return fmt.Errorf("%q contains '..'", p)
		}
	}
	if filepath.Clean(p) != p {
		return fmt.Errorf("%q is not clean (it means %q)", p, filepath.Clean(p))
	}
	return nil
}

// ValidateTarget checks a path inside the sandbox at which something may be
// bound: absolute, clean, no ".." component, not "/", and not at or under
// /usr, /bin, /sbin, /lib, /lib64, /etc, /proc, /dev or ShellDir, which the
// sandbox sets up itself. The error does not wrap ErrInvalidSpec.
func ValidateTarget(t string) error {
	if err := checkPath(t); err != nil {
		return err
	}
	if t == "/" {
		return errors.New(`"/" would hide the whole sandbox`)
	}
	for _, r := range reserved {
		if within(r, t) {
			return fmt.Errorf("%s would shadow %s, which the sandbox provides", t, r)
		}
	}
	return nil
}

// SystemVisible reports whether the clean absolute path p lies in the
// system directories (/usr, /bin, /sbin, /lib, /lib64), which every
// sandbox shows read-only.
func SystemVisible(p string) bool {
	for _, d := range append([]string{"/usr"}, systemDirs...) {
		if within(d, p) {
			return true
		}
	}
	return false
}

// within reports whether the clean path p is base or lies under it.
func within(base, p string) bool {
	if base == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == base || strings.HasPrefix(p, base+"/")
}
