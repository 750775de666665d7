package workspace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/fsstore"
)

// Version is the format version of workspace.json.
const Version = 1

// UserScope is the scope of the user's own workspaces; any other scope is
// the id of the agent that owns the workspace.
const UserScope = fsstore.User

// Modes of a link or a view.
const (
	ModeRO = "ro"
	ModeRW = "rw"
)

// Errors. Test for them with errors.Is.
var (
	// ErrNotFound: no such workspace, link, or path.
	ErrNotFound = errors.New("workspace: not found")
	// ErrExists: a workspace of that name exists already.
	ErrExists = errors.New("workspace: already exists")
	// ErrInvalid: a bad scope, name, link or view, or an unreadable
	// workspace.json.
	ErrInvalid = errors.New("workspace: invalid")
	// ErrInUse: Delete refused because agents or views still use the
	// workspace.
	ErrInUse = errors.New("workspace: in use")
	// ErrEscape: a path leaves what it must stay inside: a view's subdir
	// that resolves outside the source root, or a link whose host path now
	// resolves elsewhere than where it was linked.
	ErrEscape = errors.New("workspace: path escapes")
)

// Link binds a host path into the workspace's sandbox.
type Link struct {
	HostPath  string `json:"host_path"`  // absolute; stored resolved
	MountPath string `json:"mount_path"` // absolute path inside the sandbox
	Mode      string `json:"mode"`       // ModeRO or ModeRW
}

// View makes a workspace's root the root (or a subdirectory of it) of
// another workspace, the source.
type View struct {
	SourceScope string `json:"source_scope"`
	SourceName  string `json:"source_name"`
	// Subdir is relative to the source's root/; empty for the whole root.
	Subdir string `json:"subdir,omitempty"`
	Mode   string `json:"mode"` // ModeRO or ModeRW
}

// Workspace is the content of a workspace.json.
type Workspace struct {
	Version       int       `json:"version"`
	Scope         string    `json:"scope"` // UserScope or an agent id
	Name          string    `json:"name"`
	NetworkAccess bool      `json:"network_access"`
	Links         []Link    `json:"links"`
	View          *View     `json:"view,omitempty"` // only in a view
	Git           *Git      `json:"git,omitempty"`  // only in a git workspace
	CreatedAt     time.Time `json:"created_at"`
}

// Git says that a workspace's root/ is a git clone: of the repository
// whose main working tree is Repo, on Branch, which started at Base.
type Git struct {
	Repo      string `json:"repo"`       // the main working tree (a real path)
	CommonDir string `json:"common_dir"` // its .git directory (a real path)
	Branch    string `json:"branch"`
	Base      string `json:"base"` // a commit id
	// HomeID is the id of the home the workspace was made in (its
	// home.json), which owns Branch in Repo. A copy of the home holds the
	// same clone, sharing the repository: it refuses git work on the
	// workspace until re-attached (see CopiedFrom).
	HomeID string `json:"home_id,omitempty"`
}

// Ref is "scope/name", how messages name a workspace.
func (w *Workspace) Ref() string { return w.Scope + "/" + w.Name }

// ValidateScope checks a scope: UserScope or a canonical agent id.
func ValidateScope(scope string) error {
	if scope == UserScope || fsstore.IsID(scope) {
		return nil
	}
	return fmt.Errorf("%w: scope %q is neither %s nor a canonical agent id", ErrInvalid, scope, UserScope)
}

// ValidateName checks a workspace name: the rules of fsstore.ValidateName,
// and no leading "." (such names are the store's temporary directories).
func ValidateName(name string) error {
	if err := fsstore.ValidateName(name); err != nil {
		return fmt.Errorf("%w: workspace name (same rules as agent names): %v", ErrInvalid, err)
	}
	if strings.HasPrefix(name, ".") {
		return fmt.Errorf("%w: workspace name %q starts with '.'", ErrInvalid, name)
	}
	return nil
}

func validateMode(what, mode string) error {
	if mode != ModeRO && mode != ModeRW {
		return fmt.Errorf("%w: %s mode %q is neither %q nor %q", ErrInvalid, what, mode, ModeRO, ModeRW)
	}
	return nil
}

