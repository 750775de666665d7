package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script"
	"github.com/substrat/substrat/supervisor"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/rpc"
)

// dialEnv, when set, makes the test binary a client of the socket it
// names (see TestSandboxCannotDriveDaemon): it asks for daemon.status and
// prints the answer or the error.
const dialEnv = "SUBSTRAT_TEST_DIAL"

func TestMain(m *testing.M) {
	if sock := os.Getenv(dialEnv); sock != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := rpc.Dial(ctx, sock)
		if err == nil {
			var st api.StatusResult
			if err = callInto(ctx, c, api.DaemonStatus, struct{}{}, &st); err == nil {
				fmt.Printf("status: pid %d\n", st.Pid)
			}
		}
		if err != nil {
			fmt.Printf("error: %v\n", err)
		}
		os.Exit(0)
	}
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	os.Exit(m.Run())
}

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func testProviders() supervisor.Providers { return provider.NewRegistry(script.New()) }

// newCore opens home and recovers a core with the daemon's host, as Run
// does, without the socket.
func newCore(t *testing.T, home string) (*supervisor.Core, *host) {
	t.Helper()
	st, err := fsstore.Open(home, fsstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(st, testLog(t))
	c := supervisor.New(supervisor.Config{Store: st, Providers: testProviders(), Log: testLog(t), Host: h})
	h.core = c
	if _, err := c.Recover(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.closeToolSockets() })
	return c, h
}

func mustCreate(t *testing.T, c *supervisor.Core, p api.CreateParams) api.AgentInfo {
	t.Helper()
	a, err := c.CreateAgent(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// sessionOf returns agent ref's session, or nil if there is no such agent.
func sessionOf(c *supervisor.Core, ref string) *fsstore.Session {
	res, err := c.Inspect(ref)
	if err != nil {
		return nil
	}
	return res.Session
}

func send(t *testing.T, c *supervisor.Core, to, text string) {
	t.Helper()
	if _, err := c.Send(api.SendParams{To: to, Text: text}); err != nil {
		t.Fatal(err)
	}
}

// drain runs turns until no agent is runnable.
func drain(t *testing.T, c *supervisor.Core) {
	t.Helper()
	for range 100 {
		ids := c.Runnable()
		if len(ids) == 0 {
			return
		}
		for _, id := range ids {
			if err := c.RunTurn(context.Background(), id); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Fatal("still runnable after 100 rounds")
}

// agentFiles returns the files of agent ref.
func agentFiles(t *testing.T, c *supervisor.Core, home, ref string) fsstore.AgentFiles {
	t.Helper()
	id, err := c.Resolve(ref)
	if err != nil {
		t.Fatal(err)
	}
	return fsstore.Layout{Home: home}.Agent(id)
}

// shortDir is a temporary directory whose sockets fit in sun_path.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "sbd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return filepath.Clean(d)
}

func mustResolve(t *testing.T, c *supervisor.Core, ref string) string {
	t.Helper()
	id, err := c.Resolve(ref)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// callInto makes the call m on c and stores its result in *r (r nil:
// drops it).
func callInto[P, R any](ctx context.Context, c *rpc.Client, m api.Method[P, R], p P, r *R) error {
	res, err := rpc.Call(ctx, c, m, p)
	if err == nil && r != nil {
		*r = res
	}
	return err
}

// streamInto is callInto for a streaming method, whose frames it drops.
func streamInto[P, F, R any](ctx context.Context, c *rpc.Client, m api.StreamMethod[P, F, R], p P, r *R) error {
	res, err := rpc.Stream(ctx, c, m, p, nil)
	if err == nil && r != nil {
		*r = res
	}
	return err
}

// callAt is callInto on a connection of its own to sock.
func callAt[P, R any](ctx context.Context, sock string, m api.Method[P, R], p P, r *R) error {
	c, err := rpc.Dial(ctx, sock)
	if err != nil {
		return err
	}
	defer c.Close()
	return callInto(ctx, c, m, p, r)
}

// callRaw calls a method by name with any params, as a client that does
// not follow the contract may: for the errors it gets.
func callRaw(ctx context.Context, c *rpc.Client, method string, params any) error {
	_, err := rpc.Call(ctx, c, api.Method[any, json.RawMessage]{Name: method}, params)
	return err
}
