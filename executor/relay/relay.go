// Package relay carries the connections made to a Unix socket on a far
// machine (an agent's pod) over one byte stream (an exec's stdin and
// stdout) to a socket here: an agent's tool socket, for the MCP server
// that its CLI starts there.
//
// The far side (Listen, `substrat tool-relay`) listens on the socket,
// says it is ready with one line on the stream, then opens one
// multiplexed stream (yamux) per connection it accepts. This side
// (Start) waits for that line, then dials the local socket once for
// each stream the far side opens, and copies both ways. The far side is
// the agent's: what it sends is hostile. It can open at most MaxConns
// connections at once (more are closed as they come; more than
// maxStreams streams open, those it did not close when this side did
// among them, end the relay: each would hold a window of data here for
// minutes), its pings are dropped (yamux answers each in a goroutine
// of its own: a flood grew this side without bound), it can reach nothing
// but the one socket that this side dials, and end the relay by
// breaking the stream, which ends the connections it carried and
// nothing else.
package relay

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// Hello is the line the far side writes when its socket listens.
const Hello = "substrat-relay 1"

// MaxConns bounds the connections a relay carries at once.
const MaxConns = 32

// maxStreams bounds the streams this side holds, those over MaxConns
// and those it closed among them: more end the relay.
const maxStreams = 4 * MaxConns

// config is yamux's, quiet, for both sides.
func config() *yamux.Config {
	c := yamux.DefaultConfig()
	c.LogOutput = io.Discard
	c.EnableKeepAlive = false // the exec's stream has its own; its end ends the relay
	c.AcceptBacklog = MaxConns
	c.StreamOpenTimeout = 30 * time.Second
	return c
}

// Stream is a byte stream made of a reader and a writer (an exec's
// stdout and stdin); Close closes both.
type Stream struct {
	io.Reader
	io.Writer
	Closers []io.Closer
}

