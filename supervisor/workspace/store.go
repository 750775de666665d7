package workspace

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/internal/jsontext"
)

// Permission of the directories the store makes.
const dirPerm = 0o700

// Store keeps workspaces as plain files under a home's workspaces/. It is
// safe for concurrent use by one process; the daemon is the only writer of
// a home.
type Store struct {
	layout fsstore.Layout
	fs     fsstore.FS
	now    func() time.Time // the clock of created_at; replaced by tests
	git    GitRunner        // nil: git workspaces are refused

	mu sync.Mutex // serializes every change to workspaces/
}

// NewStore returns the store of the home that layout names, doing its
// file I/O through fsys (nil: the real file system).
func NewStore(layout fsstore.Layout, fsys fsstore.FS) *Store {
	if fsys == nil {
		fsys = fsstore.OS{}
	}
	return &Store{layout: layout, fs: fsys, now: time.Now}
}

// WithGit makes s run git for git workspaces through g, and returns s.
func (s *Store) WithGit(g GitRunner) *Store {
	s.git = g
	return s
}

// Git is the store's GitRunner, or nil.
func (s *Store) Git() GitRunner { return s.git }

// scopeDir is workspaces/<scope>.
func (s *Store) scopeDir(scope string) string {
	return s.layout.WorkspaceScopeDir(scope)
}

// tempDir is the name a workspace directory has while it is built or
// removed: workspaces/<scope>/.tmp-<name>.
func (s *Store) tempDir(scope, name string) string {
	return s.layout.TempWorkspaceDir(scope, name)
}

