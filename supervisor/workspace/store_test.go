package workspace

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/fsstore"
)

const agentID = "019a6f1e-7c2b-7d3e-9a1b-2c3d4e5f6a7b"

var epoch = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// newStore returns a store on a fresh home with a fixed clock, and a
// directory outside the home for host paths.
func newStore(t *testing.T) (*Store, fsstore.Layout, string) {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l := fsstore.Layout{Home: filepath.Join(base, "home")}
	if err := os.Mkdir(l.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	host := filepath.Join(base, "host")
	if err := os.Mkdir(host, 0o755); err != nil {
		t.Fatal(err)
	}
	s := NewStore(l, nil)
	s.now = func() time.Time { return epoch }
	return s, l, host
}

func mkdirs(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func wantErr(t *testing.T, err, sentinel error, substr string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v containing %q", sentinel, substr)
	}
	if !errors.Is(err, sentinel) {
		t.Errorf("error %q does not wrap %v", err, sentinel)
	}
	if !strings.Contains(err.Error(), substr) {
		t.Errorf("error %q does not contain %q", err, substr)
	}
}

func TestCreateWritesTheDocumentedFile(t *testing.T) {
	s, l, host := newStore(t)
	mkdirs(t, filepath.Join(host, "src"))
	w, err := s.Create(Workspace{Scope: UserScope, Name: "proj", NetworkAccess: true,
		Links: []Link{{HostPath: filepath.Join(host, "src"), MountPath: "/src", Mode: ModeRO}}})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(l.WorkspaceFile(UserScope, "proj"))
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "version": 1,
  "scope": "USER",
  "name": "proj",
  "network_access": true,
  "links": [
    {
      "host_path": "` + filepath.Join(host, "src") + `",
      "mount_path": "/src",
      "mode": "ro"
    }
  ],
  "created_at": "2026-11-22T10:00:00Z"
}
`
	if string(data) != want {
		t.Errorf("workspace.json:\n%s\nwant\n%s", data, want)
	}
	if fi, err := os.Stat(l.WorkspaceRoot(UserScope, "proj")); err != nil || !fi.IsDir() {
		t.Errorf("root/ missing: %v", err)
	}
	got, err := s.Get(UserScope, "proj")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, w) {
		t.Errorf("Get = %+v, Create returned %+v", got, w)
	}

	// An empty link list is written as [], for jq.
	if _, err := s.Create(Workspace{Scope: agentID, Name: "scratch"}); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(l.WorkspaceFile(agentID, "scratch"))
	if !strings.Contains(string(data), `"links": []`) || strings.Contains(string(data), `"view"`) {
		t.Errorf("workspace.json of a bare workspace:\n%s", data)
	}
	// Nothing temporary is left behind.
	entries, _ := os.ReadDir(filepath.Join(l.WorkspacesDir(), UserScope))
	if len(entries) != 1 || entries[0].Name() != "proj" {
		t.Errorf("workspaces/USER holds %v", entries)
	}
}

func TestListAllScopesSorted(t *testing.T) {
	s, _, _ := newStore(t)
	other := fsstore.NewID()
	for _, ref := range [][2]string{{UserScope, "zeta"}, {agentID, "b"}, {UserScope, "alpha"}, {other, "a"}, {agentID, "a"}} {
		if _, err := s.Create(Workspace{Scope: ref[0], Name: ref[1]}); err != nil {
			t.Fatal(err)
		}
	}
	ws, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range ws {
		got = append(got, w.Ref())
	}
	want := []string{agentID + "/a", agentID + "/b", other + "/a", "USER/alpha", "USER/zeta"}
	sort.Strings(want[:3])
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("List = %q, want %q", got, want)
	}

	empty, _, _ := newStore(t)
	if ws, err := empty.List(); err != nil || len(ws) != 0 {
		t.Fatalf("List of an empty home = %v, %v", ws, err)
	}
}

func TestCreateRefusals(t *testing.T) {
	s, _, host := newStore(t)
	mkdirs(t, filepath.Join(host, "d"))
	if _, err := s.Create(Workspace{Scope: UserScope, Name: "taken"}); err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(host, "d")
	link := func(l Link) Workspace { return Workspace{Scope: UserScope, Name: "w", Links: []Link{l}} }
	tests := []struct {
		name     string
		w        Workspace
		sentinel error
		substr   string
	}{
		{"lower-case user", Workspace{Scope: "user", Name: "w"}, ErrInvalid, `scope "user"`},
		{"path scope", Workspace{Scope: "../x", Name: "w"}, ErrInvalid, `scope "../x"`},
		{"upper-case id", Workspace{Scope: strings.ToUpper(agentID), Name: "w"}, ErrInvalid, "canonical agent id"},
		{"empty name", Workspace{Scope: UserScope}, ErrInvalid, "name is empty"},
		{"dotdot name", Workspace{Scope: UserScope, Name: ".."}, ErrInvalid, "'..'"},
		{"slash name", Workspace{Scope: UserScope, Name: "a/b"}, ErrInvalid, "path separator"},
		{"hidden name", Workspace{Scope: UserScope, Name: ".tmp-x"}, ErrInvalid, "starts with '.'"},
		{"space name", Workspace{Scope: UserScope, Name: "a b"}, ErrInvalid, "space"},
		{"exists", Workspace{Scope: UserScope, Name: "taken"}, ErrExists, "USER/taken"},
		{"relative host", link(Link{HostPath: "d", MountPath: "/d", Mode: ModeRO}), ErrInvalid, `"d" is not absolute`},
		{"dotdot host", link(Link{HostPath: d + "/../d", MountPath: "/d", Mode: ModeRO}), ErrInvalid, "contains '..'"},
		{"missing host", link(Link{HostPath: filepath.Join(host, "nope"), MountPath: "/d", Mode: ModeRO}), ErrNotFound, "nope"},
		{"bad mode", link(Link{HostPath: d, MountPath: "/d", Mode: "rwx"}), ErrInvalid, `mode "rwx"`},
		{"relative mount", link(Link{HostPath: d, MountPath: "d", Mode: ModeRO}), ErrInvalid, `"d" is not absolute`},
		{"dotdot mount", link(Link{HostPath: d, MountPath: "/workspace/../etc", Mode: ModeRO}), ErrInvalid, "contains '..'"},
		{"root mount", link(Link{HostPath: d, MountPath: "/", Mode: ModeRO}), ErrInvalid, "would hide"},
		{"system mount", link(Link{HostPath: d, MountPath: "/usr/lib/x", Mode: ModeRO}), ErrInvalid, "would shadow /usr"},
		{"workspace mount", link(Link{HostPath: d, MountPath: "/workspace", Mode: ModeRO}), ErrInvalid, "would hide the workspace root"},
		{"duplicate mounts", Workspace{Scope: UserScope, Name: "w", Links: []Link{
			{HostPath: d, MountPath: "/d", Mode: ModeRO}, {HostPath: host, MountPath: "/d", Mode: ModeRW}}}, ErrInvalid, "two links at mount_path /d"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Create(tt.w)
			wantErr(t, err, tt.sentinel, tt.substr)
		})
	}
	ws, err := s.List()
	if err != nil || len(ws) != 1 {
		t.Fatalf("after refusals List = %v, %v; want only USER/taken", ws, err)
	}
}

func TestLinkUnlink(t *testing.T) {
	s, l, host := newStore(t)
	mkdirs(t, filepath.Join(host, "real"))
	if err := os.Symlink("real", filepath.Join(host, "alias")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(Workspace{Scope: UserScope, Name: "w"}); err != nil {
		t.Fatal(err)
	}
	// The store takes real paths only: a path through a symlink is refused
	// (it could be swapped before it is stored); a user's path is resolved
	// first.
	_, err := s.Link(UserScope, "w", Link{HostPath: filepath.Join(host, "alias"), MountPath: "/data", Mode: ModeRW})
	wantErr(t, err, ErrEscape, filepath.Join(host, "alias")+" is a symlink")
	resolved, err := ResolveHostPath(filepath.Join(host, "alias"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Link(UserScope, "w", Link{HostPath: resolved, MountPath: "/data", Mode: ModeRW})
	if err != nil {
		t.Fatal(err)
	}
	want := []Link{{HostPath: filepath.Join(host, "real"), MountPath: "/data", Mode: ModeRW}}
	if !reflect.DeepEqual(w.Links, want) {
		t.Fatalf("links = %+v, want the resolved %+v", w.Links, want)
	}
	if got, _ := s.Get(UserScope, "w"); !reflect.DeepEqual(got.Links, want) {
		t.Fatalf("stored links = %+v", got.Links)
	}

	_, err = s.Link(UserScope, "w", Link{HostPath: host, MountPath: "/data", Mode: ModeRO})
	wantErr(t, err, ErrInvalid, "already links "+filepath.Join(host, "real")+" at /data")
	_, err = s.Link(UserScope, "w", Link{HostPath: host, MountPath: "/proc/x", Mode: ModeRO})
	wantErr(t, err, ErrInvalid, "would shadow /proc")
	_, err = s.Link(UserScope, "nope", Link{HostPath: host, MountPath: "/x", Mode: ModeRO})
	wantErr(t, err, ErrNotFound, "USER/nope")

	if _, err := s.Link(UserScope, "w", Link{HostPath: host, MountPath: "/all", Mode: ModeRO}); err != nil {
		t.Fatal(err)
	}
	w, err = s.Unlink(UserScope, "w", "/data")
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Links) != 1 || w.Links[0].MountPath != "/all" {
		t.Fatalf("after unlink: %+v", w.Links)
	}
	_, err = s.Unlink(UserScope, "w", "/data")
	wantErr(t, err, ErrNotFound, "no link at /data")

	data, _ := os.ReadFile(l.WorkspaceFile(UserScope, "w"))
	if strings.Contains(string(data), `"/data"`) || !strings.Contains(string(data), `"/all"`) {
		t.Fatalf("workspace.json after unlink:\n%s", data)
	}
}

// source makes USER/src with root/sub/deeper, a file, and symlinks:
// out -> outside the root, abs -> /etc, inner -> sub.
func source(t *testing.T, s *Store, l fsstore.Layout, host string) string {
	t.Helper()
	if _, err := s.Create(Workspace{Scope: UserScope, Name: "src"}); err != nil {
		t.Fatal(err)
	}
	root := l.WorkspaceRoot(UserScope, "src")
	mkdirs(t, filepath.Join(root, "sub", "deeper"))
	if err := os.WriteFile(filepath.Join(root, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"out": host, "abs": "/etc", "inner": "sub", "sub/up": "../.."} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestCreateView(t *testing.T) {
	s, l, host := newStore(t)
	root := source(t, s, l, host)

	v, err := s.CreateView(agentID, "docs", View{SourceScope: UserScope, SourceName: "src", Subdir: "inner", Mode: ModeRW})
	if err != nil {
		t.Fatal(err)
	}
	if want := (View{SourceScope: UserScope, SourceName: "src", Subdir: "sub", Mode: ModeRW}); *v.View != want {
		t.Fatalf("view = %+v, want the subdir resolved: %+v", *v.View, want)
	}
	if _, err := os.Stat(l.WorkspaceRoot(agentID, "docs")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a view has a root/ of its own: %v", err)
	}
	spec, err := v.Spec(l)
	if err != nil {
		t.Fatal(err)
	}
	if want := (bwrap.Source{Host: filepath.Join(root, "sub"), Anchor: l.Home, Beneath: root}); spec.Root != want || spec.RootReadOnly {
		t.Errorf("view spec root %q ro=%v", spec.Root, spec.RootReadOnly)
	}

	// A read-only view of the whole root.
	whole, err := s.CreateView(UserScope, "all", View{SourceScope: UserScope, SourceName: "src", Mode: ModeRO})
	if err != nil {
		t.Fatal(err)
	}
	if spec, err := whole.Spec(l); err != nil || spec.Root != (bwrap.Source{Host: root, Anchor: l.Home}) || !spec.RootReadOnly {
		t.Errorf("whole-root ro view spec %+v, %v", spec, err)
	}

	// A view of a view is a view of the first source; ro wins.
	vv, err := s.CreateView(UserScope, "deeper", View{SourceScope: UserScope, SourceName: "all", Subdir: "sub/deeper", Mode: ModeRW})
	if err != nil {
		t.Fatal(err)
	}
	if want := (View{SourceScope: UserScope, SourceName: "src", Subdir: "sub/deeper", Mode: ModeRO}); *vv.View != want {
		t.Fatalf("view of a view = %+v, want %+v", *vv.View, want)
	}
	vvv, err := s.CreateView(UserScope, "deeper2", View{SourceScope: agentID, SourceName: "docs", Subdir: "deeper", Mode: ModeRW})
	if err != nil {
		t.Fatal(err)
	}
	if want := (View{SourceScope: UserScope, SourceName: "src", Subdir: "sub/deeper", Mode: ModeRW}); *vvv.View != want {
		t.Fatalf("rw view of a rw view = %+v, want %+v", *vvv.View, want)
	}
}

func TestCreateViewRefusesEscapes(t *testing.T) {
	s, l, host := newStore(t)
	source(t, s, l, host)
	view := func(subdir string) error {
		_, err := s.CreateView(UserScope, "v", View{SourceScope: UserScope, SourceName: "src", Subdir: subdir, Mode: ModeRO})
		return err
	}
	wantErr(t, view("../../host"), ErrInvalid, "contains '..'")
	wantErr(t, view("sub/../.."), ErrInvalid, "contains '..'")
	wantErr(t, view(host), ErrInvalid, "is absolute")
	wantErr(t, view("sub/"), ErrInvalid, "not clean")
	wantErr(t, view("out"), ErrEscape, `subdir "out" of workspace USER/src is a symlink that leaves its root (it resolves to `+host+")")
	wantErr(t, view("abs"), ErrEscape, "a symlink that leaves its root")
	wantErr(t, view("sub/up"), ErrEscape, "a symlink that leaves its root")
	wantErr(t, view("missing"), ErrNotFound, `subdir "missing"`)
	wantErr(t, view("file"), ErrInvalid, "not a directory")
	_, err := s.CreateView(UserScope, "v", View{SourceScope: UserScope, SourceName: "gone", Mode: ModeRO})
	wantErr(t, err, ErrNotFound, "USER/gone")
	_, err = s.CreateView(UserScope, "v", View{SourceScope: UserScope, SourceName: "src", Mode: "r"})
	wantErr(t, err, ErrInvalid, `view mode "r"`)
	if _, err := s.Get(UserScope, "v"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused view was stored: %v", err)
	}
}

func TestSpec(t *testing.T) {
	s, l, host := newStore(t)
	mkdirs(t, filepath.Join(host, "ro"), filepath.Join(host, "rw"))
	w, err := s.Create(Workspace{Scope: UserScope, Name: "w", NetworkAccess: true, Links: []Link{
		{HostPath: filepath.Join(host, "ro"), MountPath: "/in", Mode: ModeRO},
		{HostPath: filepath.Join(host, "rw"), MountPath: "/workspace/out", Mode: ModeRW},
	}})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := w.Spec(l)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Root != (bwrap.Source{Host: l.WorkspaceRoot(UserScope, "w"), Anchor: l.Home}) || spec.RootReadOnly || !spec.Network || spec.Workdir != "" || spec.Env != nil {
		t.Errorf("spec %+v", spec)
	}
	if len(spec.Mounts) != 2 ||
		spec.Mounts[0].Host != filepath.Join(host, "ro") || spec.Mounts[0].Target != "/in" || !spec.Mounts[0].ReadOnly ||
		spec.Mounts[1].Host != filepath.Join(host, "rw") || spec.Mounts[1].Target != "/workspace/out" || spec.Mounts[1].ReadOnly {
		t.Errorf("mounts %+v", spec.Mounts)
	}
	if got := w.ShellState(l); got != (bwrap.Source{Host: filepath.Join(l.WorkspaceDir(UserScope, "w"), "shell-state"), Anchor: l.Home}) {
		t.Errorf("ShellState = %+v", got)
	}
}

func TestSpecChecksTheHostAgain(t *testing.T) {
	s, l, host := newStore(t)
	root := source(t, s, l, host)
	mkdirs(t, filepath.Join(host, "data"))
	v, err := s.CreateView(UserScope, "v", View{SourceScope: UserScope, SourceName: "src", Subdir: "sub", Mode: ModeRO})
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Create(Workspace{Scope: UserScope, Name: "w", Links: []Link{{HostPath: filepath.Join(host, "data"), MountPath: "/data", Mode: ModeRW}}})
	if err != nil {
		t.Fatal(err)
	}

	// A process that could write the source swaps sub for a symlink out.
	if err := os.RemoveAll(filepath.Join(root, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(root, "sub")); err != nil {
		t.Fatal(err)
	}
	_, err = v.Spec(l)
	wantErr(t, err, ErrEscape, "a symlink that leaves its root")

	// The same for a link's host path.
	mkdirs(t, filepath.Join(host, "elsewhere"))
	if err := os.Remove(filepath.Join(host, "data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("elsewhere", filepath.Join(host, "data")); err != nil {
		t.Fatal(err)
	}
	_, err = w.Spec(l)
	wantErr(t, err, ErrEscape, "now resolves to "+filepath.Join(host, "elsewhere"))
	if err := os.Remove(filepath.Join(host, "data")); err != nil {
		t.Fatal(err)
	}
	_, err = w.Spec(l)
	wantErr(t, err, ErrNotFound, "link at /data")

	// A workspace whose root/ vanished, and a view whose source did.
	if err := os.RemoveAll(l.WorkspaceRoot(UserScope, "w")); err != nil {
		t.Fatal(err)
	}
	_, err = w.Spec(l)
	wantErr(t, err, ErrNotFound, "has no root directory")
	if err := os.RemoveAll(l.WorkspaceDir(UserScope, "src")); err != nil {
		t.Fatal(err)
	}
	_, err = v.Spec(l)
	wantErr(t, err, ErrNotFound, "source workspace USER/src has no root")
}

func TestDelete(t *testing.T) {
	s, l, host := newStore(t)
	source(t, s, l, host)
	if _, err := s.CreateView(UserScope, "v", View{SourceScope: UserScope, SourceName: "src", Mode: ModeRO}); err != nil {
		t.Fatal(err)
	}
	var asked [][2]string
	users := []string{"agent " + agentID, "agent " + fsstore.NewID()}
	inUse := func(scope, name string) []string {
		asked = append(asked, [2]string{scope, name})
		return users
	}

	err := s.Delete(UserScope, "src", nil)
	wantErr(t, err, ErrInUse, "workspace USER/src is the source of view USER/v")

	err = s.Delete(UserScope, "v", inUse)
	wantErr(t, err, ErrInUse, "workspace USER/v is used by "+users[0]+", "+users[1])
	if !reflect.DeepEqual(asked, [][2]string{{UserScope, "v"}}) {
		t.Errorf("inUse asked about %v", asked)
	}
	if _, err := s.Get(UserScope, "v"); err != nil {
		t.Fatalf("a refused delete removed the view: %v", err)
	}

	users = nil
	if err := s.Delete(UserScope, "v", inUse); err != nil {
		t.Fatal(err)
	}
	// Read-only directories inside the root do not stop a delete.
	mkdirs(t, filepath.Join(l.WorkspaceRoot(UserScope, "src"), "modcache", "pkg"))
	if err := os.Chmod(filepath.Join(l.WorkspaceRoot(UserScope, "src"), "modcache"), 0o555); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(UserScope, "src", inUse); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"src", "v"} {
		if _, err := os.Lstat(l.WorkspaceDir(UserScope, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still on disk: %v", name, err)
		}
		if _, err := s.Get(UserScope, name); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get after Delete: %v", err)
		}
	}
	if _, err := os.Stat(host); err != nil {
		t.Errorf("deleting a workspace followed a symlink out of it: %v", err)
	}
	err = s.Delete(UserScope, "src", nil)
	wantErr(t, err, ErrNotFound, "USER/src")

	// An agent's scope directory goes with its last workspace.
	if _, err := s.Create(Workspace{Scope: agentID, Name: "only"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(agentID, "only", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(l.WorkspacesDir(), agentID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("empty agent scope left: %v", err)
	}
}

func TestCrashLeftoversAndHandEdits(t *testing.T) {
	s, l, _ := newStore(t)
	if _, err := s.Create(Workspace{Scope: UserScope, Name: "good"}); err != nil {
		t.Fatal(err)
	}
	userDir := filepath.Join(l.WorkspacesDir(), UserScope)
	// A creation that crashed before its rename, one that crashed before
	// writing workspace.json, and a stray file.
	mkdirs(t, filepath.Join(userDir, ".tmp-half", "root"), filepath.Join(userDir, "bare", "root"))
	if err := os.WriteFile(filepath.Join(userDir, "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, err := s.List()
	if err != nil || len(ws) != 1 || ws[0].Name != "good" {
		t.Fatalf("List with leftovers = %v, %v", ws, err)
	}
	if _, err := s.Get(UserScope, "bare"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a directory without workspace.json: %v", err)
	}
	_, err = s.Create(Workspace{Scope: UserScope, Name: "bare"})
	wantErr(t, err, ErrExists, "USER/bare is in the way (a directory without workspace.json); remove it")
	if _, err := s.Create(Workspace{Scope: UserScope, Name: "half"}); err != nil {
		t.Fatalf("create over a leftover temp: %v", err)
	}

	mkdirs(t, filepath.Join(userDir, ".tmp-again"), filepath.Join(l.WorkspacesDir(), agentID, ".tmp-x"))
	removed, err := s.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(l.WorkspacesDir(), agentID, ".tmp-x"), filepath.Join(userDir, ".tmp-again")}
	if !reflect.DeepEqual(removed, want) {
		t.Fatalf("Sweep removed %q, want %q", removed, want)
	}

	// Hand edits that break the file are reported, never guessed at.
	edits := map[string]string{
		"unknown":  `{"version":1,"scope":"USER","name":"unknown","network_access":false,"links":[],"colour":"red","created_at":"2026-11-22T10:00:00Z"}`,
		"version":  `{"version":2,"scope":"USER","name":"version","network_access":false,"links":[],"created_at":"2026-11-22T10:00:00Z"}`,
		"moved":    `{"version":1,"scope":"USER","name":"elsewhere","network_access":false,"links":[],"created_at":"2026-11-22T10:00:00Z"}`,
		"badlink":  `{"version":1,"scope":"USER","name":"badlink","network_access":false,"links":[{"host_path":"/a/../etc","mount_path":"/x","mode":"rw"}],"created_at":"2026-11-22T10:00:00Z"}`,
		"truncate": `{"version":1,"scope":"USER"`,
	}
	reasons := map[string]string{
		"unknown": `unknown field "colour"`, "version": "version 2", "moved": "it says it is workspace USER/elsewhere",
		"badlink": "contains '..'", "truncate": "unexpected EOF",
	}
	for name, doc := range edits {
		mkdirs(t, l.WorkspaceDir(UserScope, name))
		if err := os.WriteFile(l.WorkspaceFile(UserScope, name), []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := s.Get(UserScope, name)
		wantErr(t, err, ErrInvalid, reasons[name])
	}
	ws, err = s.List()
	if len(ws) != 2 || err == nil {
		t.Fatalf("List with broken files = %d workspaces, %v", len(ws), err)
	}
	for name, reason := range reasons {
		if !strings.Contains(err.Error(), reason) || !strings.Contains(err.Error(), l.WorkspaceFile(UserScope, name)) {
			t.Errorf("List error lacks %s (%s):\n%v", name, reason, err)
		}
	}
}

func TestWorkspaceJSONRoundTrip(t *testing.T) {
	w := Workspace{Version: 1, Scope: agentID, Name: "v", Links: []Link{{HostPath: "/h", MountPath: "/m", Mode: ModeRW}},
		View: &View{SourceScope: UserScope, SourceName: "src", Subdir: "a/b", Mode: ModeRO}, CreatedAt: epoch}
	data, err := encode(&w)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if want := []string{"created_at", "links", "name", "network_access", "scope", "version", "view"}; !reflect.DeepEqual(keys, want) {
		t.Errorf("keys %q, want %q", keys, want)
	}
	if view := m["view"].(map[string]any); view["source_scope"] != "USER" || view["source_name"] != "src" || view["subdir"] != "a/b" || view["mode"] != "ro" {
		t.Errorf("view %v", view)
	}
	back, err := decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, &w) {
		t.Errorf("round trip: %+v, want %+v", back, &w)
	}
}

// makeWritable, the retry of a delete, makes the tree's directories
// writable and never follows a symlink out of it (a sandbox that binds
// part of the tree could plant one).
func TestMakeWritableStaysInside(t *testing.T) {
	base := t.TempDir()
	tree, outside := filepath.Join(base, "tree"), filepath.Join(base, "outside")
	mkdirs(t, filepath.Join(tree, "a", "b"), outside)
	if err := os.Symlink(outside, filepath.Join(tree, "a", "out")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{outside, filepath.Join(tree, "a", "b"), filepath.Join(tree, "a")} {
		if err := os.Chmod(d, 0o500); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(tree)
	if err != nil {
		t.Fatal(err)
	}
	makeWritable(f)
	f.Close()
	for d, want := range map[string]os.FileMode{tree: 0o700, filepath.Join(tree, "a"): 0o700, filepath.Join(tree, "a", "b"): 0o700, outside: 0o500} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %o, want %o", d, got, want)
		}
	}
}

// A relative link target is under the workspace root; ".." is refused
// either way, and the stored target is absolute.
func TestRelativeTargets(t *testing.T) {
	s, _, host := newStore(t)
	mkdirs(t, filepath.Join(host, "d"))
	if _, err := s.Create(Workspace{Scope: UserScope, Name: "w"}); err != nil {
		t.Fatal(err)
	}
	w, err := s.Link(UserScope, "w", Link{HostPath: filepath.Join(host, "d"), MountPath: "data/sub", Mode: ModeRO})
	if err != nil || w.Links[0].MountPath != "/workspace/data/sub" {
		t.Fatalf("relative link: %+v, %v", w, err)
	}
	for _, bad := range []string{"../etc", "data/../../x", "", ".", "/workspace"} {
		_, err := s.Link(UserScope, "w", Link{HostPath: filepath.Join(host, "d"), MountPath: bad, Mode: ModeRO})
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("target %q: %v, want ErrInvalid", bad, err)
		}
	}
	if w, err := s.Unlink(UserScope, "w", "data/sub"); err != nil || len(w.Links) != 0 {
		t.Fatalf("relative unlink: %+v, %v", w, err)
	}
}
