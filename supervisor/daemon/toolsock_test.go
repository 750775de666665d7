package daemon

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/bwrap/launch"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor/rpc"
)

// TestToolSocket checks the socket a sandboxed agent's MCP server gets: it
// answers tool.list and tool.call for that agent only, and nothing else of
// the daemon; the sandbox binds it together with what the provider needs,
// refuses the network a workspace does not grant, and the socket goes away
// with the agent.
func TestToolSocket(t *testing.T) {
	home := shortDir(t)
	c, h := newCore(t, home)
	if _, err := c.CreateWorkspace(api.WorkspaceParams{Name: "w"}); err != nil {
		t.Fatal(err)
	}
	a := mustCreate(t, c, api.CreateParams{Name: "a", Workspace: "w"})
	b := mustCreate(t, c, api.CreateParams{Name: "b"})
	sock := fsstore.Layout{Home: home}.ToolSocket(a.ID)

	hook := h.sandboxFor(sessionOf(c, "a"))
	if hook == nil || h.sandboxFor(sessionOf(c, "b")) != nil {
		t.Fatal("only the agent with a workspace gets a sandbox")
	}
	// A provider that needs the network, in a workspace without it.
	_, err := wrap(context.Background(), hook, exec.Command("/bin/true"), provider.SandboxNeeds{ReadOnly: []string{"/opt/cli"}, Network: true})
	if err == nil || !strings.Contains(err.Error(), "no network access") {
		t.Fatalf("network refused with %v", err)
	}
	state, cli := t.TempDir(), t.TempDir()
	cmd, err := wrap(context.Background(), hook, exec.Command("/bin/true"),
		provider.SandboxNeeds{ReadOnly: []string{cli, "/usr/lib"}, ReadWrite: []string{state}, ToolSocket: true})
	if err != nil {
		t.Fatal(err)
	}
	defer launch.CloseFiles(cmd)
	args := strings.Join(cmd.Args, " ")
	got := fdBinds(t, cmd)
	for target, want := range map[string]string{state: "rw " + state, sock: "rw " + sock, cli: "ro " + cli} {
		if got[target] != want {
			t.Errorf("sandbox binds %s from %q, want %q: %s", target, got[target], want, args)
		}
	}
	if _, ok := got["/usr/lib"]; ok || strings.Contains(args, "/usr/lib /usr/lib") {
		t.Errorf("a system directory was bound again: %s", args)
	}
	if strings.Contains(args, fsstore.Layout{Home: home}.Socket()) {
		t.Errorf("daemon.sock is in the sandbox: %s", args)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := rpc.Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var specs []api.ToolSpec
	if err := callInto(ctx, cl, api.ToolList, struct{}{}, &specs); err != nil || len(specs) != len(supervisor.Tools()) {
		t.Errorf("tool.list: %d tools, %v", len(specs), err)
	}
	var res api.ToolResult
	if err := callInto(ctx, cl, api.ToolCall, api.ToolCallParams{Call: api.ToolRequest{ID: "k1", Name: "list_children"}}, &res); err != nil ||
		!res.IsError || !strings.Contains(res.Text, "not in a turn") {
		t.Errorf("tool.call for the socket's own agent: %+v, %v", res, err)
	}
	for _, m := range []struct {
		method string
		params any
		code   string
	}{
		{api.ToolCall.Name, api.ToolCallParams{Agent: b.ID, Call: api.ToolRequest{ID: "k2", Name: "list_children"}}, api.CodeInvalidParams},
		{api.AgentList.Name, nil, api.CodeUnknownMethod},
		{api.AgentCreate.Name, api.CreateParams{Name: "x"}, api.CodeUnknownMethod},
		{api.DaemonStop.Name, nil, api.CodeUnknownMethod},
	} {
		err := callRaw(ctx, cl, m.method, m.params)
		var re *api.Error
		if !errors.As(err, &re) || re.Code != m.code {
			t.Errorf("%s on the tool socket: %v, want code %s", m.method, err, m.code)
		}
	}

	// The socket goes with the agent.
	if _, err := c.Terminate(ctx, api.TerminateParams{Ref: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the tool socket of a terminated agent: %v", err)
	}
	h.sockets.mu.Lock()
	left := len(h.sockets.byID)
	h.sockets.mu.Unlock()
	if left != 0 {
		t.Errorf("%d tool sockets left open", left)
	}
}

// A process in a sandbox that sees daemon.sock (a workspace link that
// covers the home) still cannot drive the daemon: the daemon refuses peers
// of another PID namespace. The same client outside the sandbox gets in.
func TestSandboxCannotDriveDaemon(t *testing.T) {
	home, sock := startDaemon(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	outside := exec.Command(exe)
	outside.Env = append(os.Environ(), dialEnv+"="+sock)
	if out, err := outside.CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "status: pid") {
		t.Fatalf("the client outside a sandbox: %s (%v)", out, err)
	}
	spec := bwrap.Spec{Root: bwrap.Source{Host: t.TempDir()}, Mounts: []bwrap.Mount{
		{Source: bwrap.Source{Host: home}, Target: "/mnt/home", ReadOnly: true},
		{Source: bwrap.Source{Host: exe}, Target: exe, ReadOnly: true},
	}, Env: map[string]string{dialEnv: "/mnt/home/daemon.sock"}}
	inside, err := launch.Command(context.Background(), spec, []string{exe})
	if err != nil {
		t.Fatal(err)
	}
	out, err := inside.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "another PID namespace") {
		t.Fatalf("a client inside a sandbox that sees daemon.sock: %s (%v); want it refused", out, err)
	}
}

// fdBinds maps each target a sandbox command binds from a descriptor to
// "ro HOST" or "rw HOST", HOST being the real path of the descriptor.
func fdBinds(t *testing.T, cmd *exec.Cmd) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i, a := range cmd.Args {
		if (a != "--bind-fd" && a != "--ro-bind-fd") || i+2 >= len(cmd.Args) {
			continue
		}
		n, err := strconv.Atoi(cmd.Args[i+1])
		if err != nil || n < 3 || n-3 >= len(cmd.ExtraFiles) {
			t.Fatalf("%s %s: no such descriptor among %d", a, cmd.Args[i+1], len(cmd.ExtraFiles))
		}
		host, err := bwrap.RealPath(cmd.ExtraFiles[n-3])
		if err != nil {
			t.Fatal(err)
		}
		mode := "rw "
		if a == "--ro-bind-fd" {
			mode = "ro "
		}
		out[cmd.Args[i+2]] = mode + host
	}
	return out
}

