package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/executor/ssh"
	"github.com/substrat/substrat/internal/sshtest"
)

// TestRemoteLinkSymlinkParent: a read-only link's host path whose parent
// an agent swapped for a symlink (to the user's files) after the
// sandbox's check does not send what it now leads to to the host: the
// copy opens the link as the sandbox would bind it, with no symlink.
func TestRemoteLinkSymlinkParent(t *testing.T) {
	if why := sshtest.Available(); why != "" {
		t.Skip(why)
	}
	s := sshtest.Start(t)
	root := t.TempDir()
	e, err := ssh.New(s.Host, ssh.Options{Config: s.Config, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ws, user := t.TempDir(), t.TempDir()
	// The link was made to ws/x/keys, a directory of a workspace.
	if err := os.MkdirAll(filepath.Join(user, "keys"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(user, "keys", "id"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Now ws/x leads to the user's files.
	if err := os.Symlink(user, filepath.Join(ws, "x")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(ws, "x", "keys")
	x := extra{rel: filepath.Join(hostPaths, link), local: link, src: bwrap.Source{Host: link}}
	c := &remoteCopy{e: e, key: "ws-test"}
	err = c.begin(context.Background(), "", bwrap.Source{}, false, []extra{x})
	if !errors.Is(err, bwrap.ErrSymlink) {
		t.Errorf("begin with a link through a symlink: %v, want bwrap.ErrSymlink", err)
	}
	there, _ := e.Extra(context.Background(), "ws-test", x.rel)
	if b, err := os.ReadFile(filepath.Join(there, "id")); err == nil {
		t.Fatalf("the user's file went to the host: %q", b)
	}
}
