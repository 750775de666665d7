package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
)

// promptly runs the real substrat (the test binary, which testscript put
// in PATH) on home and fails the test if it has not returned within 45
// seconds: a command that waits on a FIFO never returns.
func promptly(t *testing.T, home string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "substrat", append([]string{"--home", home}, args...)...)
	cmd.Env = append(os.Environ(), "SUBSTRAT_HOME=")
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("substrat %s did not return within 45s (it hangs on a special file): %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), err
}

func mustPromptly(t *testing.T, home string, args ...string) string {
	t.Helper()
	out, err := promptly(t, home, args...)
	if err != nil {
		t.Fatalf("substrat %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// A config.json that is not a regular file within its cap (a FIFO, a
// symlink to /dev/zero, a directory, a file over 16 MiB) is refused with
// a warning that names it: 'daemon start' returns at once and the daemon
// runs with the other settings, and 'daemon stop' returns at once. With a
// FIFO both used to hang; with /dev/zero the daemon read without end.
func TestSpecialConfigNeverHangsTheDaemon(t *testing.T) {
	for _, c := range []struct {
		name string
		make func(p string) error
		want string
	}{
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o600) }, "not a regular file: a FIFO"},
		{"dev-zero", func(p string) error { return os.Symlink("/dev/zero", p) }, "not a regular file: a symlink"},
		{"directory", func(p string) error { return os.Mkdir(p, 0o700) }, "not a regular file: a directory"},
		{"oversized", func(p string) error {
			return os.WriteFile(p, append([]byte(`{"version": 1, "max_slots": 3}`), bytes.Repeat([]byte(" "), fsstore.MaxJSONSize)...), 0o600)
		}, "file too large"},
	} {
		t.Run(c.name, func(t *testing.T) {
			home := shortHome(t)
			t.Cleanup(func() { killDaemon(home) })
			config := fsstore.Layout{Home: home}.Config()
			if err := c.make(config); err != nil {
				t.Fatal(err)
			}
			out := mustPromptly(t, home, "daemon", "start")
			if !strings.Contains(out, "daemon started") || !strings.Contains(out, "warning: "+config+" is refused") || !strings.Contains(out, c.want) {
				t.Fatalf("daemon start said:\n%s\nwant it started, with a warning naming %s and saying %q", out, config, c.want)
			}
			if out := mustPromptly(t, home, "config", "show", "--json"); !strings.Contains(out, c.want) || !strings.Contains(out, `"daemon_running": true`) {
				t.Errorf("config show:\n%s", out)
			}
			if out := mustPromptly(t, home, "daemon", "stop"); !strings.Contains(out, "daemon stopped") {
				t.Fatalf("daemon stop said:\n%s", out)
			}
		})
	}
}

// config.json made a FIFO while the daemon runs, then a kill -9: the
// daemon refuses the file and goes on, 'daemon stop' returns, and after
// the kill 'daemon start' returns too (both used to hang).
func TestConfigFIFOWhileRunningAndAfterKill(t *testing.T) {
	home := shortHome(t)
	t.Cleanup(func() { killDaemon(home) })
	layout := fsstore.Layout{Home: home}
	mustPromptly(t, home, "daemon", "start")
	if err := syscall.Mkfifo(layout.Config(), 0o600); err != nil {
		t.Fatal(err)
	}
	// The daemon reads the file again when it changes: wait until it has
	// refused it (it used to block there, for good).
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := promptly(t, home, "config", "show", "--json")
		if strings.Contains(out, "not a regular file: a FIFO") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not report the FIFO:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out := mustPromptly(t, home, "daemon", "stop"); !strings.Contains(out, "daemon stopped") {
		t.Fatalf("daemon stop said:\n%s", out)
	}
	mustPromptly(t, home, "daemon", "start")
	killDaemon(home)
	time.Sleep(200 * time.Millisecond)
	out := mustPromptly(t, home, "daemon", "start")
	if !strings.Contains(out, "daemon started") || !strings.Contains(out, "a FIFO") {
		t.Fatalf("daemon start after kill -9 said:\n%s", out)
	}
	mustPromptly(t, home, "daemon", "stop")
}

// An agent's session.json made a FIFO while the daemon is down: the start
// returns, the agent is reported as damaged (kept out of the tree), and
// the stop returns.
func TestSessionFIFONeverHangsTheDaemon(t *testing.T) {
	home := shortHome(t)
	t.Cleanup(func() { killDaemon(home) })
	mustPromptly(t, home, "daemon", "start")
	mustPromptly(t, home, "agent", "create", "victim")
	mustPromptly(t, home, "daemon", "stop")
	dirs, err := filepath.Glob(filepath.Join(fsstore.Layout{Home: home}.AgentsDir(), "*", fsstore.SessionName))
	if err != nil || len(dirs) != 1 {
		t.Fatalf("session.json files: %v %v", dirs, err)
	}
	if err := os.Remove(dirs[0]); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(dirs[0], 0o600); err != nil {
		t.Fatal(err)
	}
	mustPromptly(t, home, "daemon", "start")
	if out := mustPromptly(t, home, "recover", "--json"); !strings.Contains(out, "not a regular file: a FIFO") {
		t.Errorf("the recovery report does not name the FIFO:\n%s", out)
	}
	mustPromptly(t, home, "daemon", "stop")
}
