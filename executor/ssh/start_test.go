package ssh

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/executor"
	"github.com/substrat/substrat/internal/sshtest"
)

// start starts a test sshd and an executor for it, with places under a
// directory of the test (the host is this machine).
func start(t *testing.T) (*sshtest.Server, *Executor) {
	t.Helper()
	if why := sshtest.Available(); why != "" {
		t.Skip(why)
	}
	s := sshtest.Start(t)
	e, err := New(s.Host, Options{Config: s.Config, Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return s, e
}

// sandboxed is a bwrap command line of the kind the daemon builds for a
// remote host: place bound at /workspace by path, no network, its own
// PID namespace, dying with its parent.
func sandboxed(place string, cmd ...string) []string {
	return append([]string{"bwrap", "--die-with-parent", "--new-session", "--unshare-all",
		"--cap-drop", "ALL", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--ro-bind", "/usr", "/usr", "--ro-bind-try", "/bin", "/bin", "--ro-bind-try", "/lib", "/lib",
		"--ro-bind-try", "/lib64", "/lib64", "--ro-bind-try", "/etc/passwd", "/etc/passwd",
		"--bind", place, "/workspace", "--chdir", "/workspace", "--"}, cmd...)
}

// TestStart: a command runs in bwrap on the host with the request's
// argv (hostile bytes and all) and environment, reads its input, writes
// both outputs, and its exit status comes back.
func TestStart(t *testing.T) {
	_, e := start(t)
	ctx := context.Background()
	place := t.TempDir()
	script := `printf '%s|' "$@"; echo; echo "env=$SECRET ${HOME-unset}"; pwd; cat; echo err >&2; ls /home 2>&1 | head -1; exit 3`
	hostile := "a b'c\"$(touch /tmp/pwned)\n`x`;|&*"
	var out, errb bytes.Buffer
	p, err := e.Start(ctx, &executor.Cmd{
		Agent: "a1", Incarnation: "i1",
		Argv:   sandboxed(place, "/bin/sh", "-c", script, "sh", hostile, ""),
		Env:    []string{"SECRET=s3 cr=t", "PATH=/usr/bin:/bin"},
		Stdin:  strings.NewReader("line one\nline two without newline"),
		Stdout: &out, Stderr: &errb,
	})
	if err != nil {
		t.Fatal(err)
	}
	err = p.Wait()
	var ee *executor.ExitError
	if !errors.As(err, &ee) || ee.Code != 3 {
		t.Fatalf("Wait: %v, want exit status 3; stderr: %s", err, errb.String())
	}
	want := hostile + "||\nenv=s3 cr=t unset\n/workspace\nline one\nline two without newline" +
		"ls: cannot access '/home': No such file or directory\n"
	if out.String() != want {
		t.Errorf("output:\n%q\nwant\n%q", out.String(), want)
	}
	if errb.String() != "err\n" {
		t.Errorf("stderr %q", errb.String())
	}
	if _, err := os.Stat("/tmp/pwned"); err == nil {
		t.Error("an argument was run by a shell")
	}
}

// TestStartStreams: input reaches the command as it is written, and its
// output comes back while it runs (a turn is a conversation).
func TestStartStreams(t *testing.T) {
	_, e := start(t)
	place := t.TempDir()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p, err := e.Start(context.Background(), &executor.Cmd{
		Agent: "a1", Incarnation: "i1",
		Argv:  sandboxed(place, "/bin/sh", "-c", `while read -r l; do echo "got $l"; done; echo bye`),
		Stdin: inR, Stdout: outW,
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		buf := make([]byte, 4096)
		var acc string
		for {
			n, err := outR.Read(buf)
			acc += string(buf[:n])
			for strings.Contains(acc, "\n") {
				l, rest, _ := strings.Cut(acc, "\n")
				lines <- l
				acc = rest
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	for _, w := range []string{"one", "two"} {
		io.WriteString(inW, w+"\n")
		if got := <-lines; got != "got "+w {
			t.Fatalf("got %q, want %q", got, "got "+w)
		}
	}
	inW.Close()
	if got := <-lines; got != "bye" {
		t.Fatalf("after end of input: %q", got)
	}
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	outW.Close()
}

// within bounds a test that would otherwise hang.
const within = 2 * time.Minute

var _ = filepath.Join
