package rpc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"

	"github.com/substrat/substrat/internal/jsontext"
	"github.com/substrat/substrat/supervisor/api"
)

// ErrNoDaemon means nothing answers on the socket.
var ErrNoDaemon = errors.New("the daemon is not running")

// ErrNoPermission means the socket is there but not this user's to use.
var ErrNoPermission = errors.New("permission denied: the daemon's socket and home belong to another user")

// Client is one connection to the daemon. Calls are serialised.
type Client struct {
	mu   sync.Mutex
	conn net.Conn
	br   *bufio.Reader
	next uint64
}

// Dial connects to the daemon's socket.
func Dial(ctx context.Context, path string) (*Client, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
		return nil, fmt.Errorf("%w (%v)", ErrNoPermission, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", ErrNoDaemon, err)
	}
	return &Client{conn: c, br: bufio.NewReaderSize(c, 64<<10)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Call makes the call m with params p and returns its result. An
// *api.Error from the daemon is returned as is.
func Call[P, R any](ctx context.Context, c *Client, m api.Method[P, R], p P) (R, error) {
	var r R
	err := c.do(ctx, m.Name, params(p), nil, &r)
	return r, err
}

// CallRaw is Call for a caller that wants the result's JSON text, which
// decodes as an R: its size, or to pass it on as it came.
func CallRaw[P, R any](ctx context.Context, c *Client, m api.Method[P, R], p P) (json.RawMessage, error) {
	var r json.RawMessage
	err := c.do(ctx, m.Name, params(p), nil, &r)
	return r, err
}

// Stream makes the streaming call m with params p, calls onFrame with
// each frame (nil: frames are skipped), and returns the final result. An
// error of onFrame ends the call with it.
func Stream[P, F, R any](ctx context.Context, c *Client, m api.StreamMethod[P, F, R], p P, onFrame func(F) error) (R, error) {
	var r R
	var raw func(json.RawMessage) error
	if onFrame != nil {
		raw = func(b json.RawMessage) error {
			var f F
			if err := json.Unmarshal(b, &f); err != nil {
				return fmt.Errorf("daemon sent a malformed frame: %v", err)
			}
			return onFrame(f)
		}
	}
	err := c.do(ctx, m.Name, params(p), raw, &r)
	return r, err
}

// StreamRaw is Stream for a reader that shows frames as the daemon sent
// them (--json): onFrame gets each frame's JSON text, which decodes as an
// F.
func StreamRaw[P, F, R any](ctx context.Context, c *Client, m api.StreamMethod[P, F, R], p P, onFrame func(json.RawMessage) error) (R, error) {
	var r R
	err := c.do(ctx, m.Name, params(p), onFrame, &r)
	return r, err
}

// params is p to send: nothing for a method without params.
func params[P any](p P) any {
	if _, none := any(p).(struct{}); none {
		return nil
	}
	return p
}

// do sends a request, calls onFrame for each frame, and decodes the
// final result into result (if non-nil). An *api.Error from the daemon is
// returned as is.
func (c *Client) do(ctx context.Context, method string, params any, onFrame func(json.RawMessage) error, result any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	req := Request{ID: c.next, Method: method}
	if params != nil {
		b, err := jsontext.Marshal(params) // what a person typed, as typed: "&&" stays "&&"
		if err != nil {
			return err
		}
		req.Params = b
	}
	line, err := jsontext.Marshal(req)
	if err != nil {
		return err
	}
	if len(line)+1 > MaxLine {
		return api.Errorf(api.CodeTooLong, "request is %d bytes, limit %d", len(line)+1, MaxLine)
	}
	stop := context.AfterFunc(ctx, func() { c.conn.Close() })
	defer stop()
	if _, err := c.conn.Write(append(line, '\n')); err != nil {
		// The daemon may have refused the connection before reading
		// anything (wrong uid); its reason is worth more than EPIPE.
		if raw, rerr := readLine(c.br); rerr == nil {
			var resp Response
			if json.Unmarshal(raw, &resp) == nil && resp.Error != nil {
				return resp.Error
			}
		}
		return c.connErr(ctx, err)
	}
	var parts strings.Builder
	nparts := 0
	for {
		raw, err := readLine(c.br)
		if err != nil {
			return c.connErr(ctx, err)
		}
		var resp Response
		if err := json.Unmarshal(raw, &resp); err != nil {
			return fmt.Errorf("daemon sent a malformed response: %v", err)
		}
		if resp.ID != req.ID && resp.ID != 0 {
			return fmt.Errorf("daemon answered request %d, expected %d", resp.ID, req.ID)
		}
		switch {
		case resp.Error != nil:
			return resp.Error
		case resp.Frame != nil:
			if onFrame != nil {
				if err := onFrame(resp.Frame); err != nil {
					return err
				}
			}
		case resp.Part != "":
			if parts.Len()+len(resp.Part) > MaxResult {
				return fmt.Errorf("daemon sent a result of more than %d bytes", MaxResult)
			}
			parts.WriteString(resp.Part)
			nparts++
		case resp.Parts > 0:
			if resp.Parts != nparts {
				return fmt.Errorf("daemon sent %d parts of a result and said %d", nparts, resp.Parts)
			}
			if result != nil {
				return json.Unmarshal([]byte(parts.String()), result)
			}
			return nil
		default:
			if result != nil && resp.Result != nil {
				return json.Unmarshal(resp.Result, result)
			}
			return nil
		}
	}
}

func (c *Client) connErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("connection to the daemon lost: %w", err)
}
