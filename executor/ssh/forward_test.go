package ssh

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/substrat/substrat/executor"
	"github.com/substrat/substrat/internal/sshtest"
)

// dial says ping on the Unix socket path and prints the answer.
func dial(path string) {
	c, err := net.Dial("unix", path)
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(1)
	}
	fmt.Fprintln(c, "ping")
	line, _ := bufio.NewReader(c).ReadString('\n')
	fmt.Print(line)
}

// serve answers each line on a Unix socket of the test with "pong LINE".
func serve(t *testing.T) string {
	dir, err := os.MkdirTemp("", "fw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "tool.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				fmt.Fprintf(c, "pong %s", line)
			}()
		}
	}()
	return path
}

// TestForward: a process on the host reaches a Unix socket of this
// machine through the socket Forward makes there, again after the
// master was lost (a new master, a socket left behind).
func TestForward(t *testing.T) {
	s, e := start(t)
	ctx := context.Background()
	local := serve(t)
	ping := func() string {
		t.Helper()
		remote, err := e.Forward(ctx, "agentf", "tool-1.sock", local)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		p, err := e.Start(ctx, &executor.Cmd{Agent: "agentf", Incarnation: "1",
			Argv: []string{os.Args[0], "-test.run=^$"}, Env: []string{dialEnv + "=" + remote}, Stdout: &out, Stderr: &out})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		return out.String()
	}
	if got := ping(); got != "pong ping\n" {
		t.Fatalf("through the forwarding: %q", got)
	}
	// Again on the same master: the forwarding is made anew.
	if got := ping(); got != "pong ping\n" {
		t.Fatalf("forwarded again: %q", got)
	}
	// The master killed: its socket stays on the host, a new master
	// forwards anew.
	pid, err := e.master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	until(t, func() bool { _, err := e.master(ctx); return err != nil })
	if got := ping(); got != "pong ping\n" {
		t.Fatalf("after a new master: %q", got)
	}
	_ = s
}

// TestForwardLongRoot: the forwarded socket's path stays short under a
// long root (a long login name's home) and a home id: a process on the
// host reaches it.
func TestForwardLongRoot(t *testing.T) {
	if why := sshtest.Available(); why != "" {
		t.Skip(why)
	}
	s := sshtest.Start(t)
	base := t.TempDir()
	root := filepath.Join(base, strings.Repeat("r", max(1, 64-len(base)-1)))
	e, err := New(s.Host, Options{Config: s.Config, Root: root, Home: "01a22476-5fa4-7a92-8ca1-4d8002c3f26e"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	ctx := context.Background()
	agent := "01a22476-5fbd-76a7-8ea6-898ea0050c48"
	remote, err := e.Forward(ctx, agent, "tool.sock", serve(t))
	if err != nil {
		t.Fatalf("Forward under a root of %d bytes: %v", len(root), err)
	}
	if !strings.HasPrefix(remote, root+"/") || len(remote) >= maxSocketPath {
		t.Errorf("the socket %s (%d bytes)", remote, len(remote))
	}
	var out strings.Builder
	p, err := e.Start(ctx, &executor.Cmd{Agent: agent, Incarnation: "1",
		Argv: []string{os.Args[0], "-test.run=^$"}, Env: []string{dialEnv + "=" + remote}, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil || out.String() != "pong ping\n" {
		t.Fatalf("through the forwarding: %q, %v", out.String(), err)
	}
}

// TestCheckForward: Check says so when the host's sshd does not forward
// Unix sockets, which the agents' tool sockets need.
func TestCheckForward(t *testing.T) {
	s := sshtest.StartWith(t, "AllowStreamLocalForwarding no")
	e, err := New(s.Host, Options{Config: s.Config, Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "AllowStreamLocalForwarding") {
		t.Fatalf("Check of a host that forwards no Unix socket: %v", err)
	}
}
