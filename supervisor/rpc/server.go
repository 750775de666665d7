package rpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/substrat/substrat/internal/jsontext"
	"github.com/substrat/substrat/supervisor/api"

	"golang.org/x/sys/unix"
)

// handler serves one method. It decodes params itself, may send frames
// with send (streaming methods), and returns the final result or an error.
// ctx is cancelled when the client goes away or the server closes.
type handler func(ctx context.Context, params json.RawMessage, send func(frame any) error) (any, error)

// Server serves requests on a listener.
type Server struct {
	Log *slog.Logger
	// UID is the only peer uid accepted; -1 accepts any (tests only).
	UID int
	// SamePIDNamespace refuses peers in another PID namespace than the
	// server's: processes in an agent's sandbox (bwrap unshares it). They
	// must not drive the daemon even if a bind exposes its socket; they
	// have their agent's tool socket, which leaves this off.
	SamePIDNamespace bool
	// MaxConns bounds the connections served at once; one more is told
	// so and closed. Default DefaultMaxConns.
	MaxConns int
	// FirstRequest bounds how long a new connection may stay silent
	// before its first request; default DefaultFirstRequest. Later
	// requests may come as slowly as they like (a tool bridge idles
	// between calls; watches stream for hours).
	FirstRequest time.Duration

	mu      sync.Mutex // guards the fields below
	methods map[string]handler
	conns   map[net.Conn]struct{}
	ln      net.Listener
	closed  bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	ctx     context.Context

	inflight sync.WaitGroup // calls between dispatch and their final reply
}

// Defaults of Server.
const (
	DefaultMaxConns     = 512
	DefaultFirstRequest = 10 * time.Second
)

// NewServer returns a server accepting only the current uid.
func NewServer(log *slog.Logger) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{Log: log, UID: os.Getuid(), methods: map[string]handler{},
		conns: map[net.Conn]struct{}{}, ctx: ctx, cancel: cancel}
}

// Handle registers h to serve m. Params are decoded strictly (an unknown
// field is an error, CodeInvalidParams); no params decode as {}. ctx is
// cancelled when the client goes away or the server closes.
func Handle[P, R any](s *Server, m api.Method[P, R], h func(ctx context.Context, p P) (R, error)) {
	s.handle(m.Name, func(ctx context.Context, raw json.RawMessage, _ func(any) error) (any, error) {
		var p P
		if err := decode(raw, &p); err != nil {
			return nil, err
		}
		return h(ctx, p)
	})
}

// HandleStream registers h to serve the streaming method m: h sends its
// frames with send, then returns the final result. An error of send
// means the client is gone (h's ctx is cancelled too).
func HandleStream[P, F, R any](s *Server, m api.StreamMethod[P, F, R], h func(ctx context.Context, p P, send func(F) error) (R, error)) {
	s.handle(m.Name, func(ctx context.Context, raw json.RawMessage, send func(any) error) (any, error) {
		var p P
		if err := decode(raw, &p); err != nil {
			return nil, err
		}
		return h(ctx, p, func(f F) error { return send(f) })
	})
}

func (s *Server) handle(method string, h handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.methods[method] = h
}

// decode unmarshals params strictly into v.
func decode(params json.RawMessage, v any) error {
	if len(bytes.TrimSpace(params)) == 0 || string(params) == "null" {
		params = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return api.Errorf(api.CodeInvalidParams, "invalid params: %v", err)
	}
	return nil
}

