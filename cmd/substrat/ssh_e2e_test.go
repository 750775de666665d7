package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/executor"
	"github.com/substrat/substrat/executor/ssh"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/internal/sshtest"
	wire "github.com/substrat/substrat/supervisor/api"
)

// remoteModel is a script-provider model program (remote-model in
// TestMain) for an agent on an ssh executor. The last line of its
// prompt that is one of these says what to do in /workspace:
//
//	write NAME TEXT  write TEXT to NAME, then say where /workspace is
//	                 mounted from (the place on the host)
//	attack           plant what must not come back: a symlink to /etc,
//	                 a git hook, a .git file that redirects git
//	cut              the first time, write "started" and hang until
//	                 killed; when "started" is there, finish
//	commit NAME TEXT write TEXT to NAME and commit it with git
//	commitwait NAME TEXT  the same, then wait for a file "release"
//	writewait NAME TEXT   write, then wait for a file "release"
//	limits           say its data size limit (/proc/self/limits)
//	wait             wait for a file "release", writing nothing
func remoteModel() int {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	var turn struct {
		Prompt string `json:"prompt"`
	}
	if !in.Scan() || json.Unmarshal(in.Bytes(), &turn) != nil {
		return 1
	}
	var words []string // of the last line that is a command
	for _, l := range strings.Split(turn.Prompt, "\n") {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == "write" || f[0] == "attack" || f[0] == "cut" || f[0] == "commit" || f[0] == "commitwait" || f[0] == "writewait" || f[0] == "limits" || f[0] == "wait") {
			words = f
		}
	}
	out := json.NewEncoder(os.Stdout)
	done := func(text string) int {
		out.Encode(map[string]any{"type": "done", "text": text})
		return 0
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	switch {
	case len(words) >= 3 && (words[0] == "write" || words[0] == "writewait"):
		if err := os.WriteFile(filepath.Join("/workspace", words[1]), []byte(strings.Join(words[2:], " ")), 0o644); err != nil {
			return fail(err)
		}
		for words[0] == "writewait" {
			if _, err := os.Stat("/workspace/release"); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		return done("wrote " + words[1] + "; /workspace from " + mountSource("/workspace"))
	case len(words) >= 3 && (words[0] == "commit" || words[0] == "commitwait"):
		if err := os.WriteFile(filepath.Join("/workspace", words[1]), []byte(strings.Join(words[2:], " ")), 0o644); err != nil {
			return fail(err)
		}
		git := exec.Command("/bin/sh", "-c", `git add -- "$1" && git -c user.email=far@example.com -c user.name=far commit -qm "far: $1" && git log --format=%s -1`, "sh", words[1])
		git.Dir = "/workspace"
		out, err := git.CombinedOutput()
		if err != nil {
			return fail(fmt.Errorf("git: %v: %s", err, out))
		}
		for words[0] == "commitwait" {
			if _, err := os.Stat("/workspace/release"); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		return done("committed " + strings.TrimSpace(string(out)))
	case len(words) == 1 && words[0] == "wait":
		for {
			if _, err := os.Stat("/workspace/release"); err == nil {
				return done("released")
			}
			time.Sleep(20 * time.Millisecond)
		}
	case len(words) == 1 && words[0] == "limits":
		b, _ := os.ReadFile("/proc/self/limits")
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "Max data size") {
				return done(strings.Join(strings.Fields(l), " "))
			}
		}
		return done("no data size limit line")
	case len(words) == 1 && words[0] == "attack":
		for _, step := range []error{
			os.Symlink("/etc", "/workspace/etc"),
			os.Symlink("../../../../../../../etc/passwd", "/workspace/passwd"),
			os.MkdirAll("/workspace/.git/hooks", 0o755),
			os.WriteFile("/workspace/.git/hooks/post-checkout", []byte("#!/bin/sh\ntouch "+os.Getenv("SUBSTRAT_AGENT_ID")+"-hook-ran\n"), 0o755),
			os.WriteFile("/workspace/.git/config", []byte("[core]\n\tfsmonitor = touch /tmp/fsmonitor-ran\n"), 0o644),
			os.MkdirAll("/workspace/sub", 0o755),
			os.WriteFile("/workspace/sub/.git", []byte("gitdir: /etc\n"), 0o644),
			os.WriteFile("/workspace/innocent.txt", []byte("plain data"), 0o644),
		} {
			if step != nil {
				return fail(step)
			}
		}
		return done("planted")
	case len(words) == 1 && words[0] == "cut":
		if _, err := os.Stat("/workspace/started"); err == nil {
			os.WriteFile("/workspace/finished", []byte("after the cut"), 0o644)
			return done("finished after the cut")
		}
		os.WriteFile("/workspace/started", []byte("once"), 0o644)
		time.Sleep(10 * time.Minute)
		return 1
	}
	return done("say what to do")
}

