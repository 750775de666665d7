package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/substrat/substrat/fsstore"
	wire "github.com/substrat/substrat/supervisor/api"
)

// TestSSHExecutorOrphans: the copies on a host of a workspace and an
// agent removed while the daemon was down go at its next start; those
// of what is still there, another home's under the same root (with the
// same names), one of the old layout (directly under the root) and
// what is no id stay.
func TestSSHExecutorOrphans(t *testing.T) {
	d, s, places := sshDaemon(t)
	base := filepath.Dir(places)
	model := lookPath(t, "remote-model")
	layout := fsstore.Layout{Home: d.home}
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "keep"}, nil)
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "gone"}, nil)
	var stay, went wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "stay", Model: model, Workspace: "keep", Executor: "ssh://" + s.Host}, &stay)
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "went", Model: model, Workspace: "gone", Executor: "ssh://" + s.Host}, &went)
	d.send("stay", "write a.txt kept")
	d.send("went", "write b.txt gone")
	keepRoot, goneRoot := layout.WorkspaceRoot("USER", "keep"), layout.WorkspaceRoot("USER", "gone")
	mkdir := func(p string) string {
		t.Helper()
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The agents' own copies (extras), as a provider's would be.
	mkdir(filepath.Join(places, stay.ID, "extra", "x"))
	mkdir(filepath.Join(places, went.ID, "extra", "x"))
	// Another home's, with the same names; the old layout's; not ids; a
	// symlink with an id's name that leads out.
	other := filepath.Join(base, fsstore.NewID())
	kept := []string{
		mkdir(wsCopy(other, goneRoot, "place")),
		mkdir(filepath.Join(other, went.ID, "extra")),
		mkdir(wsCopy(base, goneRoot, "place")),
		mkdir(filepath.Join(base, went.ID, "extra")),
		mkdir(filepath.Join(places, "not an id", "x")),
		mkdir(filepath.Join(places, ".hidden", "x")),
		mkdir(filepath.Join(places, "..", "..", filepath.Base(base)+"-victim", "precious")),
	}
	t.Cleanup(func() { os.RemoveAll(base + "-victim") })
	if err := os.Symlink(base+"-victim", filepath.Join(places, fsstore.NewID())); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{wsCopy(places, keepRoot, "place", "a.txt"), wsCopy(places, goneRoot, "place", "b.txt")} {
		if _, err := os.Stat(p); err != nil {
			t.Fatal(err)
		}
	}
	// Down, the workspace and the agent are removed by hand.
	d.kill()
	if err := os.RemoveAll(layout.WorkspaceDir("USER", "gone")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(layout.AgentDir(went.ID)); err != nil {
		t.Fatal(err)
	}
	d.start()
	waitGone(t, wsCopy(places, goneRoot))
	waitGone(t, filepath.Join(places, went.ID))
	for _, p := range append(kept, wsCopy(places, keepRoot, "place", "a.txt"), filepath.Join(places, stay.ID, "extra", "x")) {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("removed: %v", err)
		}
	}
	// The agent that stays still works there.
	if res := d.send("stay", "write c.txt again"); res.Text == "" {
		t.Fatalf("the turn said nothing")
	}
	if b, _ := os.ReadFile(filepath.Join(keepRoot, "c.txt")); string(b) != "again" {
		t.Fatalf("c.txt: %q", b)
	}
}
