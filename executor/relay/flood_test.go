package relay

import (
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

// frame is a yamux frame's header (and data): version 0, type, flags,
// stream, length.
func frame(typ byte, flags uint16, stream, length uint32, data []byte) []byte {
	b := make([]byte, 12, 12+len(data))
	b[1] = typ
	binary.BigEndian.PutUint16(b[2:], flags)
	binary.BigEndian.PutUint32(b[4:], stream)
	binary.BigEndian.PutUint32(b[8:], length)
	return append(b, data...)
}

const (
	typeData, typeWindowUpdate, typePing = 0, 1, 2
	flagSYN                              = 1
)

// hostileStart starts this side of a relay over a stream whose far side
// the test writes raw (after Hello); read: whether the far side reads
// what this side sends.
func hostileStart(t *testing.T, read bool) (*Relay, io.Writer) {
	t.Helper()
	local := echoServer(t, t.TempDir())
	near, far := pipes()
	go io.WriteString(far, Hello+"\n")
	if read {
		go io.Copy(io.Discard, far)
	}
	r, err := Start(near, func() (net.Conn, error) { return net.Dial("unix", local) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { far.Close(); r.Close() })
	return r, far
}

// TestRelayPingFlood: a far side that sends pings and reads nothing
// back does not grow this side's goroutines (yamux answers each ping in
// a goroutine of its own, which waits for the stream up to its write
// timeout).
func TestRelayPingFlood(t *testing.T) {
	r, far := hostileStart(t, false)
	before := runtime.NumGoroutine()
	var buf []byte
	for i := range 20000 {
		buf = append(buf, frame(typePing, flagSYN, 0, uint32(i), nil)...)
	}
	done := make(chan error, 1)
	go func() { _, err := far.Write(buf); done <- err }()
	select {
	case <-done:
	case <-r.Done():
	case <-time.After(5 * time.Second):
	}
	if n := runtime.NumGoroutine() - before; n > 1000 {
		t.Errorf("%d goroutines more after 20,000 pings", n)
	}
}

// TestRelayStreamFlood: a far side that opens streams and never closes
// them (those over MaxConns are closed here, and would wait for its
// close for yamux's StreamCloseTimeout, 5 minutes, each with up to its
// window of data) ends the relay, with an error, before it holds many
// of them.
func TestRelayStreamFlood(t *testing.T) {
	r, far := hostileStart(t, true)
	data := make([]byte, 64<<10)
	var err error
	n := 0
	for id := uint32(1); id < 2*5000 && err == nil; id += 2 {
		_, err = far.Write(frame(typeData, flagSYN, id, uint32(len(data)), data))
		n++
	}
	select {
	case <-r.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("the relay still runs after %d streams opened (%d MiB sent)", n, n*len(data)>>20)
	}
	if s := r.sess.NumStreams(); s > maxStreams+MaxConns {
		t.Errorf("the relay held %d streams (%d opened, %d MiB sent)", s, n, n*len(data)>>20)
	}
	if err := r.Close(); err == nil {
		t.Error("the relay ended without an error")
	}
}

// TestRelayNoLeak: a relay that carried connections, some held open by
// the far side and some by the local socket, leaves no goroutine
// behind once closed, whatever the far side does after.
func TestRelayNoLeak(t *testing.T) {
	local := echoServer(t, t.TempDir())
	time.Sleep(10 * time.Millisecond)
	before := runtime.NumGoroutine()
	sock, r, far, _ := started(t, local)
	var conns []net.Conn
	for i := range 10 {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		ask(t, c, "x")
		if i%2 == 0 {
			c.(*net.UnixConn).CloseWrite()
		}
		conns = append(conns, c)
	}
	r.Close()
	far.Close()
	for _, c := range conns {
		c.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}