// mountSource is the source, on its machine, of the mount at target
// (/proc/self/mountinfo's root field).
func mountSource(target string) string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && f[4] == target {
			return f[3]
		}
	}
	return "?"
}

// sshDaemon starts a test sshd, and a daemon whose ssh executors reach
// it, with places under a directory of the test (the executors' root).
// It returns the daemon, the server and the directory of the daemon's
// home under that root, where its copies are.
func sshDaemon(t testing.TB, env ...string) (*e2eDaemon, *sshtest.Server, string) {
	t.Helper()
	needBwrap(t)
	if why := sshtest.Available(); why != "" {
		t.Fatal(why)
	}
	s := sshtest.Start(t)
	places, err := os.MkdirTemp("", "sbp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(places) })
	d := runDaemon(t, append([]string{ssh.ConfigEnv + "=" + s.Config, ssh.RootEnv + "=" + places}, env...)...)
	t.Cleanup(func() {
		// Under -race, the daemon (this test binary) reports there.
		if b, _ := os.ReadFile(filepath.Join(d.home, "e2e-daemon.out")); strings.Contains(string(b), "DATA RACE") {
			t.Errorf("the daemon raced:\n%s", b)
		}
	})
	id, err := fsstore.HomeID(d.home)
	if err != nil || id == "" {
		t.Fatalf("the daemon's home has no id: %q, %v", id, err)
	}
	return d, s, filepath.Join(places, id)
}

// TestSSHExecutorE2E: an agent created with --executor ssh://HOST runs
// its turns on the host, through the test's sshd: its provider process
// runs in bwrap there, in its place, and what it wrote comes back into
// the workspace.
func TestSSHExecutorE2E(t *testing.T) {
	d, s, places := sshDaemon(t)
	model := lookPath(t, "remote-model")
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab"}, nil)
	root := fsstore.Layout{Home: d.home}.WorkspaceRoot("USER", "lab")
	if err := os.WriteFile(filepath.Join(root, "input.txt"), []byte("from here"), 0o644); err != nil {
		t.Fatal(err)
	}
	var a wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "far", Model: model, Workspace: "lab", Executor: "ssh://" + s.Host}, &a)
	res := d.send("far", "write hello.txt hi from the host")
	place := wsCopy(places, root, "place")
	if want := "wrote hello.txt; /workspace from " + place; res.Text != want {
		t.Fatalf("the turn said %q, want %q", res.Text, want)
	}
	if b, err := os.ReadFile(filepath.Join(root, "hello.txt")); err != nil || string(b) != "hi from the host" {
		t.Fatalf("hello.txt in the workspace: %q, %v", b, err)
	}
	// The workspace went there before the turn.
	if b, err := os.ReadFile(filepath.Join(place, "input.txt")); err != nil || string(b) != "from here" {
		t.Fatalf("input.txt in the place: %q, %v", b, err)
	}
	// And a file removed on this side is gone there at the next turn.
	os.Remove(filepath.Join(root, "input.txt"))
	d.send("far", "write second.txt again")
	if _, err := os.Lstat(filepath.Join(place, "input.txt")); !os.IsNotExist(err) {
		t.Fatalf("input.txt removed here is still in the place: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "second.txt")); string(b) != "again" {
		t.Fatalf("second.txt: %q", b)
	}
	// No process of the agent is left on the host.
	if ps := markerProcs(a.ID); len(ps) > 0 {
		t.Fatalf("left on the host: %v", ps)
	}
	// The workspace deleted, once its agent has ended, its copy goes
	// from the host too (in the background).
	if _, err := os.Stat(filepath.Join(place, "second.txt")); err != nil {
		t.Fatal(err)
	}
	mustCall(d, wire.AgentTerminate, wire.TerminateParams{Ref: "far"}, nil)
	mustCall(d, wire.WorkspaceDelete, wire.WorkspaceDeleteParams{Ref: "lab"}, nil)
	waitGone(t, wsCopy(places, root))
}