// Close closes every closer of s.
func (s Stream) Close() error {
	var errs []error
	for _, c := range s.Closers {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// A Relay is this side of a relay, started by Start.
type Relay struct {
	sess *yamux.Session
	done chan struct{}
	err  error
}

// Start reads the far side's Hello from stream, then serves the
// streams it opens, each with a connection that dial makes, in the
// background until the stream ends or Close. A stream that does not
// begin with Hello (at most 256 bytes are read for it) is an error;
// the caller bounds the wait by closing the stream.
func Start(stream io.ReadWriteCloser, dial func() (net.Conn, error)) (*Relay, error) {
	br := bufio.NewReaderSize(stream, 4096)
	line, err := readLine(br, 256)
	if err != nil {
		return nil, fmt.Errorf("relay: waiting for the far side: %w", err)
	}
	if line != Hello {
		return nil, fmt.Errorf("relay: the far side said %q, not %q", line, Hello)
	}
	sess, err := yamux.Server(Stream{Reader: &noPings{r: br}, Writer: stream, Closers: []io.Closer{stream}}, config())
	if err != nil {
		return nil, err
	}
	r := &Relay{sess: sess, done: make(chan struct{})}
	go r.serve(dial)
	return r, nil
}

// readLine reads one line of at most n bytes, without its newline.
func readLine(br *bufio.Reader, n int) (string, error) {
	var b strings.Builder
	for b.Len() <= n {
		c, err := br.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
		if c == '\n' {
			return b.String(), nil
		}
		b.WriteByte(c)
	}
	return "", fmt.Errorf("a line longer than %d bytes", n)
}

func (r *Relay) serve(dial func() (net.Conn, error)) {
	defer close(r.done)
	slots := make(chan struct{}, MaxConns)
	var live conns
	defer live.end()
	for {
		s, err := r.sess.AcceptStream()
		if err != nil {
			if !errors.Is(err, yamux.ErrSessionShutdown) && !errors.Is(err, io.EOF) {
				r.err = err
			}
			return
		}
		if n := r.sess.NumStreams(); n > maxStreams {
			// Those it did not close: each waits for that for yamux's
			// StreamCloseTimeout, with up to a window of its data.
			r.err = fmt.Errorf("relay: the far side holds %d streams open", n)
			r.sess.Close()
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			s.Close() // over MaxConns
			continue
		}
		live.run(func() {
			defer func() { <-slots }()
			c, err := dial()
			if err != nil {
				s.Close()
				return
			}
			live.join(s, c)
		})
	}
}

// conns are the connections a relay carries, closed when it ends.
type conns struct {
	wg    sync.WaitGroup
	mu    sync.Mutex
	all   map[net.Conn]bool
	ended bool
}

// run runs f in a goroutine that end waits for.
func (cs *conns) run(f func()) {
	cs.wg.Add(1)
	go func() {
		defer cs.wg.Done()
		f()
	}()
}

// join joins a and b (see join), closed at end if not before.
func (cs *conns) join(a, b net.Conn) {
	cs.mu.Lock()
	if cs.ended {
		cs.mu.Unlock()
		a.Close()
		b.Close()
		return
	}
	if cs.all == nil {
		cs.all = map[net.Conn]bool{}
	}
	cs.all[a], cs.all[b] = true, true
	cs.mu.Unlock()
	join(a, b)
	cs.mu.Lock()
	delete(cs.all, a)
	delete(cs.all, b)
	cs.mu.Unlock()
}

// end closes every connection, then waits for the goroutines of run.
func (cs *conns) end() {
	cs.mu.Lock()
	cs.ended = true
	for c := range cs.all {
		c.Close()
	}
	cs.mu.Unlock()
	cs.wg.Wait()
}

// Close ends the relay and every connection it carries, and waits for
// them; it returns what broke the relay before, if anything did.
func (r *Relay) Close() error {
	r.sess.Close()
	<-r.done
	return r.err
}

// Done is closed when the relay has ended.
func (r *Relay) Done() <-chan struct{} { return r.done }

// halfCloser is a connection that can close its writing half.
type halfCloser interface{ CloseWrite() error }

// join copies a to b and b to a until both directions end, then closes
// both. When one direction ends, the other's writer is half-closed
// where it can be (a Unix connection), else closed.
func join(a, b net.Conn) {
	var wg sync.WaitGroup
	one := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(dst, src)
		if h, ok := dst.(halfCloser); ok {
			h.CloseWrite()
		} else {
			dst.Close()
		}
	}
	wg.Add(2)
	go one(a, b)
	go one(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}

// Listen is the far side: it listens on the Unix socket path (replacing
// a socket left there, nothing else), writes Hello to stream, and
// carries each connection it accepts over its own multiplexed stream,
// until stream ends; then it removes the socket.
func Listen(path string, stream io.ReadWriteCloser) error {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return fmt.Errorf("relay: %s exists and is not a socket", path)
		}
		os.Remove(path)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	defer l.Close() // removes the socket
	if _, err := io.WriteString(stream, Hello+"\n"); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	sess, err := yamux.Client(stream, config())
	if err != nil {
		return err
	}
	go func() {
		<-sess.CloseChan()
		l.Close()
	}()
	var live conns
	defer live.end()
	for {
		c, err := l.Accept()
		if err != nil {
			if sess.IsClosed() {
				return nil
			}
			sess.Close()
			return fmt.Errorf("relay: %w", err)
		}
		s, err := sess.OpenStream()
		if err != nil {
			c.Close()
			continue
		}
		live.run(func() { live.join(c, s) })
	}
}

// noPings passes on the yamux frames read from r, but for the far
// side's pings, which it drops: yamux answers each in a goroutine of
// its own, which waits for the stream (up to its write timeout), so a
// flood of them that the far side does not read the answers of would
// grow this side without bound. Neither side pings (no keepalive).
type noPings struct {
	r    io.Reader
	hdr  [12]byte
	out  []byte // what is left to pass of the last header
	left uint32 // what is left to pass of the last data frame's bytes
}

func (f *noPings) Read(p []byte) (int, error) {
	for {
		switch {
		case len(f.out) > 0:
			n := copy(p, f.out)
			f.out = f.out[n:]
			return n, nil
		case f.left > 0:
			if uint32(len(p)) > f.left {
				p = p[:f.left]
			}
			n, err := f.r.Read(p)
			f.left -= uint32(n)
			return n, err
		}
		if _, err := io.ReadFull(f.r, f.hdr[:]); err != nil {
			return 0, err
		}
		const typeData, typePing, flagSYN = 0, 2, 1
		switch f.hdr[1] {
		case typePing:
			if binary.BigEndian.Uint16(f.hdr[2:])&flagSYN != 0 {
				continue
			}
		case typeData:
			f.left = binary.BigEndian.Uint32(f.hdr[8:])
		}
		f.out = f.hdr[:]
	}
}