// Serve accepts connections until Close. It returns nil after Close. An
// error of Accept (out of descriptors, say) does not stop it: it waits, 5
// ms at first and up to a second, as net/http does, and accepts again.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("rpc: server closed")
	}
	s.ln = ln
	s.mu.Unlock()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return nil
			}
			if delay == 0 {
				delay = 5 * time.Millisecond
				s.Log.Warn("rpc: accept failed; retrying", "err", err)
			} else {
				delay = min(2*delay, time.Second)
			}
			select {
			case <-time.After(delay):
			case <-s.ctx.Done():
				return nil
			}
			continue
		}
		if delay != 0 {
			s.Log.Info("rpc: accepting again")
			delay = 0
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		max := s.MaxConns
		if max <= 0 {
			max = DefaultMaxConns
		}
		if len(s.conns) >= max {
			s.mu.Unlock()
			go refuse(c, api.Errorf(api.CodeUnavailable, "the daemon serves %d connections already; try again when some are done", max))
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// refuse writes e to c and closes it, without waiting long for a peer
// that does not read.
func refuse(c net.Conn, e *api.Error) {
	c.SetWriteDeadline(time.Now().Add(time.Second))
	(&connWriter{w: bufio.NewWriter(c)}).write(&Response{Error: e})
	c.Close()
}

// Close stops accepting, cancels running handlers and lets them write
// their final replies (a stop request is answered before the daemon goes),
// then closes every connection and waits for their goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	if s.ln != nil {
		s.ln.Close()
	}
	s.cancel()
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// checkPeer refuses a peer of another uid, or of another PID namespace
// when SamePIDNamespace is set.
func (s *Server) checkPeer(c net.Conn) *api.Error {
	if s.UID < 0 && !s.SamePIDNamespace {
		return nil
	}
	cred, err := peerCred(c)
	if err != nil {
		return api.Errorf(api.CodePermission, "connection refused: cannot tell who the peer is: %v", err)
	}
	if s.UID >= 0 && int(cred.Uid) != s.UID {
		return api.Errorf(api.CodePermission, "connection refused: peer uid %d is not the daemon's uid %d", cred.Uid, s.UID)
	}
	if s.SamePIDNamespace {
		own, err := os.Readlink("/proc/self/ns/pid")
		if err != nil {
			return nil // no /proc: nothing to compare, and no sandbox either
		}
		peer, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", cred.Pid))
		if err != nil || peer != own {
			return api.Errorf(api.CodePermission, "connection refused: the peer (pid %d) runs in another PID namespace, such as an agent's sandbox; "+
				"sandboxed processes reach only their agent's tools", cred.Pid)
		}
	}
	return nil
}

// peerCred returns the credentials of the process at the other end of a
// Unix socket.
func peerCred(c net.Conn) (*unix.Ucred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, errors.New("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	err = raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil {
		return nil, err
	}
	return cred, cerr
}

type connWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (cw *connWriter) write(r *Response) error {
	b, err := jsontext.Marshal(r)
	if err != nil {
		b, _ = jsontext.Marshal(&Response{ID: r.ID, Error: &api.Error{Code: api.CodeInternal, Message: "cannot encode response: " + err.Error()}})
	}
	cw.mu.Lock()
	defer cw.mu.Unlock()
	cw.w.Write(b)
	cw.w.WriteByte('\n')
	return cw.w.Flush()
}

func (s *Server) serveConn(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	cw := &connWriter{w: bufio.NewWriter(c)}
	if e := s.checkPeer(c); e != nil {
		s.Log.Warn("rpc: refused a connection", "reason", e.Message)
		cw.write(&Response{Error: e})
		return
	}
	// A reader goroutine feeds request lines to this loop, and cancels
	// the connection's context when the client goes away, so that a
	// streaming handler stops even when it has nothing to send.
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	lines := make(chan []byte)
	var readErr error
	first := s.FirstRequest
	if first <= 0 {
		first = DefaultFirstRequest
	}
	c.SetReadDeadline(time.Now().Add(first))
	go func() {
		defer close(lines)
		br := bufio.NewReaderSize(c, 64<<10)
		for n := 0; ; n++ {
			line, err := readLine(br)
			if err != nil {
				readErr = err
				cancel()
				return
			}
			if n == 0 {
				c.SetReadDeadline(time.Time{})
			}
			select {
			case lines <- line:
			case <-ctx.Done():
				return
			}
		}
	}()
	for line := range lines {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var req Request
		if err := json.Unmarshal(line, &req); err != nil {
			cw.write(&Response{Error: api.Errorf(api.CodeParse, "malformed request: %v", err)})
			continue
		}
		s.mu.Lock()
		h := s.methods[req.Method]
		if s.closed {
			s.mu.Unlock()
			cw.write(&Response{ID: req.ID, Error: api.Errorf(api.CodeUnavailable, "the daemon is stopping")})
			return
		}
		s.inflight.Add(1)
		s.mu.Unlock()
		if h == nil {
			cw.write(&Response{ID: req.ID, Error: api.Errorf(api.CodeUnknownMethod, "unknown method %q", req.Method)})
			s.inflight.Done()
			continue
		}
		s.call(ctx, cw, &req, h)
		s.inflight.Done()
	}
	var ne net.Error
	switch {
	case errors.Is(readErr, errLineTooLong):
		cw.write(&Response{Error: api.Errorf(api.CodeTooLong, "request line exceeds %d bytes; closing the connection", MaxLine)})
	case errors.As(readErr, &ne) && ne.Timeout():
		c.SetWriteDeadline(time.Now().Add(time.Second))
		cw.write(&Response{Error: api.Errorf(api.CodeInvalidRequest, "no request within %s of connecting; closing the connection", first)})
	}
}

func (s *Server) call(ctx context.Context, cw *connWriter, req *Request, h handler) {
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	send := func(frame any) error {
		b, err := jsontext.Marshal(frame)
		if err != nil {
			return err
		}
		if err := cw.write(&Response{ID: req.ID, Frame: b}); err != nil {
			cancel()
			return err
		}
		return nil
	}
	var (
		result any
		err    error
	)
	func() {
		defer func() {
			if r := recover(); r != nil {
				s.Log.Error("rpc: handler panicked", "method", req.Method, "panic", r)
				err = api.Errorf(api.CodeInternal, "internal error in %s (see daemon.log)", req.Method)
			}
		}()
		result, err = h(hctx, req.Params, send)
	}()
	resp := &Response{ID: req.ID}
	if err != nil {
		resp.Error = api.AsError(err)
	} else {
		b, merr := jsontext.Marshal(result)
		switch {
		case merr != nil:
			resp.Error = api.Errorf(api.CodeInternal, "cannot encode result: %v", merr)
		case len(b) > PartSize:
			// Too long for one line: in parts (see package doc).
			for len(b) > 0 {
				n := min(len(b), PartSize)
				for n < len(b) && n > 1 && !utf8.RuneStart(b[n]) {
					n-- // a part ends between characters, never inside one
				}
				if err := cw.write(&Response{ID: req.ID, Part: string(b[:n])}); err != nil {
					return
				}
				b = b[n:]
				resp.Parts++
			}
		default:
			resp.Result = b
		}
	}
	cw.write(resp)
}

var errLineTooLong = errors.New("line too long")

// readLine reads a line of at most MaxLine bytes. A longer line returns
// errLineTooLong.
func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(buf)+len(frag) > MaxLine {
			return nil, errLineTooLong
		}
		buf = append(buf, frag...)
		if err == nil {
			return buf, nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == io.EOF && len(buf) > 0 {
			return buf, nil
		}
		return nil, err
	}
}
