package ssh

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/executor"
	"github.com/substrat/substrat/internal/sshtest"
)

// token returns a word unique to the test, to find its processes by.
func token(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// running is a started sleeper: its Process and its unique sleep
// argument (the seconds, as sleep reads them), once it has said it runs.
type running struct {
	p     executor.Process
	sleep string
	done  chan error
}

// sleeper starts, on the host, a sandboxed shell that says it started
// and then sleeps in a child (so the sandbox holds two processes), and
// waits until it has said so.
func sleeper(t *testing.T, e *Executor, agent, inc string) *running {
	t.Helper()
	b := make([]byte, 3)
	rand.Read(b)
	secs := "1000." + strings.TrimLeft(hex.EncodeToString(b), "0") + "1"
	// Digits only: sleep reads the fraction in hexadecimal otherwise.
	secs = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'f' {
			return r - 'a' + '1'
		}
		return r
	}, secs)
	outR, outW := io.Pipe()
	inR, _ := io.Pipe() // input that never ends: the command holds it
	p, err := e.Start(context.Background(), &executor.Cmd{
		Agent: agent, Incarnation: inc,
		Argv:  sandboxed(t.TempDir(), "/bin/sh", "-c", `sleep "$1" & echo started; wait`, "sh", secs),
		Stdin: inR, Stdout: outW,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &running{p: p, sleep: secs, done: make(chan error, 1)}
	go func() { err := p.Wait(); outW.Close(); r.done <- err }()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if line != "started\n" {
		t.Fatalf("sleeper said %q, %v", line, err)
	}
	go io.Copy(io.Discard, outR)
	return r
}

// remote lists the host's processes whose command line holds word.
func remote(t *testing.T, s *sshtest.Server, word string) []string {
	t.Helper()
	out, err := s.Command(context.Background(), "ps", "-eo", "pid=,args=").Output()
	if err != nil {
		t.Fatalf("ps over ssh: %v", err)
	}
	var found []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, word) {
			found = append(found, strings.TrimSpace(l))
		}
	}
	return found
}