// Create makes the workspace w: Scope, Name, NetworkAccess, Links and, for
// a view, View are taken from w; Version and CreatedAt are set. Each link's
// host path must exist and is stored resolved. A view's source must exist
// and its subdir must resolve to a directory inside the source's root/
// (see CreateView). A plain workspace gets an empty root/.
//
// It fails with ErrInvalid, ErrExists, ErrNotFound (a link's host path or a
// view's source) or ErrEscape.
func (s *Store) Create(w Workspace) (*Workspace, error) {
	s.mu.Lock()
	defer s.mu.Unlock()

	w.Version = Version
	w.CreatedAt = s.now().UTC().Round(0)
	if err := ValidateScope(w.Scope); err != nil {
		return nil, err
	}
	if err := ValidateName(w.Name); err != nil {
		return nil, err
	}
	links := make([]Link, 0, len(w.Links))
	for _, l := range w.Links {
		l, err := resolveLink(l)
		if err != nil {
			return nil, err
		}
		if err := s.checkGitLinkLocked(l); err != nil {
			return nil, err
		}
		links = append(links, l)
	}
	w.Links = links
	if w.View != nil {
		v, err := s.prepareViewLocked(*w.View)
		if err != nil {
			return nil, err
		}
		w.View = &v
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	data, err := encode(&w)
	if err != nil {
		return nil, err
	}

	final := s.layout.WorkspaceDir(w.Scope, w.Name)
	if _, err := s.fs.Stat(final); err == nil {
		if _, err := s.fs.Stat(s.layout.WorkspaceFile(w.Scope, w.Name)); err != nil {
			return nil, fmt.Errorf("%w: %s is in the way (a directory without %s); remove it",
				ErrExists, final, fsstore.WorkspaceFileName)
		}
		return nil, fmt.Errorf("%w: workspace %s", ErrExists, w.Ref())
	}
	if err := s.mkdirSynced(s.layout.WorkspacesDir()); err != nil {
		return nil, err
	}
	if err := s.mkdirSynced(s.scopeDir(w.Scope)); err != nil {
		return nil, err
	}
	tmp := s.tempDir(w.Scope, w.Name)
	if err := s.fs.RemoveAll(tmp); err != nil { // a leftover of a crash
		return nil, fmt.Errorf("create workspace %s: %w", w.Ref(), err)
	}
	if w.Git != nil {
		err = s.buildGit(tmp, w.Git, data)
	} else {
		err = s.build(tmp, w.View == nil, data)
	}
	if err == nil {
		err = s.fs.RenameNoReplace(tmp, final)
		if errors.Is(err, fs.ErrExist) {
			err = fmt.Errorf("%w: workspace %s", ErrExists, w.Ref())
		}
	}
	if err == nil {
		err = s.fs.SyncDir(s.scopeDir(w.Scope))
	}
	if err != nil {
		if w.Git != nil {
			s.undoGit(tmp)
		}
		s.fs.RemoveAll(tmp)
		return nil, fmt.Errorf("create workspace %s: %w", w.Ref(), err)
	}
	if w.Git != nil {
		gitFault("renamed")
		if err := s.finishGit(final); err != nil {
			return nil, fmt.Errorf("create workspace %s: the clone is in place, but %w (the next start finishes it)", w.Ref(), err)
		}
	}
	return &w, nil
}

// build fills the temporary directory of a new workspace: root/ first,
// workspace.json last.
func (s *Store) build(dir string, withRoot bool, data []byte) error {
	if err := s.fs.Mkdir(dir, dirPerm); err != nil {
		return err
	}
	if withRoot {
		if err := s.fs.Mkdir(filepath.Join(dir, fsstore.WorkspaceRootName), dirPerm); err != nil {
			return err
		}
	}
	// ReplaceFile fsyncs dir, which also makes root/ durable.
	return fsstore.ReplaceFile(s.fs, filepath.Join(dir, fsstore.WorkspaceFileName), data)
}

// mkdirSynced makes dir if it is missing and fsyncs its parent.
func (s *Store) mkdirSynced(dir string) error {
	err := s.fs.Mkdir(dir, dirPerm)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.fs.SyncDir(filepath.Dir(dir))
}

// CreateView makes the view scope/name of v's source workspace. v.Subdir
// (relative to the source's root/, empty for all of it) must have no ".."
// and must resolve, symlinks followed, to a directory inside the source's
// root/; it is stored resolved. When the source is itself a view, the new
// view is made of that view's source, with the subdirs joined, and is
// read-only if either is. Errors are those of Create.
func (s *Store) CreateView(scope, name string, v View) (*Workspace, error) {
	return s.Create(Workspace{Scope: scope, Name: name, View: &v})
}

// prepareViewLocked checks v against the host and returns it flattened to
// a view of a plain workspace, with its subdir resolved.
func (s *Store) prepareViewLocked(v View) (View, error) {
	if err := validateView(&v); err != nil {
		return View{}, err
	}
	src, err := s.getLocked(v.SourceScope, v.SourceName)
	if err != nil {
		return View{}, fmt.Errorf("view source: %w", err)
	}
	if src.View != nil {
		if src.View.Mode == ModeRO {
			v.Mode = ModeRO
		}
		v.Subdir = filepath.Join(src.View.Subdir, v.Subdir)
		v.SourceScope, v.SourceName = src.View.SourceScope, src.View.SourceName
		if v.Subdir == "." {
			v.Subdir = ""
		}
	}
	root, err := viewRoot(s.layout, v)
	if err != nil {
		return View{}, err
	}
	base, err := filepath.EvalSymlinks(s.layout.WorkspaceRoot(v.SourceScope, v.SourceName))
	if err != nil {
		return View{}, err
	}
	rel, err := filepath.Rel(base, root)
	if err != nil {
		return View{}, err
	}
	if rel == "." {
		rel = ""
	}
	v.Subdir = rel
	return v, nil
}

// resolveLink checks l's form and that its host path exists and is a real
// path: no component of it a symlink. A path that goes through a symlink
// is refused, never resolved here, because by the time it is resolved a
// sandboxed process may have swapped a directory in it for a symlink to
// "/". An agent's link comes resolved by bwrap.CheckLink; a path a user
// names is resolved first with ResolveHostPath.
func resolveLink(l Link) (Link, error) {
	if err := checkHostPath(l.HostPath); err != nil {
		return Link{}, fmt.Errorf("%w: link host_path: %v", ErrInvalid, err)
	}
	if err := ValidateLink(l); err != nil {
		return Link{}, err
	}
	f, err := bwrap.Open(bwrap.Source{Host: l.HostPath})
	switch {
	case errors.Is(err, bwrap.ErrSymlink):
		return Link{}, fmt.Errorf("%w: link host_path: %v", ErrEscape, err)
	case err != nil:
		return Link{}, fmt.Errorf("%w: link host_path %s: %v", ErrNotFound, l.HostPath, err)
	}
	f.Close()
	return l, nil
}

// ResolveHostPath resolves the symlinks of a host path a user names for a
// link (the user may name any host path); Store.Link takes the result.
func ResolveHostPath(p string) (string, error) {
	if hasDotDot(p) {
		return "", fmt.Errorf("%w: link host_path: %q contains '..'", ErrInvalid, p)
	}
	if err := checkHostPath(filepath.Clean(p)); err != nil {
		return "", fmt.Errorf("%w: link host_path: %v", ErrInvalid, err)
	}
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("%w: link host_path %s: %v", ErrNotFound, p, err)
	}
	return resolved, nil
}