// ValidateLink checks the form of a link: host_path absolute, clean and
// without "..", mount_path a valid sandbox target (bwrap.ValidateTarget)
// other than the workspace root's /workspace, mode ro or rw. It does not
// look at the host.
func ValidateLink(l Link) error {
	if err := validateMode("link", l.Mode); err != nil {
		return err
	}
	if err := checkHostPath(l.HostPath); err != nil {
		return fmt.Errorf("%w: link host_path: %v", ErrInvalid, err)
	}
	if err := bwrap.ValidateTarget(l.MountPath); err != nil {
		return fmt.Errorf("%w: link mount_path: %v", ErrInvalid, err)
	}
	if l.MountPath == bwrap.DefaultWorkdir {
		return fmt.Errorf("%w: link mount_path %s would hide the workspace root", ErrInvalid, l.MountPath)
	}
	return nil
}

// ResolveTarget turns a link's mount path as a user or an agent gives it
// into the absolute path inside the sandbox: a relative one ("data",
// "lib/x") is under the workspace root, /workspace. ".." is refused
// either way; the result is checked as ValidateLink checks it.
func ResolveTarget(t string) (string, error) {
	switch {
	case t == "":
		return "", fmt.Errorf("%w: link mount_path is empty", ErrInvalid)
	case hasDotDot(t):
		return "", fmt.Errorf("%w: link mount_path %q contains '..'", ErrInvalid, t)
	case !filepath.IsAbs(t):
		t = filepath.Join(bwrap.DefaultWorkdir, t)
	}
	t = filepath.Clean(t)
	if err := bwrap.ValidateTarget(t); err != nil {
		return "", fmt.Errorf("%w: link mount_path: %v", ErrInvalid, err)
	}
	if t == bwrap.DefaultWorkdir {
		return "", fmt.Errorf("%w: link mount_path %s would hide the workspace root", ErrInvalid, t)
	}
	return t, nil
}

// checkHostPath checks that p is absolute, clean and has no "..".
func checkHostPath(p string) error {
	switch {
	case p == "":
		return errors.New("empty path")
	case !filepath.IsAbs(p):
		return fmt.Errorf("%q is not absolute", p)
	case hasDotDot(p):
		return fmt.Errorf("%q contains '..'", p)
	case filepath.Clean(p) != p:
		return fmt.Errorf("%q is not clean (it means %q)", p, filepath.Clean(p))
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("%q contains a NUL byte", p)
	}
	return nil
}

func hasDotDot(p string) bool {
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return true
		}
	}
	return false
}

// validateView checks the form of a view.
func validateView(v *View) error {
	if err := validateMode("view", v.Mode); err != nil {
		return err
	}
	if err := ValidateScope(v.SourceScope); err != nil {
		return fmt.Errorf("view source: %w", err)
	}
	if err := ValidateName(v.SourceName); err != nil {
		return fmt.Errorf("view source: %w", err)
	}
	switch s := v.Subdir; {
	case s == "":
	case filepath.IsAbs(s):
		return fmt.Errorf("%w: view subdir %q is absolute; give it relative to the source root", ErrInvalid, s)
	case hasDotDot(s):
		return fmt.Errorf("%w: view subdir %q contains '..'", ErrInvalid, s)
	case filepath.Clean(s) != s || s == ".":
		return fmt.Errorf("%w: view subdir %q is not clean", ErrInvalid, s)
	case strings.ContainsRune(s, 0):
		return fmt.Errorf("%w: view subdir %q contains a NUL byte", ErrInvalid, s)
	}
	return nil
}

// Validate checks every field of w for form; it does not look at the host.
func (w *Workspace) Validate() error {
	if w.Version != Version {
		return fmt.Errorf("%w: version %d, this substrat reads version %d", ErrInvalid, w.Version, Version)
	}
	if err := ValidateScope(w.Scope); err != nil {
		return err
	}
	if err := ValidateName(w.Name); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, l := range w.Links {
		if err := ValidateLink(l); err != nil {
			return err
		}
		if seen[l.MountPath] {
			return fmt.Errorf("%w: two links at mount_path %s", ErrInvalid, l.MountPath)
		}
		seen[l.MountPath] = true
	}
	if w.View != nil {
		if err := validateView(w.View); err != nil {
			return err
		}
		if w.View.SourceScope == w.Scope && w.View.SourceName == w.Name {
			return fmt.Errorf("%w: workspace %s is a view of itself", ErrInvalid, w.Ref())
		}
	}
	if g := w.Git; g != nil {
		switch {
		case w.View != nil:
			return fmt.Errorf("%w: workspace %s cannot be both a view and a git workspace", ErrInvalid, w.Ref())
		case !filepath.IsAbs(g.Repo) || filepath.Clean(g.Repo) != g.Repo || g.CommonDir != filepath.Join(g.Repo, ".git"):
			return fmt.Errorf("%w: workspace %s: git repo %q must be an absolute, clean path, and common_dir its .git", ErrInvalid, w.Ref(), g.Repo)
		case g.Branch == "" || strings.ContainsAny(g.Branch, " \x00\n") || strings.HasPrefix(g.Branch, "-"):
			return fmt.Errorf("%w: workspace %s: git branch %q", ErrInvalid, w.Ref(), g.Branch)
		case len(g.Base) < 7 || strings.Trim(g.Base, "0123456789abcdef") != "":
			return fmt.Errorf("%w: workspace %s: git base %q is not a commit id", ErrInvalid, w.Ref(), g.Base)
		}
	}
	return nil
}