// waitGone waits, for a minute at most, until nothing is at path.
func waitGone(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		_, err := os.Lstat(path)
		if os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is still there: %v", path, err)
		}
	}
}

// wsCopy is a path in the copy on the host (under places) of the
// workspace whose root is root.
func wsCopy(places, root string, elem ...string) string {
	sum := sha256.Sum256([]byte(root))
	return filepath.Join(append([]string{places, "ws-" + hex.EncodeToString(sum[:16])}, elem...)...)
}

// markerProcs lists the host's (this machine's) executor wrappers of
// agent.
func markerProcs(agent string) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		args := strings.Split(string(b), "\x00")
		if err == nil && len(args) > 5 && args[3] == ssh.Marker && args[4] == agent {
			out = append(out, d+": "+strings.Join(args, " "))
		}
	}
	return out
}

// TestSSHExecutorAttack: what the agent plants in its place on the host
// does not come back as such: a symlink out of the place, git hooks and
// config, a .git file that redirects git. Nothing of it runs here.
func TestSSHExecutorAttack(t *testing.T) {
	d, s, places := sshDaemon(t)
	model := lookPath(t, "remote-model")
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab"}, nil)
	root := fsstore.Layout{Home: d.home}.WorkspaceRoot("USER", "lab")
	var a wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "far", Model: model, Workspace: "lab", Executor: "ssh://" + s.Host}, &a)
	if res := d.send("far", "attack"); res.Text != "planted" {
		t.Fatalf("the turn said %q", res.Text)
	}
	place := wsCopy(places, root, "place")
	if _, err := os.Lstat(filepath.Join(place, ".git", "hooks", "post-checkout")); err != nil {
		t.Fatalf("the attack did not plant its hook on the host: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "innocent.txt")); err != nil || string(b) != "plain data" {
		t.Fatalf("innocent.txt: %q, %v", b, err)
	}
	for _, name := range []string{"etc", "passwd", ".git", "sub/.git"} {
		if fi, err := os.Lstat(filepath.Join(root, name)); !os.IsNotExist(err) {
			t.Errorf("%s came back: %v, %v", name, fi.Mode(), err)
		}
	}
	// git run here on the workspace finds no repository of the agent's.
	cmd := exec.Command("git", "-C", root, "status")
	cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(root))
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("git status in the workspace found a repository: %s", out)
	}
	if _, err := os.Stat(filepath.Join(root, a.ID+"-hook-ran")); !os.IsNotExist(err) {
		t.Error("the planted hook ran")
	}
	// The next turn's push mirrors this side: the host's place loses
	// the links; its .git, which never travels, stays there, inert.
	d.send("far", "write after.txt fine")
	if _, err := os.Lstat(filepath.Join(place, "etc")); !os.IsNotExist(err) {
		t.Errorf("the symlink to /etc is still in the place after a push: %v", err)
	}
}

// TestSSHExecutorCut: a turn whose connection is lost mid-turn (the
// master connection killed on this side, or the server's side of it on
// the host's) fails as cut short and is retried; what it wrote before
// the cut comes back, and the retry finishes.
func TestSSHExecutorCut(t *testing.T) {
	for _, side := range []string{"master", "server"} {
		t.Run(side, func(t *testing.T) { testCut(t, side) })
	}
}