// Get reads the workspace scope/name. It fails with ErrNotFound when there
// is none, and with ErrInvalid when its workspace.json cannot be read.
func (s *Store) Get(scope, name string) (*Workspace, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.getLocked(scope, name)
}

func (s *Store) getLocked(scope, name string) (*Workspace, error) {
	if err := ValidateScope(scope); err != nil {
		return nil, err
	}
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	path := s.layout.WorkspaceFile(scope, name)
	data, err := s.fs.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: workspace %s/%s", ErrNotFound, scope, name)
	}
	if err != nil {
		return nil, err
	}
	w, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if w.Scope != scope || w.Name != name {
		return nil, fmt.Errorf("%w: %s: it says it is workspace %s", ErrInvalid, path, w.Ref())
	}
	return w, nil
}

// List returns every workspace of every scope, sorted by scope then name.
// Directories without workspace.json and names starting with "." are not
// workspaces and are passed over. A workspace that cannot be read, or an
// entry that is not a valid scope or name, is reported in the error, which
// joins all such problems; the workspaces returned are still good.
func (s *Store) List() ([]*Workspace, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listLocked()
}

func (s *Store) listLocked() ([]*Workspace, error) {
	scopes, err := s.fs.ReadDir(s.layout.WorkspacesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*Workspace
	var errs []error
	for _, sc := range scopes {
		if strings.HasPrefix(sc.Name(), ".") || !sc.IsDir() {
			continue
		}
		if err := ValidateScope(sc.Name()); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", filepath.Join(s.layout.WorkspacesDir(), sc.Name()), err))
			continue
		}
		names, err := s.fs.ReadDir(s.scopeDir(sc.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, n := range names {
			if strings.HasPrefix(n.Name(), ".") || !n.IsDir() {
				continue
			}
			w, err := s.getLocked(sc.Name(), n.Name())
			switch {
			case errors.Is(err, ErrNotFound):
			case err != nil:
				errs = append(errs, err)
			default:
				out = append(out, w)
			}
		}
	}
	return out, errors.Join(errs...)
}

// Delete removes the workspace scope/name and all its files. It refuses,
// with ErrInUse, when a view is made of it or when inUse (supplied by the
// daemon; nil means no agent uses it) names users of it.
func (s *Store) Delete(scope, name string, inUse func(scope, name string) []string) error {
	return s.DeleteWith(scope, name, inUse, DeleteOptions{})
}

// DeleteWith is Delete with the options of a git workspace: its worktree
// goes first (refused if it holds work, unless opts.Force), its branch
// stays unless opts.DeleteBranch.
func (s *Store) DeleteWith(scope, name string, inUse func(scope, name string) []string, opts DeleteOptions) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, err := s.getLocked(scope, name)
	if err != nil {
		return err
	}
	all, _ := s.listLocked() // an unreadable workspace cannot be a view of w
	var views []string
	for _, o := range all {
		if o.View != nil && o.View.SourceScope == scope && o.View.SourceName == name {
			views = append(views, o.Ref())
		}
	}
	if len(views) > 0 {
		return fmt.Errorf("%w: workspace %s is the source of view %s; delete the views first",
			ErrInUse, w.Ref(), strings.Join(views, ", "))
	}
	if inUse != nil {
		if users := inUse(scope, name); len(users) > 0 {
			return fmt.Errorf("%w: workspace %s is used by %s", ErrInUse, w.Ref(), strings.Join(users, ", "))
		}
	}

	if w.Git != nil {
		if err := s.removeGit(w, opts); err != nil {
			return err
		}
	}
	final := s.layout.WorkspaceDir(scope, name)
	tmp := s.tempDir(scope, name)
	if err := s.fs.RemoveAll(tmp); err != nil {
		return fmt.Errorf("delete workspace %s: %w", w.Ref(), err)
	}
	if err := s.fs.Rename(final, tmp); err != nil {
		return fmt.Errorf("delete workspace %s: %w", w.Ref(), err)
	}
	if err := s.fs.SyncDir(s.scopeDir(scope)); err != nil {
		return fmt.Errorf("delete workspace %s: %w", w.Ref(), err)
	}
	if err := removeAll(s.fs, tmp); err != nil {
		return fmt.Errorf("workspace %s is deleted, but removing its files failed (Sweep retries): %w", w.Ref(), err)
	}
	if scope != UserScope && s.fs.Remove(s.scopeDir(scope)) == nil { // only if empty
		s.fs.SyncDir(s.layout.WorkspacesDir())
	}
	return nil
}

// removeAll removes dir like RemoveAll, and if that fails, makes every
// directory under it writable and tries again: workspaces hold trees with
// read-only directories, such as Go's module cache.
func removeAll(fsys fsstore.FS, dir string) error {
	if fsys.RemoveAll(dir) == nil {
		return nil
	}
	if f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0); err == nil {
		makeWritable(f)
		f.Close()
	}
	return fsys.RemoveAll(dir)
}

