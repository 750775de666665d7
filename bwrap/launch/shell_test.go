package launch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/bwrap"
)

// shell runs script with Shell and returns its result.
func shell(t *testing.T, s bwrap.Spec, stateDir, script string) result {
	t.Helper()
	requireBwrap(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Shell(ctx, s, bwrap.Source{Host: stateDir}, script)
	if err != nil {
		t.Fatal(err)
	}
	return wait(t, c)
}

func TestShellStatePersists(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		name := "rw root"
		if readOnly {
			name = "ro root"
		}
		t.Run(name, func(t *testing.T) {
			dir, root := newRoot(t)
			if err := os.Mkdir(filepath.Join(root, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			state := filepath.Join(dir, "shell-state")
			s := bwrap.Spec{Root: bwrap.Source{Host: root}, RootReadOnly: readOnly, Env: map[string]string{"GIVEN": "g"}}

			if r := shell(t, s, state, `cd sub && export FOO="bar baz'q" && BARE=unexported`); r.code != 0 {
				t.Fatalf("first command: %+v", r)
			}
			r := shell(t, s, state, `pwd; echo "FOO=$FOO"; echo "BARE=${BARE-unset}"; echo "GIVEN=$GIVEN"; /usr/bin/env | /bin/grep -c substrat_ || true`)
			want := "/workspace/sub\nFOO=bar baz'q\nBARE=unset\nGIVEN=g\n0\n"
			if r.code != 0 || r.stdout != want {
				t.Fatalf("second command: %+v\nwant stdout %q", r, want)
			}

			// Nothing was written into the root.
			entries, err := os.ReadDir(root)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 || entries[0].Name() != "sub" {
				t.Errorf("the shell wrote into the root: %v", entries)
			}
			if _, err := os.Stat(filepath.Join(state, "state")); err != nil {
				t.Errorf("no state on the host: %v", err)
			}
		})
	}
}

func TestShellExitStatus(t *testing.T) {
	dir, root := newRoot(t)
	state := filepath.Join(dir, "state")
	s := bwrap.Spec{Root: bwrap.Source{Host: root}}
	for _, tt := range []struct {
		script string
		code   int
	}{
		{"true", 0},
		{"false", 1},
		{"exit 7", 7},
		{"/bin/sh -c 'exit 42'", 42},
		{"set -eu; false; echo unreachable", 1},
		{"if then", 2}, // a syntax error
	} {
		if r := shell(t, s, state, tt.script); r.code != tt.code || strings.Contains(r.stdout, "unreachable") {
			t.Errorf("%q: %+v, want exit %d", tt.script, r, tt.code)
		}
	}

	// The state is saved even when the command exits early.
	if r := shell(t, s, state, "export AFTER=exit; cd /tmp; exit 3"); r.code != 3 {
		t.Fatalf("exit 3: %+v", r)
	}
	if r := shell(t, s, state, `echo "$PWD $AFTER"`); r.stdout != "/tmp exit\n" {
		t.Fatalf("state after an early exit: %+v", r)
	}
}

func TestShellLostDirectory(t *testing.T) {
	dir, root := newRoot(t)
	state := filepath.Join(dir, "state")
	s := bwrap.Spec{Root: bwrap.Source{Host: root}}
	if r := shell(t, s, state, "mkdir gone && cd gone"); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	if err := os.Remove(filepath.Join(root, "gone")); err != nil {
		t.Fatal(err)
	}
	r := shell(t, s, state, "pwd")
	if r.code != 0 || r.stdout != "/workspace\n" || !strings.Contains(r.stderr, "cannot return to /workspace/gone") {
		t.Fatalf("after the saved directory vanished: %+v", r)
	}
}

func TestShellArguments(t *testing.T) {
	_, root := newRoot(t)
	_, err := Shell(context.Background(), bwrap.Spec{Root: bwrap.Source{Host: root}}, bwrap.Source{Host: "relative/state"}, "true")
	if !errors.Is(err, bwrap.ErrInvalidSpec) {
		t.Errorf("relative state dir: %v", err)
	}
	_, err = Shell(context.Background(), bwrap.Spec{Root: bwrap.Source{Host: root}, Mounts: []bwrap.Mount{{Source: bwrap.Source{Host: "/x"}, Target: bwrap.ShellDir}}}, bwrap.Source{Host: "/s"}, "true")
	if !errors.Is(err, bwrap.ErrInvalidSpec) || !strings.Contains(err.Error(), "shadow "+bwrap.ShellDir) {
		t.Errorf("a mount at %s: %v", bwrap.ShellDir, err)
	}
}
