package sshtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestServer: the system ssh client runs a command on the server, and
// rsync copies a directory over it, both through the written ssh_config.
func TestServer(t *testing.T) {
	s := Start(t)
	out, err := s.Command(context.Background(), "sh", "-c", "'echo $((6*7))'").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "42" {
		t.Fatalf("ssh: %v: %q", err, out)
	}
	src, dst := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("over ssh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rsync := exec.Command("rsync", "-a", "-e", "ssh -F "+s.Config, src+"/", s.Host+":"+dst+"/")
	if out, err := rsync.CombinedOutput(); err != nil {
		t.Fatalf("rsync: %v: %s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "f")); err != nil || string(b) != "over ssh\n" {
		t.Fatalf("copied file: %q, %v", b, err)
	}
	// A key that is not authorized is refused: the server does not let
	// anyone in.
	bad := exec.Command("ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes", "-i", filepath.Join(s.Dir, "host_key"),
		"-p", fmt.Sprint(s.Port), "127.0.0.1", "true")
	if err := bad.Run(); err == nil {
		t.Fatal("ssh with no key was let in")
	}
}