// makeWritable makes the directory d and every directory under it
// writable by its owner. It walks by descriptor, each directory opened
// relative to its parent without following a symlink, because a process
// in a sandbox that binds part of the tree may swap a directory for a
// symlink while the walk runs, and a chmod by name would then change a
// host directory outside the tree.
func makeWritable(d *os.File) {
	d.Chmod(dirPerm)
	names, _ := d.Readdirnames(-1)
	for _, name := range names {
		fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // not a directory, a symlink, or gone
		}
		sub := os.NewFile(uintptr(fd), filepath.Join(d.Name(), name))
		makeWritable(sub)
		sub.Close()
	}
}

// Link adds l to the workspace scope/name and returns the workspace as
// stored. l.HostPath must exist; it is stored resolved. The store does not
// decide who may link what: for a link an agent asks for, check it first
// with bwrap.CheckLink against the grants of the agent's own workspace,
// and pass the path it returns.
//
// It fails with ErrNotFound, ErrInvalid (including a mount_path that is
// already linked) or an I/O error.
func (s *Store) Link(scope, name string, l Link) (*Workspace, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, err := s.getLocked(scope, name)
	if err != nil {
		return nil, err
	}
	if l.MountPath, err = ResolveTarget(l.MountPath); err != nil {
		return nil, err
	}
	l, err = resolveLink(l)
	if err != nil {
		return nil, err
	}
	if err := s.checkGitLinkLocked(l); err != nil {
		return nil, err
	}
	for _, o := range w.Links {
		if o.MountPath == l.MountPath {
			return nil, fmt.Errorf("%w: workspace %s already links %s at %s; unlink it first", ErrInvalid, w.Ref(), o.HostPath, l.MountPath)
		}
	}
	w.Links = append(w.Links, l)
	return w, s.writeLocked(w)
}

// Unlink removes the link at mountPath from the workspace scope/name and
// returns the workspace as stored. It fails with ErrNotFound when there is
// no such workspace or link.
func (s *Store) Unlink(scope, name, mountPath string) (*Workspace, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, err := s.getLocked(scope, name)
	if err != nil {
		return nil, err
	}
	if mountPath, err = ResolveTarget(mountPath); err != nil {
		return nil, err
	}
	for i, l := range w.Links {
		if l.MountPath == mountPath {
			w.Links = append(w.Links[:i], w.Links[i+1:]...)
			return w, s.writeLocked(w)
		}
	}
	return nil, fmt.Errorf("%w: workspace %s has no link at %s", ErrNotFound, w.Ref(), mountPath)
}

// writeLocked replaces the workspace.json of w.
func (s *Store) writeLocked(w *Workspace) error {
	if err := w.Validate(); err != nil {
		return err
	}
	data, err := encode(w)
	if err != nil {
		return err
	}
	return fsstore.ReplaceFile(s.fs, s.layout.WorkspaceFile(w.Scope, w.Name), data)
}

// Sweep removes the temporary directories a crash left in workspaces/
// (half-made or half-deleted workspaces) and returns their paths. Call it
// when nothing else uses the store, as the daemon does on start.
func (s *Store) Sweep() ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	scopes, err := s.fs.ReadDir(s.layout.WorkspacesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, sc := range scopes {
		if !sc.IsDir() || strings.HasPrefix(sc.Name(), ".") {
			continue
		}
		entries, err := s.fs.ReadDir(s.scopeDir(sc.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range entries {
			p := filepath.Join(s.scopeDir(sc.Name()), e.Name())
			if !strings.HasPrefix(e.Name(), fsstore.TempPrefix) {
				if _, err := s.fs.Stat(filepath.Join(p, gitMarker)); err == nil { // made, not finished
					errs = append(errs, s.finishGit(p))
				}
				continue
			}
			if err := s.undoGit(p); err != nil {
				errs = append(errs, err)
			}
			if err := removeAll(s.fs, p); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, p)
		}
	}
	return removed, errors.Join(errs...)
}

// encode renders w as workspace.json: indented, links always a list.
func encode(w *Workspace) ([]byte, error) {
	c := *w
	if c.Links == nil {
		c.Links = []Link{}
	}
	data, err := jsontext.MarshalIndent(&c, "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// decode parses and validates a workspace.json; unknown fields are refused.
func decode(data []byte) (*Workspace, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var w Workspace
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrInvalid)
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	return &w, nil
}
