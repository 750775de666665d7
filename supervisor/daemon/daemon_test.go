package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor"
	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script"
	"github.com/substrat/substrat/supervisor/rpc"
)

// startDaemon runs a real daemon on a temp home and returns the socket
// path. It is stopped when the test ends.
func startDaemon(t *testing.T) (home, sock string) {
	t.Helper()
	home = t.TempDir()
	return home, startDaemonAt(t, home)
}

// startDaemonAt runs a real daemon on home (with no flags, and an empty
// environment for its settings) and returns its socket.
func startDaemonAt(t *testing.T, home string) string {
	t.Helper()
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Home: home, Providers: provider.NewRegistry(script.New()), LogOutput: testWriter{t},
			Ready: func() { close(ready) }, Grace: time.Second, Getenv: func(string) string { return "" }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("daemon exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("daemon did not start")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	return fsstore.Layout{Home: home}.Socket()
}

type rawConn struct {
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, sock string) *rawConn {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{c: c, br: bufio.NewReader(c)}
}

func (r *rawConn) roundTrip(t *testing.T, line string) rpc.Response {
	t.Helper()
	if _, err := r.c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	return r.read(t)
}

func (r *rawConn) read(t *testing.T) rpc.Response {
	t.Helper()
	r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	l, err := r.br.ReadBytes('\n')
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var resp rpc.Response
	if err := json.Unmarshal(l, &resp); err != nil {
		t.Fatalf("bad response %q: %v", l, err)
	}
	return resp
}

func TestSocketBadInput(t *testing.T) {
	home, sock := startDaemon(t)
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	if fi, _ := os.Stat(home); fi.Mode().Perm() != 0o700 {
		t.Errorf("home mode %v, want 0700", fi.Mode().Perm())
	}
	r := dialRaw(t, sock)
	cases := []struct {
		line, code, msg string
	}{
		{`{not json`, api.CodeParse, "malformed request"},
		{`[1,2,3]`, api.CodeParse, "malformed request"},
		{`{"id":7,"method":"no.such"}`, api.CodeUnknownMethod, `unknown method "no.such"`},
		{`{"id":8,"method":"agent.create","params":{"name":42}}`, api.CodeInvalidParams, "invalid params"},
		{`{"id":9,"method":"agent.create","params":{"nmae":"x"}}`, api.CodeInvalidParams, `unknown field "nmae"`},
		{`{"id":10,"method":"agent.create","params":{"name":"../x"}}`, api.CodeInvalidParams, "contains '..'"},
		{`{"id":11,"method":"agent.inspect","params":{"ref":"ghost"}}`, api.CodeNotFound, `no agent named "ghost"`},
		{`{"id":12,"method":"agent.inspect","params":"str"}`, api.CodeInvalidParams, "invalid params"},
		{`{"id":13,"method":"agent.send","params":{"ref":"","text":"x"}}`, api.CodeInvalidParams, "empty agent ref"},
	}
	for _, tc := range cases {
		resp := r.roundTrip(t, tc.line)
		if resp.Error == nil || resp.Error.Code != tc.code || !strings.Contains(resp.Error.Message, tc.msg) {
			t.Errorf("%s: got %+v, want code %s with %q", tc.line, resp.Error, tc.code, tc.msg)
		}
	}
	// The same connection still works after all that.
	resp := r.roundTrip(t, `{"id":20,"method":"agent.create","params":{"name":"ok"}}`)
	if resp.Error != nil || resp.ID != 20 {
		t.Fatalf("create after bad input: %+v", resp)
	}

	// An oversized line: an error, then the connection is closed; the
	// daemon serves others.
	big := dialRaw(t, sock)
	go big.c.Write([]byte(`{"id":1,"method":"agent.create","params":{"name":"` + strings.Repeat("a", rpc.MaxLine) + `"}}` + "\n"))
	resp = big.read(t)
	if resp.Error == nil || resp.Error.Code != api.CodeTooLong {
		t.Fatalf("oversized line: %+v", resp)
	}
	if _, err := big.br.ReadBytes('\n'); err == nil {
		t.Error("connection not closed after an oversized line")
	}
	resp = dialRaw(t, sock).roundTrip(t, `{"id":1,"method":"agent.list"}`)
	if resp.Error != nil || !strings.Contains(string(resp.Result), `"name":"ok"`) {
		t.Fatalf("list after oversized line: %+v", resp)
	}
}

func TestSocketManyClients(t *testing.T) {
	_, sock := startDaemon(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := rpc.Dial(context.Background(), sock)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			var info api.AgentInfo
			if err := callInto(context.Background(), c, api.AgentCreate, api.CreateParams{Name: fmt.Sprintf("a%d", i)}, &info); err != nil {
				errs <- err
				return
			}
			var res api.SendResult
			if err := streamInto(context.Background(), c, api.AgentSend, api.SendMessageParams{Ref: info.ID, Text: "ping", Wait: true}, &res); err != nil {
				errs <- err
				return
			}
			if res.Text != "ping" {
				errs <- fmt.Errorf("agent %d answered %q", i, res.Text)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestSocketPeerUID(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(testLog(t))
	srv.UID = os.Getuid() + 1 // nobody we are
	ping := api.Method[struct{}, string]{Name: "ping"}
	rpc.Handle(srv, ping, func(context.Context, struct{}) (string, error) { return "pong", nil })
	go srv.Serve(ln)
	defer srv.Close()
	c, err := rpc.Dial(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = rpc.Call(context.Background(), c, ping, struct{}{})
	var re *api.Error
	if !errors.As(err, &re) || re.Code != api.CodePermission {
		t.Fatalf("got %v, want permission_denied", err)
	}
}

func TestSecondDaemonRefused(t *testing.T) {
	home, _ := startDaemon(t)
	err := Run(context.Background(), Options{Home: home, Providers: provider.NewRegistry(script.New()), LogOutput: testWriter{t}})
	var re *RunningError
	if !errors.As(err, &re) || re.Pid != os.Getpid() {
		t.Fatalf("second daemon: %v, want RunningError with our pid", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("(pid %d)", os.Getpid())) {
		t.Errorf("message %q lacks the pid", err)
	}
}

// tool.call reaches the tools of an agent's running turn, and is refused
// with a tool error outside a turn.
func TestToolCallRPC(t *testing.T) {
	_, sock := startDaemon(t)
	c, err := rpc.Dial(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var specs []api.ToolSpec
	if err := callInto(context.Background(), c, api.ToolList, struct{}{}, &specs); err != nil || len(specs) < 6 {
		t.Fatalf("tool.list: %v, %d tools", err, len(specs))
	}
	var info api.AgentInfo
	if err := callInto(context.Background(), c, api.AgentCreate, api.CreateParams{Name: "r"}, &info); err != nil {
		t.Fatal(err)
	}
	var res api.ToolResult
	err = callInto(context.Background(), c, api.ToolCall, api.ToolCallParams{Agent: info.ID, Call: api.ToolRequest{ID: "x", Name: "list_children", Args: json.RawMessage(`{}`)}}, &res)
	if err != nil || !res.IsError || !strings.Contains(res.Text, "not in a turn") {
		t.Fatalf("tool.call outside a turn: %v %+v", err, res)
	}
	err = callInto(context.Background(), c, api.ToolCall, api.ToolCallParams{Agent: "r", Call: api.ToolRequest{Name: "x"}}, &res)
	var re *api.Error
	if !errors.As(err, &re) || re.Code != api.CodeInvalidParams {
		t.Fatalf("tool.call with a name: %v", err)
	}
}

// TestTopQueries: what substrat top asks of the daemon: the pools of
// daemon.status, the tail of agent.events, and inbox.list with peek,
// which leaves unread messages unread.
func TestTopQueries(t *testing.T) {
	home, sock := startDaemon(t)
	ctx := context.Background()
	c, err := rpc.Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var info api.AgentInfo
	if err := callInto(ctx, c, api.AgentCreate, api.CreateParams{Name: "r"}, &info); err != nil {
		t.Fatal(err)
	}
	var res api.SendResult
	if err := streamInto(ctx, c, api.AgentSend, api.SendMessageParams{Ref: "r", Text: "hi", Wait: true}, &res); err != nil || res.Failed != "" {
		t.Fatalf("send: %v %+v", err, res)
	}
	var st api.StatusResult
	if err := callInto(ctx, c, api.DaemonStatus, struct{}{}, &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Pools) != 1 || st.Pools[0].Name != supervisor.DefaultPool || st.Pools[0].Live != 1 || st.Pools[0].Size < 1 {
		t.Errorf("pools: %+v", st.Pools)
	}

	events := func(tail int) []fsstore.Event {
		var out []fsstore.Event
		_, err := rpc.Stream(ctx, c, api.AgentEvents, api.EventsParams{Ref: "r", Tail: tail}, func(e fsstore.Event) error {
			out = append(out, e)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	all, last := events(0), events(2)
	if len(all) < 4 || len(last) != 2 || last[0].Seq != all[len(all)-2].Seq || last[1].Seq != all[len(all)-1].Seq {
		t.Errorf("tail 2 of %d events gave %+v", len(all), last)
	}

	m := &fsstore.Message{ID: "01a20f00-0000-7000-8000-000000000001", From: info.ID, FromName: "r", To: fsstore.User, Kind: fsstore.KindMessage, Text: "done", SentAt: time.Now().UTC()}
	if err := fsstore.Publish(fsstore.OS{}, fsstore.Layout{Home: home}.UserInbox(), m); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		var got []api.InboxMessage
		if err := callInto(ctx, c, api.InboxList, api.InboxListParams{}, &got); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || !got[0].Unread {
			t.Fatalf("inbox.list: %+v (a list must leave the message unread)", got)
		}
	}
	var read api.InboxReadResult
	if err := callInto(ctx, c, api.InboxRead, api.InboxReadParams{IDs: []string{m.ID}}, &read); err != nil || read.Read != 1 {
		t.Fatalf("inbox.read: %+v, %v", read, err)
	}
	var got []api.InboxMessage
	if err := callInto(ctx, c, api.InboxList, api.InboxListParams{}, &got); err != nil || len(got) != 0 {
		t.Fatalf("after a read the inbox still has %+v (%v)", got, err)
	}
}