func testCut(t *testing.T, side string) {
	d, s, places := sshDaemon(t)
	cfg := `{"version": 1, "retry": {"limit": 5, "window": "1m", "base": "200ms"}}`
	if err := os.WriteFile(filepath.Join(d.home, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d.kill()
	d.start()
	model := lookPath(t, "remote-model")
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab"}, nil)
	root := fsstore.Layout{Home: d.home}.WorkspaceRoot("USER", "lab")
	var a wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "far", Model: model, Workspace: "lab", Executor: "ssh://" + s.Host}, &a)
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "far", Text: "cut"}, nil)
	showOnFailure(t, d, a.ID)
	place := wsCopy(places, root, "place")
	waitFile(t, filepath.Join(place, "started"))
	if side == "master" {
		// Kill the daemon's master connection to the host.
		masters := masterPids(t, s.Config)
		if len(masters) != 1 {
			t.Errorf("%d master connections: %v", len(masters), masters)
		}
		for _, pid := range masters {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		// Kill the server's processes of every connection: the host
		// drops them (its listener lives on, for the retry).
		killed := 0
		for _, pid := range sshdConnections(t, s) {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
		if killed == 0 {
			t.Fatal("no connection of the server to kill")
		}
	}
	// The retry finishes, and its place comes back.
	waitFile(t, filepath.Join(root, "finished"))
	d.waitFirstTurn("far")
	if b, _ := os.ReadFile(filepath.Join(root, "finished")); string(b) != "after the cut" {
		t.Fatalf("finished: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "started")); string(b) != "once" {
		t.Fatalf("started: %q", b)
	}
	events, err := os.ReadFile(fsstore.Layout{Home: d.home}.Agent(a.ID).Events())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(events), `"`+fsstore.EvTurnFailed+`"`) {
		t.Errorf("no failed turn recorded:\n%s", events)
	} else {
		for _, l := range strings.Split(string(events), "\n") {
			if strings.Contains(l, fsstore.EvTurnFailed) {
				t.Logf("the cut turn: %s", l)
			}
		}
	}
	if ps := markerProcs(a.ID); len(ps) > 0 {
		t.Fatalf("left on the host: %v", ps)
	}
}

// TestSSHExecutorFence: a process of the agent left on the host by an
// earlier incarnation (a daemon that died) is killed before a turn
// starts there.
func TestSSHExecutorFence(t *testing.T) {
	d, s, places := sshDaemon(t)
	model := lookPath(t, "remote-model")
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab"}, nil)
	var a wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "far", Model: model, Workspace: "lab", Executor: "ssh://" + s.Host}, &a)
	// A stale process of the agent: started on the host, as the dead
	// daemon's would have been, with another incarnation.
	e, err := ssh.New(s.Host, ssh.Options{Config: s.Config, Root: filepath.Dir(places), Home: filepath.Base(places)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	stale, err := e.Start(context.Background(), &executor.Cmd{Agent: a.ID, Incarnation: "dead-daemon",
		Argv: []string{"/bin/sh", "-c", "echo started; exec sleep 600"}, Stdout: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Minute)
	for len(markerProcs(a.ID)) == 0 {
		if time.Now().After(until) {
			t.Fatal("the stale process never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.send("far", "write x.txt y")
	waited := make(chan error, 1)
	go func() { waited <- stale.Wait() }()
	select {
	case err := <-waited:
		t.Logf("the stale process ended: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the stale process outlived the turn")
	}
	if ps := markerProcs(a.ID); len(ps) > 0 {
		t.Fatalf("left on the host: %v", ps)
	}
}

// waitFile waits for path to exist.
func waitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
	}
}

// showOnFailure logs the daemon's output and agent's events if t fails.
func showOnFailure(t *testing.T, d *e2eDaemon, agent string) {
	t.Cleanup(func() {
		if t.Failed() {
			// What ssh and rsync still run, and the daemon's goroutines
			// (SIGQUIT), for a hang.
			ps, _ := exec.Command("ps", "-eo", "pid,ppid,etime,args").Output()
			for _, l := range strings.Split(string(ps), "\n") {
				if strings.Contains(l, "ssh") || strings.Contains(l, "rsync") || strings.Contains(l, "remote-model") {
					t.Logf("ps: %s", l)
				}
			}
			if d.cmd != nil {
				d.cmd.Process.Signal(syscall.SIGQUIT)
				select {
				case <-d.done:
				case <-time.After(10 * time.Second):
				}
			}
			b, _ := os.ReadFile(filepath.Join(d.home, "e2e-daemon.out"))
			log, _ := os.ReadFile(fsstore.Layout{Home: d.home}.Log())
			ev, _ := os.ReadFile(fsstore.Layout{Home: d.home}.Agent(agent).Events())
			t.Logf("daemon output:\n%s\nlog:\n%s\nevents:\n%s", b, log, ev)
		}
	})
}

// sshdConnections lists the pids of the processes of s's sshd that
// serve a connection: the children of its listener.
func sshdConnections(t *testing.T, s *sshtest.Server) []int {
	t.Helper()
	listener := 0
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range dirs {
		b, _ := os.ReadFile(d)
		if strings.Contains(string(b), filepath.Join(s.Dir, "sshd_config")) {
			fmt.Sscanf(d, "/proc/%d/cmdline", &listener)
		}
	}
	if listener == 0 {
		t.Fatal("the test's sshd is not running")
	}
	var out []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range stats {
		b, err := os.ReadFile(st)
		i := strings.LastIndexByte(string(b), ')')
		if err != nil || i < 0 {
			continue
		}
		f := strings.Fields(string(b)[i+1:])
		var pid, ppid int
		fmt.Sscanf(st, "/proc/%d/stat", &pid)
		if len(f) > 1 && f[1] == fmt.Sprint(listener) {
			fmt.Sscanf(f[1], "%d", &ppid)
			out = append(out, pid)
		}
	}
	return out
}

// masterPids finds the master connections (ssh -o ControlMaster=yes)
// that use the ssh_config config: the daemon's, to this test's sshd.
func masterPids(t *testing.T, config string) []int {
	t.Helper()
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range dirs {
		b, _ := os.ReadFile(d)
		s := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.HasPrefix(s, "ssh ") && strings.Contains(s, config) && strings.Contains(s, "ControlMaster=yes") {
			var pid int
			fmt.Sscanf(d, "/proc/%d/cmdline", &pid)
			out = append(out, pid)
		}
	}
	if len(out) == 0 {
		t.Fatal("no master connection found")
	}
	return out
}

// TestSSHExecutorDaemonKilled: a kill -9 of the daemon mid-turn on the
// host leaves nothing running there, and the next daemon retries the
// turn cut short, with what it wrote on the host before the kill
// brought back first.
func TestSSHExecutorDaemonKilled(t *testing.T) {
	d, s, places := sshDaemon(t)
	model := lookPath(t, "remote-model")
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab"}, nil)
	root := fsstore.Layout{Home: d.home}.WorkspaceRoot("USER", "lab")
	var a wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "far", Model: model, Workspace: "lab", Executor: "ssh://" + s.Host}, &a)
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "far", Text: "cut"}, nil)
	waitFile(t, wsCopy(places, root, "place", "started"))
	d.kill()
	// The daemon's ssh client died with it, and the end of its channel
	// killed the process on the host.
	for deadline := time.Now().Add(time.Minute); len(markerProcs(a.ID)) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("left on the host after the kill: %v", markerProcs(a.ID))
		}
	}
	if _, err := os.Stat(filepath.Join(root, "started")); !os.IsNotExist(err) {
		t.Fatalf("started came back before the restart: %v", err)
	}
	d.start()
	showOnFailure(t, d, a.ID)
	waitFile(t, filepath.Join(root, "finished"))
	if b, _ := os.ReadFile(filepath.Join(root, "started")); string(b) != "once" {
		t.Fatalf("started: %q", b)
	}
	if ps := markerProcs(a.ID); len(ps) > 0 {
		t.Fatalf("left on the host: %v", ps)
	}
}

