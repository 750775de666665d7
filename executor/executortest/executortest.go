// Package executortest is the conformance suite every executor passes:
// a command's streams and exit status, and a Kill that leaves nothing of
// it running. The processes are looked for in this machine's /proc, so
// a remote executor is tested against a host on loopback.
package executortest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/executor"
)

// Sandbox returns a command that runs cmd sandboxed in a fresh place,
// as the daemon would build it for the executor's machine: its Argv,
// and the ExtraFiles that argv needs if any. The suite sets the rest.
type Sandbox func(t *testing.T, cmd ...string) *executor.Cmd

// Run runs the suite against e.
func Run(t *testing.T, e executor.Executor, sandbox Sandbox) {
	t.Run("Streams", func(t *testing.T) { streams(t, e, sandbox) })
	t.Run("Kill", func(t *testing.T) { kill(t, e, sandbox) })
}

func streams(t *testing.T, e executor.Executor, sandbox Sandbox) {
	var out, errb bytes.Buffer
	c := sandbox(t, "/bin/sh", "-c", `cat; echo "$V" >&2; exit 5`)
	c.Agent, c.Incarnation = "a", "1"
	c.Env = []string{"V=v", "PATH=/usr/bin:/bin"}
	c.Stdin, c.Stdout, c.Stderr = strings.NewReader("in\x00put"), &out, &errb
	p, err := e.Start(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	var ee *executor.ExitError
	if err := p.Wait(); !errors.As(err, &ee) || ee.Code != 5 {
		t.Fatalf("Wait: %v, want status 5", err)
	}
	if out.String() != "in\x00put" || errb.String() != "v\n" {
		t.Fatalf("stdout %q, stderr %q", out.String(), errb.String())
	}
}

func kill(t *testing.T, e executor.Executor, sandbox Sandbox) {
	b := make([]byte, 4)
	rand.Read(b)
	secs := "1000.9" + strings.Map(func(r rune) rune {
		if r > '9' {
			return r - 'a' + '0'
		}
		return r
	}, hex.EncodeToString(b))
	outR, outW := io.Pipe()
	c := sandbox(t, "/bin/sh", "-c", `sleep "$1" & echo started; wait`, "sh", secs)
	c.Agent, c.Incarnation, c.Stdout = "a", "1", outW
	p, err := e.Start(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { err := p.Wait(); outW.Close(); done <- err }()
	if line, err := bufio.NewReader(outR).ReadString('\n'); line != "started\n" {
		t.Fatalf("said %q, %v", line, err)
	}
	go io.Copy(io.Discard, outR)
	if len(running(t, secs)) == 0 {
		t.Fatal("the sleeper is not seen in /proc: the test would prove nothing")
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("Wait of a killed process returned nil")
	}
	// What the kill ends, ends after Wait (reaping, the far side of a
	// connection): wait for it. The bound only fails a test that would
	// hang.
	deadline := time.Now().Add(2 * time.Minute)
	for left := running(t, secs); len(left) > 0; left = running(t, secs) {
		if time.Now().After(deadline) {
			t.Fatalf("still running after Kill: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// running lists the live processes whose command line holds word.
func running(t *testing.T, word string) []string {
	t.Helper()
	files, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || !bytes.Contains(b, []byte(word)) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(filepath.Dir(f), "stat"))
		if err != nil || bytes.Contains(stat[bytes.LastIndexByte(stat, ')'):], []byte(") Z ")) {
			continue // gone, or a zombie
		}
		found = append(found, strings.ReplaceAll(string(b), "\x00", " "))
	}
	return found
}
