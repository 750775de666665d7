package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
	wire "github.com/substrat/substrat/supervisor/api"
)

// TestSSHExecutorViewSwap: the workspace root of an agent on the host
// is a view of a subdirectory of another workspace, whose agents (here
// the test, writing what a sandboxed agent of the source can write)
// swap that subdirectory for a symlink out of the home while the turn
// runs there. What comes back lands in the subdirectory the sandbox was
// built on, never through the symlink: nothing is written or deleted
// outside.
func TestSSHExecutorViewSwap(t *testing.T) {
	d, s, places := sshDaemon(t)
	model := lookPath(t, "remote-model")
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "src"}, nil)
	src := fsstore.Layout{Home: d.home}.WorkspaceRoot("USER", "src")
	sub := filepath.Join(src, "sub")
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(sub, "shared.txt"), "for the view")
	mustCall(d, wire.WorkspaceView, wire.ViewParams{Source: "USER/src", Name: "v", Subdir: "sub", Mode: "rw"}, nil)
	var a wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "far", Model: model, Workspace: "v", Executor: "ssh://" + s.Host}, &a)
	showOnFailure(t, d, a.ID)
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "far", Text: "writewait hello.txt from the host"}, nil)
	place := wsCopy(places, sub, "place")
	waitFile(t, filepath.Join(place, "hello.txt"))
	// The source's agent: its sub now leads to the user's files.
	victim := t.TempDir()
	write(filepath.Join(victim, "precious"), "the user's")
	if err := os.Rename(sub, filepath.Join(src, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, sub); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(place, "release"), "")
	d.waitFirstTurn("far")
	time.Sleep(100 * time.Millisecond)
	if b, err := os.ReadFile(filepath.Join(victim, "precious")); err != nil || string(b) != "the user's" {
		t.Errorf("the pull deleted or replaced a file outside the workspace: %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(victim, "hello.txt")); err == nil {
		t.Errorf("the pull wrote through the symlink into %s", victim)
	}
	// It came back into the directory the sandbox was built on.
	if b, err := os.ReadFile(filepath.Join(src, "moved", "hello.txt")); err != nil || string(b) != "from the host" {
		t.Errorf("hello.txt in the directory the turn ran on: %q, %v", b, err)
	}
}

// TestSSHExecutorReadOnlyView: an agent on the host whose workspace is a
// read-only view of another's root writes nothing there, so its turn's
// end brings nothing back: what the source's agents wrote here while it
// ran (the test, as one of them) is neither deleted nor reverted.
func TestSSHExecutorReadOnlyView(t *testing.T) {
	d, s, places := sshDaemon(t)
	model := lookPath(t, "remote-model")
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "src"}, nil)
	src := fsstore.Layout{Home: d.home}.WorkspaceRoot("USER", "src")
	if err := os.WriteFile(filepath.Join(src, "old.txt"), []byte("before"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCall(d, wire.WorkspaceView, wire.ViewParams{Source: "USER/src", Name: "v", Mode: "ro"}, nil)
	var a wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "reader", Model: model, Workspace: "v", Executor: "ssh://" + s.Host}, &a)
	showOnFailure(t, d, a.ID)
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "reader", Text: "wait"}, nil)
	place := wsCopy(places, src, "place")
	waitFile(t, filepath.Join(place, "old.txt"))
	// The source's agent at work here meanwhile.
	if err := os.WriteFile(filepath.Join(src, "new.txt"), []byte("made here"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "old.txt"), []byte("changed here"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(place, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d.waitFirstTurn("reader")
	for name, want := range map[string]string{"new.txt": "made here", "old.txt": "changed here"} {
		if b, err := os.ReadFile(filepath.Join(src, name)); err != nil || string(b) != want {
			t.Errorf("%s in the source after the read-only agent's turn: %q, %v; want %q", name, b, err, want)
		}
	}
}

// TestSSHExecutorLinkRW: a read-write link is refused on a host, as the
// README says, also one into another workspace of the home (which an
// agent can make with link_from): its copy would come back over that
// workspace, undoing what its own agents did meanwhile.
func TestSSHExecutorLinkRW(t *testing.T) {
	d, s, places := sshDaemon(t)
	model := lookPath(t, "remote-model")
	for _, name := range []string{"lab", "other"} {
		mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: name}, nil)
	}
	other := fsstore.Layout{Home: d.home}.WorkspaceRoot("USER", "other")
	if err := os.MkdirAll(filepath.Join(other, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustCall(d, wire.WorkspaceLink, wire.LinkParams{Workspace: "lab", Source: filepath.Join(other, "sub"), Target: "/data", Mode: "rw"}, nil)
	var a wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "far", Model: model, Workspace: "lab", Executor: "ssh://" + s.Host}, &a)
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "far", Text: "write x.txt y"}, nil)
	events := fsstore.Layout{Home: d.home}.Agent(a.ID).Events()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(events)
		if strings.Contains(string(b), "read-write: not on an ssh executor") {
			break
		}
		if strings.Contains(string(b), `"type":"turn"`) || time.Now().After(deadline) {
			t.Fatalf("the turn with a read-write link ran on the host, or failed otherwise:\n%s", b)
		}
	}
	if _, err := os.Stat(wsCopy(places, fsstore.Layout{Home: d.home}.WorkspaceRoot("USER", "lab"), "place")); err == nil {
		t.Error("the workspace went to the host")
	}
}