// BenchmarkSSHExecutorTurn measures a turn (agent.send with wait, 20
// files of 4 KiB in the workspace) in a local sandbox and on an ssh
// executor (fence, push, the process through the master, pull), with
// the same model: go test -run '^$' -bench SSHExecutorTurn ./cmd/substrat.
func BenchmarkSSHExecutorTurn(b *testing.B) {
	d, s, _ := sshDaemon(b)
	model := lookPath(b, "remote-model")
	for _, ws := range []string{"near", "far"} {
		mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: ws}, nil)
		root := fsstore.Layout{Home: d.home}.WorkspaceRoot("USER", ws)
		for i := range 20 {
			if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("f%d.txt", i)), []byte(strings.Repeat("x", 4096)), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "near", Model: model, Workspace: "near"}, nil)
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "far", Model: model, Workspace: "far", Executor: "ssh://" + s.Host}, nil)
	for _, ref := range []string{"near", "far"} {
		b.Run(map[string]string{"near": "local", "far": "ssh"}[ref], func(b *testing.B) {
			d.send(ref, "write warm.txt up") // the first turn starts the session (and the master)
			i := 0
			for b.Loop() {
				d.send(ref, fmt.Sprintf("write t%d.txt turn %d", i, i))
				i++
			}
		})
	}
}
