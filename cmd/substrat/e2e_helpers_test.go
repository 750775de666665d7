package main

// The helpers of the end-to-end tests: a real daemon run as a child
// (e2eDaemon), the substrat commands a test starts against it and reads
// line by line, and the pinned CLIs of .tools.

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider/fakeapi"
	wire "github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/rpc"
)

// e2eDaemon runs `substrat daemon run` as a child, so that it can be
// SIGKILLed.
type e2eDaemon struct {
	t    testing.TB
	home string
	env  []string
	bin  string // the substrat binary ("": the one on PATH)
	cmd  *exec.Cmd
	done chan struct{}
}

func (d *e2eDaemon) start() {
	d.t.Helper()
	bin, err := d.bin, error(nil)
	if bin == "" {
		if bin, err = exec.LookPath("substrat"); err != nil {
			d.t.Fatal(err)
		}
	}
	log, err := os.OpenFile(filepath.Join(d.home, "e2e-daemon.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		d.t.Fatal(err)
	}
	defer log.Close()
	d.cmd = exec.Command(bin, "daemon", "run", "--home", d.home)
	d.cmd.Env = d.env
	d.cmd.Stdout, d.cmd.Stderr = log, log
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.done = make(chan struct{})
	go func() { d.cmd.Wait(); close(d.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st wire.StatusResult
		if err := e2eCall(d, wire.DaemonStatus, struct{}{}, &st); err == nil {
			return
		}
		select {
		case <-d.done:
			d.t.Fatalf("the daemon exited at start; see %s", filepath.Join(d.home, "e2e-daemon.out"))
		default:
		}
		if time.Now().After(deadline) {
			d.t.Fatal("the daemon did not answer")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *e2eDaemon) kill() {
	d.t.Helper()
	if d.cmd == nil {
		return
	}
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
	d.cmd = nil
}

// runDaemon starts a daemon on a fresh short home with env added to the
// test's environment (SUBSTRAT_HOME cleared); it is killed when the test
// ends.
func runDaemon(t testing.TB, env ...string) *e2eDaemon {
	t.Helper()
	return runDaemonAt(t, "", env...)
}

// runDaemonAt is runDaemon with the substrat binary bin.
func runDaemonAt(t testing.TB, bin string, env ...string) *e2eDaemon {
	t.Helper()
	d := &e2eDaemon{t: t, home: shortHome(t), bin: bin, env: append(append(os.Environ(), "SUBSTRAT_HOME="), env...)}
	d.start()
	t.Cleanup(d.kill)
	return d
}

// dial connects to d's socket, for at most a minute.
func (d *e2eDaemon) dial() (*rpc.Client, context.Context, context.CancelFunc, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	c, err := rpc.Dial(ctx, fsstore.Layout{Home: d.home}.Socket())
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return c, ctx, cancel, nil
}

// e2eCall makes the call m on d and stores its result in *r (r nil:
// drops it).
func e2eCall[P, R any](d *e2eDaemon, m wire.Method[P, R], p P, r *R) error {
	c, ctx, cancel, err := d.dial()
	if err != nil {
		return err
	}
	defer cancel()
	defer c.Close()
	res, err := rpc.Call(ctx, c, m, p)
	if err == nil && r != nil {
		*r = res
	}
	return err
}

// e2eStream is e2eCall for a streaming method, whose frames it drops.
func e2eStream[P, F, R any](d *e2eDaemon, m wire.StreamMethod[P, F, R], p P, r *R) error {
	c, ctx, cancel, err := d.dial()
	if err != nil {
		return err
	}
	defer cancel()
	defer c.Close()
	res, err := rpc.Stream(ctx, c, m, p, nil)
	if err == nil && r != nil {
		*r = res
	}
	return err
}

// mustCall is e2eCall that fails the test on an error.
func mustCall[P, R any](d *e2eDaemon, m wire.Method[P, R], p P, r *R) {
	d.t.Helper()
	if err := e2eCall(d, m, p, r); err != nil {
		d.t.Fatalf("%s: %v (daemon output in %s)", m.Name, err, filepath.Join(d.home, "e2e-daemon.out"))
	}
}

// mustStream is e2eStream that fails the test on an error.
func mustStream[P, F, R any](d *e2eDaemon, m wire.StreamMethod[P, F, R], p P, r *R) {
	d.t.Helper()
	if err := e2eStream(d, m, p, r); err != nil {
		d.t.Fatalf("%s: %v (daemon output in %s)", m.Name, err, filepath.Join(d.home, "e2e-daemon.out"))
	}
}

// send sends USER's message and waits for the turn that takes it.
func (d *e2eDaemon) send(ref, text string) wire.SendResult {
	d.t.Helper()
	var res wire.SendResult
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: ref, Text: text, Wait: true}, &res)
	if res.Failed != "" {
		d.t.Fatalf("the turn of %s failed: %s", ref, res.Failed)
	}
	return res
}

func (d *e2eDaemon) agents() map[string]wire.AgentInfo {
	d.t.Helper()
	var list []wire.AgentInfo
	mustCall(d, wire.AgentList, wire.ListParams{}, &list)
	out := map[string]wire.AgentInfo{}
	for _, a := range list {
		out[a.Path] = a
	}
	return out
}

// waitFirstTurn waits until the agent at path has finished a turn and is
// idle.
func (d *e2eDaemon) waitFirstTurn(path string) {
	d.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		a := d.agents()[path]
		if a.Counters.Turns >= 1 && a.AgentState == fsstore.AgentIdle {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%s never finished its first turn: %+v", path, a)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (d *e2eDaemon) sessionID(id string) string {
	d.t.Helper()
	var list []wire.SessionInfo
	mustCall(d, wire.SessionList, struct{}{}, &list)
	for _, s := range list {
		if s.ID == id {
			return s.ProviderSessionID
		}
	}
	return ""
}

// waitInbox waits, for up to within, until a message to USER holds want,
// and returns the text of the last that does.
func (d *e2eDaemon) waitInbox(want string, within time.Duration) string {
	d.t.Helper()
	deadline := time.Now().Add(within)
	for {
		var inbox []wire.InboxMessage
		mustCall(d, wire.InboxList, wire.InboxListParams{All: true}, &inbox)
		found := ""
		for _, m := range inbox {
			if strings.Contains(m.Text, want) {
				found = m.Text
			}
		}
		if found != "" {
			return found
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("no message with %q reached USER; agents: %+v", want, d.agents())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lookPath is the program name in PATH; its absence fails the test.
func lookPath(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// needBwrap fails the test if bwrap, the sandbox, is missing.
func needBwrap(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("bwrap is missing (%v): run make tools (scripts/install-tools.sh installs it)", err)
	}
}

// holdGate holds the requests of a fake model's workers until it opens:
// a test waits until the workers are held, kills the daemon, opens the
// gate and starts the daemon again.
type holdGate struct {
	mu      sync.Mutex // guards the fields below
	opened  bool
	held    map[string]int // worker -> requests held
	release chan struct{}
}

func newHoldGate() *holdGate {
	return &holdGate{held: map[string]int{}, release: make(chan struct{})}
}

// wait holds a request of the worker name until the gate opens; once it
// is open it holds none.
func (g *holdGate) wait(name string) {
	g.mu.Lock()
	opened, ch := g.opened, g.release
	if !opened {
		g.held[name]++
	}
	g.mu.Unlock()
	if !opened {
		<-ch
	}
}

// waitHeld waits, for up to within, until n workers have a request held.
func (g *holdGate) waitHeld(d *e2eDaemon, n int, within time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(within)
	for {
		g.mu.Lock()
		held := len(g.held)
		g.mu.Unlock()
		if held == n {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("the workers never reached their report: %+v", d.agents())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// open lets the held requests, and all to come, go on.
func (g *holdGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.opened = true
	close(g.release)
}

// startCLI starts cmd, a substrat command, in d's environment, with its
// output read line by line and its stderr kept; it is killed when the
// test ends.
func (d *e2eDaemon) startCLI(t *testing.T, cmd *exec.Cmd) (*lineReader, *bytes.Buffer) {
	t.Helper()
	cmd.Env = d.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return readLines(out), &stderr
}

// runCodexGeminiDaemon starts loopback fakes of the Codex and Gemini APIs,
// both answering reply(the conversation), and a daemon whose codex and
// gemini agents run the pinned CLIs against them, with a workspace "box"
// with network for them; all stop when the test ends.
func runCodexGeminiDaemon(t *testing.T, reply func(conv string) string) *e2eDaemon {
	t.Helper()
	d := runDaemon(t, codexGeminiEnv(t, reply)...)
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "box", Network: true}, nil)
	return d
}

// codexGeminiEnv starts loopback fakes of the Codex and Gemini APIs,
// both answering reply(the conversation), and returns the environment
// of a daemon whose codex and gemini agents run the pinned CLIs against
// them.
func codexGeminiEnv(t *testing.T, reply func(conv string) string) []string {
	t.Helper()
	codex := fakeapi.NewCodex(func(r fakeapi.CodexRequest) fakeapi.CodexOut { return fakeapi.CodexOut{Text: reply(r.Raw)} })
	t.Cleanup(codex.Close)
	gemini := fakeapi.NewGemini(func(r fakeapi.GeminiRequest) fakeapi.GeminiOut { return fakeapi.GeminiOut{Text: reply(r.Raw)} })
	t.Cleanup(gemini.Close)
	dir := filepath.Dir(toolsBin(t, "codex"))
	toolsBin(t, "gemini")
	return []string{"PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH"),
		"OPENAI_BASE_URL=" + codex.URL, "OPENAI_API_KEY=sk-fake-codex",
		"GEMINI_API_KEY=fake-gemini", "GOOGLE_GEMINI_BASE_URL=" + gemini.URL}
}

// lineReader collects the lines a command prints, for a test to wait on.
type lineReader struct {
	lines chan string
	all   []string
}

func readLines(r io.Reader) *lineReader {
	l := &lineReader{lines: make(chan string, 1024)}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			l.lines <- sc.Text()
		}
		close(l.lines)
	}()
	return l
}

// rest reads the lines left, until the output ends.
func (l *lineReader) rest() {
	for line := range l.lines {
		l.all = append(l.all, line)
	}
}

// waitFor reads lines until one contains want. The deadline only bounds
// a test that has already failed; nothing waits on time to go on.
func (l *lineReader) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case line, ok := <-l.lines:
			if !ok {
				t.Fatalf("the output ended before %q; it was:\n%s", want, strings.Join(l.all, "\n"))
			}
			l.all = append(l.all, line)
			if strings.Contains(line, want) {
				return
			}
		case <-deadline:
			t.Fatalf("%q never came; the output:\n%s", want, strings.Join(l.all, "\n"))
		}
	}
}

// toolsBin is the pinned CLI name in .tools/npm.
func toolsBin(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(filepath.Dir(filepath.Dir(claudeCLI(t))), ".bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the %s CLI is missing (%v): run make tools", name, err)
	}
	return bin
}

// rememberReply plays a model that remembers: "what did I say" is
// answered "you said MANGO" if the conversation holds "remember MANGO"
// (a session resumed), else "I was never told"; anything else "noted".
func rememberReply(conv string) string {
	switch {
	case strings.Contains(conv, "what did I say") && strings.Contains(conv, "remember MANGO"):
		return "you said MANGO"
	case strings.Contains(conv, "what did I say"):
		return "I was never told"
	}
	return "noted"
}
