package relay

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// pipes returns the two ends of a byte stream, as an exec's stdin and
// stdout make one: what one writes the other reads.
func pipes() (near, far Stream) {
	r1, w1 := io.Pipe() // far to near
	r2, w2 := io.Pipe() // near to far
	near = Stream{Reader: r1, Writer: w2, Closers: []io.Closer{r1, w2}}
	far = Stream{Reader: r2, Writer: w1, Closers: []io.Closer{r2, w1}}
	return near, far
}

// echoServer listens on a Unix socket in dir and answers each line
// with "echo: " and the line; it stops when the test ends.
func echoServer(t *testing.T, dir string) string {
	t.Helper()
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
				in := bufio.NewScanner(c)
				for in.Scan() {
					fmt.Fprintf(c, "echo: %s\n", in.Text())
				}
			}()
		}
	}()
	return path
}

// started runs Listen at a socket of its own over a stream to Start,
// whose dial reaches local; it returns the far socket, the relay, and
// Listen's result.
func started(t *testing.T, local string) (string, *Relay, Stream, chan error) {
	t.Helper()
	near, far := pipes()
	sock := filepath.Join(t.TempDir(), "far.sock")
	listened := make(chan error, 1)
	go func() { listened <- Listen(sock, far) }()
	r, err := Start(near, func() (net.Conn, error) { return net.Dial("unix", local) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); far.Close() })
	return sock, r, far, listened
}

func ask(t *testing.T, c net.Conn, line string) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := fmt.Fprintln(c, line); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("asking %q: %v", line, err)
	}
	return strings.TrimSuffix(got, "\n")
}

// TestRelay: connections to the far socket reach the local one, many at
// once, each its own; the relay's end removes the far socket.
func TestRelay(t *testing.T) {
	local := echoServer(t, t.TempDir())
	sock, r, _, listened := started(t, local)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("unix", sock)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			for j := range 3 {
				want := fmt.Sprintf("echo: %d.%d", i, j)
				if got := ask(t, c, fmt.Sprintf("%d.%d", i, j)); got != want {
					t.Errorf("got %q, want %q", got, want)
				}
			}
		}()
	}
	wg.Wait()
	// A connection the far side holds open ends with the relay.
	held, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ask(t, held, "hold")
	if err := r.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case err := <-listened:
		if err != nil {
			t.Errorf("Listen: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Listen did not return after the relay's end")
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the far socket is still there: %v", err)
	}
	held.SetDeadline(time.Now().Add(20 * time.Second))
	if n, err := held.Read(make([]byte, 1)); err == nil {
		t.Errorf("the held connection read %d bytes after the relay's end", n)
	}
}

// TestRelayMaxConns: the far side gets at most MaxConns connections at
// once; more are closed, and those carried still work.
func TestRelayMaxConns(t *testing.T) {
	local := echoServer(t, t.TempDir())
	sock, _, _, _ := started(t, local)
	var open []net.Conn
	for i := range MaxConns {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ask(t, c, fmt.Sprint(i)) // carried: answered
		open = append(open, c)
	}
	extra, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintln(extra, "one too many")
	if b, err := io.ReadAll(extra); err != nil || len(b) != 0 {
		t.Errorf("connection %d: read %q, %v; want it closed unanswered", MaxConns+1, b, err)
	}
	if got := ask(t, open[0], "still"); got != "echo: still" {
		t.Errorf("a carried connection after the refusal: %q", got)
	}
}

// TestRelayHostile: a far side that says anything but Hello is refused;
// one that breaks the stream after it ends the relay, with an error,
// and leaves the local socket as it was.
func TestRelayHostile(t *testing.T) {
	dial := func() (net.Conn, error) { return nil, fmt.Errorf("must not dial") }
	for _, said := range []string{"hello\n", strings.Repeat("x", 5000), Hello} {
		near, far := pipes()
		go func() { io.WriteString(far, said); far.Close() }()
		if r, err := Start(near, dial); err == nil {
			r.Close()
			t.Errorf("Start took a far side that said %.20q", said)
		}
	}
	local := echoServer(t, t.TempDir())
	near, far := pipes()
	r, err := func() (*Relay, error) {
		go func() {
			io.WriteString(far, Hello+"\n")
			io.WriteString(far, strings.Repeat("\xff", 64)) // not yamux
		}()
		return Start(near, func() (net.Conn, error) { return net.Dial("unix", local) })
	}()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Done():
	case <-time.After(time.Minute):
		t.Fatal("the relay outlived a broken stream")
	}
	if err := r.Close(); err == nil {
		t.Error("a broken stream ended the relay without an error")
	}
	far.Close()
	c, err := net.Dial("unix", local)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := ask(t, c, "ok"); got != "echo: ok" {
		t.Errorf("the local socket after the attack: %q", got)
	}
}

// TestListenNotASocket: Listen replaces a socket left at its path, and
// nothing else.
func TestListenNotASocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.sock")
	if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, far := pipes()
	if err := Listen(path, far); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen over a file: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "data" {
		t.Errorf("the file became %q", b)
	}
}
