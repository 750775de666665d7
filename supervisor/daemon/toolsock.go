package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/substrat/substrat/supervisor"
	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor/rpc"
)

// maxSocketPath is the longest path a Unix socket can be bound at
// (sun_path, with its NUL).
const maxSocketPath = 107

// toolSockets are the per-agent sockets. The MCP server that a CLI starts
// cannot reach daemon.sock, and must not: whoever reaches it drives the
// whole daemon. Inside an agent's sandbox it does not see it; outside one
// it runs in a PID namespace of its own (launch.Contain), which daemon.sock
// refuses. It gets run/<id>.sock instead, which answers tool.list and
// tool.call for that one agent and nothing else. A socket is opened when
// the agent's provider session starts, and closed when the agent leaves
// the tree or the daemon stops.
type toolSockets struct {
	mu     sync.Mutex
	closed bool
	byID   map[string]*rpc.Server
}

// toolSocket returns the path of agent id's tool socket, listening.
func (h *host) toolSocket(id string) (string, error) {
	path := h.store.Layout().ToolSocket(id)
	ts := &h.sockets
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return "", errors.New("the daemon is stopping")
	}
	if ts.byID[id] != nil {
		return path, nil
	}
	if len(path) > maxSocketPath {
		return "", fmt.Errorf("the tool socket path %s is longer than the %d bytes a Unix socket allows; use a shorter --home", path, maxSocketPath)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	// A socket file left by a daemon that died is stale: the daemon's lock
	// (or, in tests, the only Core) owns run/.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return "", err
	}
	srv := rpc.NewServer(h.log)
	registerTools(srv, h.core, id)
	if ts.byID == nil {
		ts.byID = map[string]*rpc.Server{}
	}
	ts.byID[id] = srv
	go func() {
		if err := srv.Serve(ln); err != nil {
			ln.Close() // closed before it served
			h.log.Debug("tool socket ended", "agent", id, "err", err)
		}
	}()
	return path, nil
}

// closeToolSocket closes agent id's tool socket, if it has one, and
// removes the file.
func (h *host) closeToolSocket(id string) {
	ts := &h.sockets
	ts.mu.Lock()
	srv := ts.byID[id]
	delete(ts.byID, id)
	ts.mu.Unlock()
	if srv != nil {
		srv.Close()
		os.Remove(h.store.Layout().ToolSocket(id))
	}
}

// closeToolSockets closes every tool socket; no new one opens.
func (h *host) closeToolSockets() {
	ts := &h.sockets
	ts.mu.Lock()
	ts.closed = true
	ids := make([]string, 0, len(ts.byID))
	for id := range ts.byID {
		ids = append(ids, id)
	}
	ts.mu.Unlock()
	for _, id := range ids {
		h.closeToolSocket(id)
	}
}

// registerTools registers tool.list and tool.call on srv: for any agent
// (daemon.sock, only ""), or for agent only alone (its tool socket).
func registerTools(srv *rpc.Server, c *supervisor.Core, only string) {
	rpc.Handle(srv, api.ToolList, func(ctx context.Context, _ struct{}) ([]api.ToolSpec, error) {
		return supervisor.Tools(), nil
	})
	rpc.Handle(srv, api.ToolCall, func(ctx context.Context, p api.ToolCallParams) (api.ToolResult, error) {
		switch {
		case only == "" && !fsstore.IsID(p.Agent):
			return api.ToolResult{}, api.Errorf(api.CodeInvalidParams, "agent must be an agent id, got %q", p.Agent)
		case only != "" && p.Agent != "" && p.Agent != only:
			return api.ToolResult{}, api.Errorf(api.CodeInvalidParams, "this socket serves agent %s only, not %q", only, p.Agent)
		case only != "":
			p.Agent = only
		}
		return api.ToolResult(c.CallTool(ctx, p.Agent, provider.ToolCall(p.Call))), nil
	})
}