// Spec returns the sandbox of w: its root/ bound read-write at
// bwrap.DefaultWorkdir (for a view, the source's root/ or its subdir, with
// the view's mode), its links as mounts in order, and the network if
// network_access. Env is left for the caller to fill.
//
// Each bind says how launch.Command resolves it when the sandbox is built,
// which is what holds against a process that swaps a directory for a
// symlink: a root/ is found beneath the home (the anchor), with no
// symlink below it; a view's subdir beneath the source's root/, following
// only symlinks that stay inside it; a link's host path, stored with its
// symlinks resolved, with no symlink anywhere.
//
// Spec also looks at the host by name now, so that a missing root or a
// link that has become a symlink fails early with a message that says
// what to do (ErrNotFound, ErrEscape); that look is advice, the
// resolution at build time is the guarantee.
func (w *Workspace) Spec(l fsstore.Layout) (bwrap.Spec, error) {
	s := bwrap.Spec{Network: w.NetworkAccess}
	if w.View == nil {
		root := l.WorkspaceRoot(w.Scope, w.Name)
		if err := isDir(root); err != nil {
			return bwrap.Spec{}, fmt.Errorf("%w: workspace %s has no root directory: %v", ErrNotFound, w.Ref(), err)
		}
		s.Root = bwrap.Source{Host: root, Anchor: l.Home}
	} else {
		src, err := viewSource(l, *w.View)
		if err != nil {
			return bwrap.Spec{}, fmt.Errorf("view %s: %w", w.Ref(), err)
		}
		s.Root, s.RootReadOnly = src, w.View.Mode == ModeRO
		// A whole view of a git workspace shows its root/.git, the empty
		// mount point of the clone's git directory, read-only: no view
		// can put a repository where git on the host would find it.
		dotgit := filepath.Join(l.WorkspaceRoot(w.View.SourceScope, w.View.SourceName), ".git")
		if fi, err := os.Lstat(dotgit); w.View.Subdir == "" && err == nil && fi.IsDir() {
			s.Mounts = append(s.Mounts, bwrap.Mount{Source: bwrap.Source{Host: dotgit, Anchor: l.Home}, Target: GitDirTarget, ReadOnly: true})
		}
	}
	if g := w.Git; g != nil {
		if err := checkGit(l, w); err != nil {
			return bwrap.Spec{}, fmt.Errorf("%w: %v", ErrEscape, err)
		}
		s.Mounts = append(s.Mounts, gitMounts(l, w)...)
	}
	for _, k := range w.Links {
		resolved, err := filepath.EvalSymlinks(k.HostPath)
		if err != nil {
			return bwrap.Spec{}, fmt.Errorf("%w: workspace %s: link at %s: host path %s: %v", ErrNotFound, w.Ref(), k.MountPath, k.HostPath, err)
		}
		if resolved != k.HostPath {
			return bwrap.Spec{}, fmt.Errorf("%w: workspace %s: link at %s: %s now resolves to %s; unlink it and link it again",
				ErrEscape, w.Ref(), k.MountPath, k.HostPath, resolved)
		}
		s.Mounts = append(s.Mounts, bwrap.Mount{Source: bwrap.Source{Host: k.HostPath}, Target: k.MountPath, ReadOnly: k.Mode == ModeRO})
	}
	return s, nil
}

// GitDirTarget is where a git workspace's git directory is bound in its
// sandbox.
const GitDirTarget = bwrap.DefaultWorkdir + "/.git"