// until waits until cond holds: for what the test cannot wait on
// otherwise. The bound only fails a test that would hang.
func until(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not so after %v", within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gone waits until no process of the host holds any of words: the
// remote side dies after the channel's end, which the test cannot wait
// on otherwise. The bound only fails a test that would hang.
func gone(t *testing.T, s *sshtest.Server, words ...string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var left []string
		for _, w := range words {
			left = append(left, remote(t, s, w)...)
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still running on the host after %v:\n%s", within, strings.Join(left, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestKill: Kill of the handle kills the remote wrapper, its sandbox
// and everything in it.
func TestKill(t *testing.T) {
	s, e := start(t)
	agent := token("kill")
	r := sleeper(t, e, agent, "i1")
	if len(remote(t, s, r.sleep)) == 0 || len(remote(t, s, agent)) == 0 {
		t.Fatal("the sleeper is not seen on the host: the test would prove nothing")
	}
	if err := r.p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-r.done; err == nil {
		t.Fatal("Wait of a killed process returned nil")
	}
	gone(t, s, r.sleep, agent)
}

// TestKillClient: a kill -9 of the local ssh client (the daemon's side
// of the connection gone without a word) leaves nothing on the host.
func TestKillClient(t *testing.T) {
	s, e := start(t)
	agent := token("kill9")
	r := sleeper(t, e, agent, "i1")
	if err := syscall.Kill(r.p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var ee *executor.ExitError
	if err := <-r.done; !errors.As(err, &ee) || ee.Code != -1 {
		t.Fatalf("Wait: %v, want killed by a signal", err)
	}
	gone(t, s, r.sleep, agent)
}

// TestKillMaster: the connection itself lost (its master killed -9):
// the processes that ran through it die on the host, and the next
// command opens a new connection.
func TestKillMaster(t *testing.T) {
	s, e := start(t)
	agent := token("master")
	r := sleeper(t, e, agent, "i1")
	out, err := e.master(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(out, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-r.done; err == nil {
		t.Fatal("Wait returned nil after the connection was lost")
	}
	gone(t, s, r.sleep, agent)
	r2 := sleeper(t, e, agent, "i1")
	if pid, err := e.master(context.Background()); err != nil || pid == out {
		t.Fatalf("after the master's death: master %d, %v; want a new one", pid, err)
	}
	r2.p.Kill()
	<-r2.done
}

// TestCancel: cancelling Start's context kills as Kill does.
func TestCancel(t *testing.T) {
	s, e := start(t)
	agent := token("cancel")
	ctx, cancel := context.WithCancel(context.Background())
	inR, _ := io.Pipe()
	p, err := e.Start(ctx, &executor.Cmd{Agent: agent, Incarnation: "i1",
		Argv: sandboxed(t.TempDir(), "/bin/sh", "-c", "echo started; exec cat"), Stdin: inR, Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	until(t, func() bool { return len(remote(t, s, agent)) > 0 }) // the wrapper runs
	cancel()
	if err := p.Wait(); err == nil {
		t.Fatal("Wait returned nil after cancel")
	}
	gone(t, s, agent)
}

// TestFence: Fence kills the agent's processes of another incarnation,
// and spares the current incarnation's and other agents'.
func TestFence(t *testing.T) {
	s, e := start(t)
	agent, other := token("fence"), token("other")
	stale := sleeper(t, e, agent, "old")
	current := sleeper(t, e, agent, "new")
	bystander := sleeper(t, e, other, "old")
	pids, err := e.Fence(context.Background(), agent, "new")
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) != 1 {
		t.Fatalf("Fence killed %v, want the one stale wrapper", pids)
	}
	if err := <-stale.done; err == nil {
		t.Fatal("the stale process's Wait returned nil")
	}
	gone(t, s, stale.sleep)
	for _, r := range []*running{current, bystander} {
		if len(remote(t, s, r.sleep)) == 0 {
			t.Fatalf("Fence killed %s too", r.sleep)
		}
		select {
		case err := <-r.done:
			t.Fatalf("a spared process ended: %v", err)
		default:
		}
	}
	// Nothing stale is left: a second fence kills nothing.
	if pids, err := e.Fence(context.Background(), agent, "new"); err != nil || len(pids) != 0 {
		t.Fatalf("second Fence: %v, %v", pids, err)
	}
	for _, r := range []*running{current, bystander} {
		r.p.Kill()
		<-r.done
	}
	gone(t, s, agent, other)
}

// TestFenceForged: a process in a sandbox that dresses up as a stale
// wrapper of another agent (its command line is one, and it leads a
// group of its own in its sandbox: setsid there) gets no process
// killed, not even its own: Fence finds no stale process of the victim
// (which would make the daemon salvage the victim's copies).
func TestFenceForged(t *testing.T) {
	s, e := start(t)
	victim, forger := token("victim"), token("forger")
	v := sleeper(t, e, victim, "new")
	forged := "1000." + strings.TrimPrefix(sleeper(t, e, forger, "i1").sleep, "1000.") + "9"
	p, err := e.Start(context.Background(), &executor.Cmd{Agent: forger, Incarnation: "i1",
		Argv:   sandboxed(t.TempDir(), "/usr/bin/setsid", "-w", "/bin/sh", "-c", `sleep "$3"; :`, Marker, victim, "old", forged),
		Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	until(t, func() bool { return len(remote(t, s, Marker+" "+victim+" old "+forged)) > 0 }) // the forgery runs
	if pids, err := e.Fence(context.Background(), victim, "new"); err != nil || len(pids) > 0 {
		t.Fatalf("Fence of the victim: %v, %v; want nothing killed", pids, err)
	}
	if len(remote(t, s, Marker+" "+victim+" old "+forged)) == 0 {
		t.Error("Fence killed the forger's process")
	}
	if len(remote(t, s, v.sleep)) == 0 {
		t.Fatal("Fence killed the victim's real process because of a forged one")
	}
	v.p.Kill()
	<-v.done
	p.Kill()
	p.Wait()
	e.Fence(context.Background(), forger, "none")
	gone(t, s, victim, forger)
}
