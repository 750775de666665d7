package workspace

// These tests run the real bwrap on workspaces. They fail, never skip, when
// bwrap is missing: `make test` installs it.

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/bwrap/launch"
)

// sandboxRun runs c and returns its stdout and exit code.
func sandboxRun(t *testing.T, c *exec.Cmd, err error) (string, int) {
	t.Helper()
	if err != nil {
		t.Fatal(err) // carries bwrap's install hint when it is missing
	}
	var out, stderr bytes.Buffer
	c.Stdout, c.Stderr = &out, &stderr
	err = c.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		if bytes.HasPrefix(stderr.Bytes(), []byte("bwrap:")) {
			t.Fatalf("bwrap failed: %s", stderr.String())
		}
		return out.String(), ee.ExitCode()
	default:
		t.Fatal(err)
		return "", 0
	}
}

func TestWorkspaceSandbox(t *testing.T) {
	s, l, host := newStore(t)
	ro, rw := filepath.Join(host, "ro"), filepath.Join(host, "rw")
	mkdirs(t, ro, rw)
	w, err := s.Create(Workspace{Scope: UserScope, Name: "w", Links: []Link{
		{HostPath: ro, MountPath: "/in", Mode: ModeRO},
		{HostPath: rw, MountPath: "/out", Mode: ModeRW},
	}})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := w.Spec(l)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sh := func(spec bwrap.Spec, script string) (string, int) {
		c, err := launch.Command(ctx, spec, []string{"/bin/sh", "-c", script})
		return sandboxRun(t, c, err)
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }

	if _, code := sh(spec, "echo x > /in/a"); code == 0 || exists(filepath.Join(ro, "a")) {
		t.Errorf("wrote through a ro link")
	}
	if _, code := sh(spec, "echo x > /out/b && echo y > /workspace/c"); code != 0 ||
		!exists(filepath.Join(rw, "b")) || !exists(filepath.Join(l.WorkspaceRoot(UserScope, "w"), "c")) {
		t.Errorf("rw link or root not writable (exit %d)", code)
	}
	if out, _ := sh(spec, "ls -A /in /out"); out != "/in:\n\n/out:\nb\n" {
		t.Errorf("ls of the links:\n%q", out)
	}
	if _, code := sh(spec, "cat "+filepath.Join(l.WorkspaceDir(UserScope, "w"), "workspace.json")); code == 0 {
		t.Errorf("the sandbox can read its own workspace.json")
	}

	// Failure 6: a read-only view keeps its shell state.
	mkdirs(t, filepath.Join(l.WorkspaceRoot(UserScope, "w"), "sub"))
	v, err := s.CreateView(UserScope, "v", View{SourceScope: UserScope, SourceName: "w", Mode: ModeRO})
	if err != nil {
		t.Fatal(err)
	}
	vspec, err := v.Spec(l)
	if err != nil {
		t.Fatal(err)
	}
	shell := func(script string) (string, int) {
		c, err := launch.Shell(ctx, vspec, v.ShellState(l), script)
		return sandboxRun(t, c, err)
	}
	if _, code := shell("cd sub && export STEP=one"); code != 0 {
		t.Fatalf("first shell command in a ro view: exit %d", code)
	}
	out, code := shell(`echo "$PWD $STEP"; cat /workspace/c; touch /workspace/d`)
	if out != "/workspace/sub one\ny\n" || code == 0 {
		t.Fatalf("second shell command in a ro view: exit %d, %q", code, out)
	}
	if exists(filepath.Join(l.WorkspaceRoot(UserScope, "w"), "d")) {
		t.Errorf("wrote through a ro view")
	}
	if !exists(filepath.Join(l.WorkspaceDir(UserScope, "v"), "shell-state", "state")) {
		t.Errorf("no shell state beside the view")
	}
}
