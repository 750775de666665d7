package ssh

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/substrat/substrat/executor"
	"github.com/substrat/substrat/internal/sshtest"
)

// startMax starts a test sshd whose MaxSessions is 2, and an executor
// for it with opts (Config and Root set here).
func startMax(t *testing.T, opts Options) (*sshtest.Server, *Executor) {
	t.Helper()
	if why := sshtest.Available(); why != "" {
		t.Skip(why)
	}
	s := sshtest.StartWith(t, "MaxSessions 2")
	opts.Config, opts.Root = s.Config, t.TempDir()
	e, err := New(s.Host, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return s, e
}

// held is a process on the host that said "started" and waits for a
// line of input to go on.
type held struct {
	p      executor.Process
	in     *io.PipeWriter
	out    *bufio.Reader
	stderr *strings.Builder
	done   chan error
}

// hold starts script under /bin/sh on the host (env its environment),
// with "echo started; read -r x" before it, and waits until it has said
// started: it holds a session of its master until it is given a line.
func hold(t *testing.T, e *Executor, script string, env ...string) *held {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	h := &held{in: inW, out: bufio.NewReader(outR), stderr: &strings.Builder{}, done: make(chan error, 1)}
	p, err := e.Start(context.Background(), &executor.Cmd{Agent: "pool", Incarnation: "1",
		Argv:  []string{"/bin/sh", "-c", "echo started; read -r x; " + script, "sh", os.Args[0]},
		Env:   append([]string{"PATH=/usr/bin:/bin"}, env...),
		Stdin: inR, Stdout: outW, Stderr: h.stderr})
	if err != nil {
		t.Fatal(err)
	}
	h.p = p
	go func() { err := p.Wait(); outW.Close(); h.done <- err }()
	if line, err := h.out.ReadString('\n'); line != "started\n" {
		t.Fatalf("the process said %q, %v; stderr: %s", line, err, h.stderr.String())
	}
	return h
}

// finish gives h its line and returns the rest of its output.
func (h *held) finish(t *testing.T) string {
	t.Helper()
	fmt.Fprintln(h.in, "go")
	h.in.Close()
	rest, _ := io.ReadAll(h.out)
	if err := <-h.done; err != nil {
		t.Errorf("Wait: %v; stderr: %s", err, h.stderr.String())
	}
	return string(rest)
}

// sshProcs returns the command lines of this machine's processes whose
// command line holds word and, with master, are master connections.
func sshProcs(word string, master bool) []string {
	var found []string
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		line := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(line, word) && (!master || strings.Contains(line, "ControlMaster=yes")) {
			found = append(found, line)
		}
	}
	return found
}

// TestPoolLearns: more processes at once than sshd's MaxSessions lets
// one master carry all run and finish; the executor learns the bound
// from a refused session, and the next ones run through masters of the
// pool (none refused, so none on a connection of its own).
func TestPoolLearns(t *testing.T) {
	_, e := startMax(t, Options{})
	const n = 5
	batch := func() (refused int) {
		var hs []*held
		for range n {
			hs = append(hs, hold(t, e, "echo done"))
		}
		if got := len(sshProcs(e.ctlDir, true)); got > 3 {
			t.Errorf("%d masters for %d sessions", got, n)
		}
		for i, h := range hs {
			if out := h.finish(t); out != "done\n" {
				t.Errorf("process %d said %q", i, out)
			}
			if strings.Contains(h.stderr.String(), "refused") {
				refused++
			}
		}
		return refused
	}
	batch() // may be refused: it learns
	if refused := batch(); refused > 0 {
		t.Errorf("%d sessions refused after the bound was learned", refused)
	}
}

// TestPoolForward: with a bound of 2 sessions a master, 5 processes run
// on 3 masters; a socket forwarded before is reachable from each; Close
// leaves no ssh process of the executor.
func TestPoolForward(t *testing.T) {
	_, e := startMax(t, Options{MaxSessions: 2})
	ctx := context.Background()
	remote, err := e.Forward(ctx, "pool", "tool.sock", serve(t))
	if err != nil {
		t.Fatal(err)
	}
	var hs []*held
	for range 5 {
		hs = append(hs, hold(t, e, `exec "$1" -test.run=^$`, dialEnv+"="+remote))
	}
	if got := len(sshProcs(e.ctlDir, true)); got != 3 {
		t.Errorf("%d masters for 5 sessions of 2 a master, want 3", got)
	}
	for i, h := range hs {
		if out := h.finish(t); out != "pong ping\n" || h.stderr.Len() > 0 {
			t.Errorf("process %d said %q; stderr %q", i, out, h.stderr.String())
		}
	}
	e.Close()
	until(t, func() bool { return len(sshProcs(e.ctlDir, false)) == 0 })
}

// TestPoolBound: the pool opens no more than MaxMasters masters; a
// process beyond their sessions still runs (OpenSSH's client makes a
// connection of its own when the master's session is refused).
func TestPoolBound(t *testing.T) {
	_, e := startMax(t, Options{MaxSessions: 2, MaxMasters: 2})
	var hs []*held
	for range 5 {
		hs = append(hs, hold(t, e, "echo done"))
	}
	if got := len(sshProcs(e.ctlDir, true)); got != 2 {
		t.Errorf("%d masters, want 2", got)
	}
	for i, h := range hs {
		if out := h.finish(t); out != "done\n" {
			t.Errorf("process %d said %q", i, out)
		}
	}
}

// TestPoolEnv: the pool's bounds come from the environment when the
// options leave them unset; a bad value is refused.
func TestPoolEnv(t *testing.T) {
	t.Setenv(MaxMastersEnv, "3")
	t.Setenv(MaxSessionsEnv, "2")
	e, err := New("h", Options{MaxSessions: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if len(e.masters) != 3 || e.limit != 5 {
		t.Errorf("%d masters, %d sessions; want 3, 5", len(e.masters), e.limit)
	}
	t.Setenv(MaxSessionsEnv, "-1")
	if _, err := New("h", Options{}); err == nil || !strings.Contains(err.Error(), MaxSessionsEnv) {
		t.Errorf("New with $%s=-1: %v", MaxSessionsEnv, err)
	}
}

// TestPoolForwardLost: the master that holds a forwarding lost, the
// processes on the other masters reach the socket again.
func TestPoolForwardLost(t *testing.T) {
	_, e := startMax(t, Options{MaxSessions: 2})
	ctx := context.Background()
	remote, err := e.Forward(ctx, "pool", "tool.sock", serve(t))
	if err != nil {
		t.Fatal(err)
	}
	var hs []*held
	for range 4 {
		hs = append(hs, hold(t, e, `exec "$1" -test.run=^$`, dialEnv+"="+remote))
	}
	e.pmu.Lock()
	holder, m0, m1 := e.fwds[remote].m, e.masters[0], e.masters[1]
	e.pmu.Unlock()
	if holder != m0 || m1 == nil {
		t.Fatalf("the forwarding on %v, the second master %v", holder, m1)
	}
	holder.cmd.Process.Kill()
	until(t, func() bool {
		e.pmu.Lock()
		defer e.pmu.Unlock()
		f := e.fwds[remote]
		return f.m != nil && f.m != holder
	})
	for i, h := range hs[2:] {
		if out := h.finish(t); out != "pong ping\n" {
			t.Errorf("process %d on the second master said %q; stderr %q", i+2, out, h.stderr.String())
		}
	}
}
