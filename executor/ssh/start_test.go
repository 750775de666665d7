package ssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/executor"
	"github.com/substrat/substrat/executor/executortest"
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
	script := `printf '%s|' "$@"; echo; echo "env=$SECRET ${HOME-unset} $ML"; env | sort | tr "\n" " " >&2; pwd; cat; echo err >&2; ls /home 2>&1 | head -1; exit 3`
	hostile := "a b'c\"$(touch /tmp/pwned)\n`x`;|&*"
	var out, errb bytes.Buffer
	p, err := e.Start(ctx, &executor.Cmd{
		Agent: "a1", Incarnation: "i1",
		Argv:   sandboxed(place, "/bin/sh", "-c", script, "sh", hostile, ""),
		Env:    []string{"SECRET=s3 cr=t", "PATH=/usr/bin:/bin", "ML=two\nlines\n"},
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
	want := hostile + "||\nenv=s3 cr=t unset two\nlines\n\n/workspace\nline one\nline two without newline" +
		"ls: cannot access '/home': No such file or directory\n"
	if out.String() != want {
		t.Errorf("output:\n%q\nwant\n%q", out.String(), want)
	}
	// The environment is the request's (PWD is bwrap's), nothing of the
	// ssh login's; sort runs in the C locale (no LANG).
	if errb.String() != " ML=two PATH=/usr/bin:/bin PWD=/workspace SECRET=s3 cr=t lines err\n" {
		t.Errorf("stderr %q", errb.String())
	}
	if _, err := os.Stat("/tmp/pwned"); err == nil {
		t.Error("an argument was run by a shell")
	}
}

// TestStartDir: the command starts in the request's directory (outside
// bwrap, which has its own), one with a newline in its name too.
func TestStartDir(t *testing.T) {
	_, e := start(t)
	for _, name := range []string{"a dir", "two\nlines"} {
		dir := filepath.Join(t.TempDir(), name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		p, err := e.Start(context.Background(), &executor.Cmd{Agent: "a", Incarnation: "1",
			Argv: []string{"/bin/pwd"}, Dir: dir, Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(); err != nil || out.String() != dir+"\n" {
			t.Fatalf("pwd: %q, %v; want %q", out.String(), err, dir)
		}
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

// TestRefused: a host that could pass for an option, ids that are not
// plain tokens, descriptors, are refused before anything runs.
func TestRefused(t *testing.T) {
	for _, h := range []string{"-oProxyCommand=touch /tmp/x", "a b", "", "host;id", "h\n"} {
		if _, err := New(h, Options{}); !errors.Is(err, ErrHost) {
			t.Errorf("New(%q): %v, want ErrHost", h, err)
		}
	}
	e, err := New("nowhere.invalid", Options{Root: "/r"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	for _, c := range []executor.Cmd{
		{Agent: "../x", Incarnation: "1", Argv: []string{"true"}},
		{Agent: "a", Incarnation: "-x", Argv: []string{"true"}},
		{Agent: "a", Incarnation: "1", Argv: []string{"true"}, ExtraFiles: []*os.File{os.Stdin}},
	} {
		if _, err := e.Start(ctx, &c); err == nil {
			t.Errorf("Start %+v was not refused", c)
		}
	}
	if _, err := e.Place(ctx, "a/../../b"); !errors.Is(err, ErrID) {
		t.Errorf("Place: %v", err)
	}
	if _, err := e.Fence(ctx, "a", "x y"); !errors.Is(err, ErrID) {
		t.Errorf("Fence: %v", err)
	}
}

// TestParallel: processes run side by side through the one master
// connection, each with its own streams and status.
func TestParallel(t *testing.T) {
	_, e := start(t)
	place := t.TempDir()
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			var out bytes.Buffer
			p, err := e.Start(context.Background(), &executor.Cmd{Agent: "a", Incarnation: "1",
				Argv:  sandboxed(place, "/bin/sh", "-c", `read x; echo "$x$x"; exit "$x"`),
				Stdin: strings.NewReader(fmt.Sprintf("%d\n", i)), Stdout: &out})
			if err != nil {
				errs <- err
				return
			}
			err = p.Wait()
			var ee *executor.ExitError
			switch {
			case i == 0 && err != nil, i > 0 && (!errors.As(err, &ee) || ee.Code != i):
				errs <- fmt.Errorf("process %d: %v", i, err)
			case out.String() != fmt.Sprintf("%d%d\n", i, i):
				errs <- fmt.Errorf("process %d said %q", i, out.String())
			default:
				errs <- nil
			}
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestCheck: the test host has all an agent needs; a host that cannot
// be reached is reported as such.
func TestCheck(t *testing.T) {
	s, e := start(t)
	if err := e.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	// $SUBSTRAT_SSH_CONFIG is the config when Options name none.
	t.Setenv(ConfigEnv, s.Config)
	viaEnv, err := New(s.Host, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer viaEnv.Close()
	if err := viaEnv.Check(context.Background()); err != nil {
		t.Fatalf("through $%s: %v", ConfigEnv, err)
	}
	bad, err := New("unknown-host", Options{Config: s.Config})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if err := bad.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "not reachable") {
		t.Fatalf("Check of an unknown host: %v", err)
	}
}

// TestCheckRsyncVersion: an rsync older than MinRsync, here or on the
// host, or one that says no version, is a problem Check reports.
func TestCheckRsyncVersion(t *testing.T) {
	for first, want := range map[string]string{
		"rsync  version 3.5.0  protocol version 32":  "",
		"rsync  version 3.4.0  protocol version 32":  "",
		"rsync  version v3.4.1  protocol version 32": "",
		"rsync  version 10.0.0  protocol version 40": "",
		"rsync  version 3.2.7  protocol version 31":  "is 3.2.7, older than 3.4.0",
		"rsync  version 3.3.99  protocol version 31": "is 3.3.99, older than 3.4.0",
		"openrsync: protocol version 29":             "said",
		"":                                           "said",
	} {
		got := rsyncProblem("h", first)
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("rsyncProblem(%q) = %q, want %q", first, got, want)
		}
	}
	// This machine's rsync, shadowed on PATH by an old one: the host's
	// (the sshd's own PATH) is still fine.
	_, e := start(t)
	bin := t.TempDir()
	old := "#!/bin/sh\n[ \"$1\" = --version ] && { echo 'rsync  version 3.2.7  protocol version 31'; exit 0; }\nexec /usr/bin/rsync \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "rsync"), []byte(old), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	err := e.Check(context.Background())
	if err == nil || !strings.Contains(err.Error(), "the rsync of this machine is 3.2.7") {
		t.Fatalf("Check with an old rsync here: %v", err)
	}
	if strings.Contains(err.Error(), e.Host()) && strings.Contains(err.Error(), "rsync of "+e.Host()) {
		t.Fatalf("the host's rsync was reported too: %v", err)
	}
}

// BenchmarkStart: the cost of one sandboxed process on the host through
// the master connection (start, run bwrap true, exit status back), and
// of a Push and Pull of a small place.
func BenchmarkStart(b *testing.B) {
	s := sshtest.Start(b)
	e, err := New(s.Host, Options{Config: s.Config, Root: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	place := b.TempDir()
	argv := sandboxed(place, "/bin/true")
	b.Run("process", func(b *testing.B) {
		for b.Loop() {
			p, err := e.Start(context.Background(), &executor.Cmd{Agent: "a", Incarnation: "1", Argv: argv})
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Wait(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("push+pull", func(b *testing.B) {
		for i := range 20 {
			os.WriteFile(fmt.Sprintf("%s/f%d", place, i), []byte("some content\n"), 0o644)
		}
		for b.Loop() {
			if err := e.Push(context.Background(), "a", place); err != nil {
				b.Fatal(err)
			}
			if err := e.Pull(context.Background(), "a", place); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestConformance: the executor passes the suite every executor passes.
func TestConformance(t *testing.T) {
	_, e := start(t)
	executortest.Run(t, e, func(t *testing.T, cmd ...string) *executor.Cmd {
		return &executor.Cmd{Argv: sandboxed(t.TempDir(), cmd...)}
	})
}
