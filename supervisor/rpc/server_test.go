package rpc

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor/api"
)

// serveEnv, when set, makes the test binary a server on the socket it
// names, with RLIMIT_NOFILE lowered to 64 (see TestServerSurvivesEMFILE).
const serveEnv = "SUBSTRAT_TEST_RPC_SERVE"

func TestMain(m *testing.M) {
	if sock := os.Getenv(serveEnv); sock != "" {
		lim := syscall.Rlimit{Cur: 64, Max: 64}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			fmt.Println("setrlimit:", err)
			os.Exit(2)
		}
		s := newTestServer()
		s.FirstRequest = 300 * time.Millisecond
		ln, err := net.Listen("unix", sock)
		if err != nil {
			fmt.Println("listen:", err)
			os.Exit(2)
		}
		err = s.Serve(ln)
		fmt.Println("Serve returned:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func newTestServer() *Server {
	s := NewServer(slog.New(slog.DiscardHandler))
	s.UID = -1
	Handle(s, echoMethod, func(ctx context.Context, p string) (string, error) { return p, nil })
	return s
}

// echoMethod answers with its params.
var echoMethod = api.Method[string, string]{Name: "echo"}

func serve(t *testing.T, s *Server) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return sock
}

func echo(t *testing.T, sock string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, sock)
	if err != nil {
		return err
	}
	defer c.Close()
	got, err := Call(ctx, c, echoMethod, "hi")
	if err != nil {
		return err
	}
	if got != "hi" {
		return fmt.Errorf("echo: %q", got)
	}
	return nil
}

// flaky fails Accept n times, as a process out of descriptors does.
type flaky struct {
	net.Listener
	n int
}

func (f *flaky) Accept() (net.Conn, error) {
	if f.n > 0 {
		f.n--
		return nil, &net.OpError{Op: "accept", Net: "unix", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return f.Listener.Accept()
}

// An Accept error does not stop the server: it waits and accepts again.
func TestAcceptErrorsBackOff(t *testing.T) {
	s := newTestServer()
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(&flaky{Listener: ln, n: 5}) }()
	if err := echo(t, sock); err != nil {
		t.Fatalf("after 5 failed accepts: %v", err)
	}
	s.Close()
	if err := <-done; err != nil {
		t.Fatalf("Serve after Close: %v", err)
	}
}

// The connections served at once are bounded, and one over the bound is
// told why; a silent connection is closed after FirstRequest, saying so.
func TestConnectionBounds(t *testing.T) {
	s := newTestServer()
	s.MaxConns = 2
	s.FirstRequest = 200 * time.Millisecond
	sock := serve(t, s)
	var idle []net.Conn
	for range 2 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	time.Sleep(50 * time.Millisecond) // let the server count them
	if err := echo(t, sock); err == nil || !strings.Contains(err.Error(), "serves 2 connections already") {
		t.Fatalf("a third connection: %v", err)
	}
	// The idle ones are closed with a reason, which frees the slots.
	line, err := bufio.NewReader(idle[0]).ReadString('\n')
	if !strings.Contains(line, "no request within 200ms") {
		t.Fatalf("an idle connection got %q, %v", line, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := echo(t, sock)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never served again: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A client that asks at once is not held to the first-request bound
	// afterwards: a connection may idle between requests.
	// (The echo above may still hold its slot for a moment: the server
	// counts a connection until it has seen it close.)
	ctx := context.Background()
	var c *Client
	for {
		var err error
		if c, err = Dial(ctx, sock); err != nil {
			t.Fatal(err)
		}
		if _, err = Call(ctx, c, echoMethod, "a"); err == nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("never served again: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer c.Close()
	time.Sleep(400 * time.Millisecond)
	if got, err := Call(ctx, c, echoMethod, "b"); err != nil || got != "b" {
		t.Fatalf("a call after an idle spell: %q, %v", got, err)
	}
}

// A server process whose descriptor limit is 64 survives far more idle
// connections than that: accepts fail with EMFILE, it backs off, the idle
// connections time out, and it serves again. It used to return from
// Serve, and the daemon exited.
func TestServerSurvivesEMFILE(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "s.sock")
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"="+sock)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() { cmd.Process.Kill(); <-exited }()
	deadline := time.Now().Add(10 * time.Second)
	for echo(t, sock) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the server never answered: %s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 200 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			break // the backlog is full: as many as we need
		}
		conns = append(conns, c)
	}
	t.Logf("%d idle connections against a limit of 64 descriptors", len(conns))
	deadline = time.Now().Add(20 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("the server exited: %s", out)
		default:
		}
		if err := echo(t, sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never served again: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(conns) <= 64 {
		t.Fatalf("only %d connections were made; the limit was never reached", len(conns))
	}
}