// gitMounts are the binds of a git workspace after its root: the clone's
// git directory at /workspace/.git, its config, hooks/ and info/
// read-only over it, and the repository's .git read-only at its own path
// (the clone's alternates and its remote "origin" name it).
func gitMounts(l fsstore.Layout, w *Workspace) []bwrap.Mount {
	gitDir := l.WorkspaceGitDir(w.Scope, w.Name)
	ms := []bwrap.Mount{{Source: bwrap.Source{Host: gitDir, Anchor: l.Home}, Target: GitDirTarget}}
	for _, ro := range GitReadOnly {
		ms = append(ms, bwrap.Mount{Source: bwrap.Source{Host: filepath.Join(gitDir, ro), Anchor: l.Home},
			Target: GitDirTarget + "/" + ro, ReadOnly: true})
	}
	return append(ms, bwrap.Mount{Source: bwrap.Source{Host: w.Git.CommonDir}, Target: w.Git.CommonDir, ReadOnly: true})
}

// GitReadOnly are the files and directories of a clone's git directory
// that are read-only in its sandbox: what git reads as configuration or
// code. The daemon makes each of them when it makes the clone.
var GitReadOnly = []string{"config", "hooks", "info"}

// ReadOnlySpec is Spec with every bind read-only: the sandbox the daemon
// runs git in to read what w's agents wrote.
func (w *Workspace) ReadOnlySpec(l fsstore.Layout) (bwrap.Spec, error) {
	s, err := w.Spec(l)
	if err != nil {
		return s, err
	}
	s.RootReadOnly = true
	ms := make([]bwrap.Mount, len(s.Mounts))
	for i, m := range s.Mounts {
		m.ReadOnly = true
		ms[i] = m
	}
	s.Mounts = ms
	return s, nil
}

// ShellState is where launch.Shell keeps w's shell state: beside root/,
// never inside it, so that it works for read-only views; found beneath the
// home like a root/.
func (w *Workspace) ShellState(l fsstore.Layout) bwrap.Source {
	return bwrap.Source{Host: l.WorkspaceState(w.Scope, w.Name), Anchor: l.Home}
}

// viewSource returns how the root of a view is found: the source's root/
// beneath the home, and the subdir beneath that root/.
func viewSource(l fsstore.Layout, v View) (bwrap.Source, error) {
	if _, err := viewRoot(l, v); err != nil { // advice: early, clear errors
		return bwrap.Source{}, err
	}
	base := l.WorkspaceRoot(v.SourceScope, v.SourceName)
	if v.Subdir == "" {
		return bwrap.Source{Host: base, Anchor: l.Home}, nil
	}
	return bwrap.Source{Host: filepath.Join(base, v.Subdir), Anchor: l.Home, Beneath: base}, nil
}

// viewRoot resolves the host directory a view binds as its root and checks
// that it lies inside the source's root/.
func viewRoot(l fsstore.Layout, v View) (string, error) {
	src := v.SourceScope + "/" + v.SourceName
	base, err := filepath.EvalSymlinks(l.WorkspaceRoot(v.SourceScope, v.SourceName))
	if err != nil {
		return "", fmt.Errorf("%w: source workspace %s has no root: %v", ErrNotFound, src, err)
	}
	if v.Subdir == "" {
		return base, nil
	}
	resolved, err := filepath.EvalSymlinks(filepath.Join(base, v.Subdir))
	if err != nil {
		return "", fmt.Errorf("%w: subdir %q of workspace %s: %v", ErrNotFound, v.Subdir, src, err)
	}
	if !within(base, resolved) {
		return "", fmt.Errorf("%w: subdir %q of workspace %s is a symlink that leaves its root (it resolves to %s)",
			ErrEscape, v.Subdir, src, resolved)
	}
	if within(filepath.Join(base, ".git"), resolved) {
		return "", fmt.Errorf("%w: subdir %q of workspace %s is its .git, which no sandbox may show", ErrEscape, v.Subdir, src)
	}
	if err := isDir(resolved); err != nil {
		return "", fmt.Errorf("%w: subdir %q of workspace %s: %v", ErrInvalid, v.Subdir, src, err)
	}
	return resolved, nil
}

func isDir(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", p)
	}
	return nil
}

// within reports whether the clean path p is base or lies under it.
func within(base, p string) bool {
	if base == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == base || strings.HasPrefix(p, base+"/")
}