// addBinds binds what a provider needs at its own path: parents before
// what lies inside them, system directories skipped, and anything it
// cannot bind as asked an error rather than a silent gap.
func TestAddBinds(t *testing.T) {
	spec := bwrap.Spec{Root: bwrap.Source{Host: "/ws/root"}, Mounts: []bwrap.Mount{{Source: bwrap.Source{Host: "/data"}, Target: "/opt/taken", ReadOnly: true}}}
	got, err := addBinds(spec, "/opt/cli/home", []string{"/opt/cli", "/usr/lib/node", "/opt/cli"}, []string{"/opt/cli/home/a"})
	if err != nil {
		t.Fatal(err)
	}
	want := []bwrap.Mount{spec.Mounts[0],
		{Source: bwrap.Source{Host: "/opt/cli"}, Target: "/opt/cli", ReadOnly: true},
		// In the Substrat home: resolved beneath it.
		{Source: bwrap.Source{Host: "/opt/cli/home/a", Anchor: "/opt/cli/home"}, Target: "/opt/cli/home/a"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("addBinds = %+v, want %+v", got, want)
	}
	for _, bad := range []struct{ ro, rw []string }{
		{ro: []string{"relative/pkg"}},
		{ro: []string{"/etc/claude-code"}},
		{ro: []string{"/opt/taken"}},
		{rw: []string{"/usr/local/state"}},
		{rw: []string{"/workspace"}},
	} {
		if _, err := addBinds(spec, "/home", bad.ro, bad.rw); err == nil {
			t.Errorf("addBinds(ro %q, rw %q) succeeded", bad.ro, bad.rw)
		}
	}
}

// wrap runs a sandbox hook on cmd and returns the command to start, as
// a provider would (the hook maps processes, as data).
func wrap(ctx context.Context, hook provider.SandboxFunc, cmd *exec.Cmd, needs provider.SandboxNeeds) (*exec.Cmd, error) {
	p, err := hook(ctx, provider.Process{Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir}, needs)
	if err != nil {
		return nil, err
	}
	c := exec.CommandContext(ctx, p.Path)
	c.Args, c.Env, c.Dir, c.ExtraFiles = p.Args, p.Env, p.Dir, p.Files
	return c, nil
}
