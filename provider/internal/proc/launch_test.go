package proc

import (
	"context"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/substrat/substrat/executor"
	"github.com/substrat/substrat/provider"
)

// viaExecutor is a provider.StartFunc that starts processes through the
// local executor, as the daemon's does through an ssh one, and counts
// them.
func viaExecutor(n *atomic.Int32) provider.StartFunc {
	return func(ctx context.Context, p provider.Process, stdio provider.Stdio) (provider.Running, error) {
		n.Add(1)
		return executor.Local{}.Start(ctx, &executor.Cmd{Agent: "a", Incarnation: "1",
			Argv: p.Args, Env: p.Env, Dir: p.Dir, Stdin: stdio.Stdin, Stdout: stdio.Stdout, Stderr: stdio.Stderr})
	}
}

// TestStartHook: with Command.Start set, the turn's process is started
// through it, and reads, writes and ends as a local one does.
func TestStartHook(t *testing.T) {
	var n atomic.Int32
	p, err := Start(context.Background(), Command{Path: "/bin/sh", Args: []string{"-c", `read -r l; echo "got $l"; echo oops >&2`},
		Stdin: "hello\n", Start: viaExecutor(&n)}, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	line, err := p.Line()
	if err != nil || string(line) != "got hello" {
		t.Fatalf("Line = %q, %v", line, err)
	}
	if _, err := p.Line(); err != io.EOF {
		t.Fatalf("Line at the end: %v", err)
	}
	if err := p.Finish(time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := p.Stderr(100); got != `"oops"` {
		t.Errorf("stderr %s", got)
	}
	if n.Load() != 1 {
		t.Errorf("the hook started %d processes", n.Load())
	}
}

// TestStartHookCancel: cancelling the turn kills a process started
// through the hook, and Finish returns.
func TestStartHookCancel(t *testing.T) {
	var n atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	tag := "launchhook" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	p, err := Start(ctx, Command{Path: "/bin/sh", Args: []string{"-c", "echo started; exec sleep 3173" + tag[len(tag)-6:]},
		Start: viaExecutor(&n)}, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := p.Line(); err != nil || string(l) != "started" {
		t.Fatalf("Line = %q, %v", l, err)
	}
	cancel()
	if _, err := p.Line(); err == nil {
		t.Fatal("Line after cancel: no error")
	}
	p.Finish(0)
	if a := alive("sleep 3173" + tag[len(tag)-6:]); len(a) > 0 {
		t.Errorf("still running: %v", a)
	}
}

// TestLaunchStdinFile: a starter that reads the input after Launch has
// returned, when the caller has closed its file, still reads it all.
func TestLaunchStdinFile(t *testing.T) {
	var n atomic.Int32
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	outR, outW, _ := os.Pipe()
	h, err := Launch(context.Background(), provider.Process{Path: "/bin/cat", Args: []string{"cat"}},
		provider.Stdio{Stdin: inR, Stdout: outW}, func(ctx context.Context, p provider.Process, stdio provider.Stdio) (provider.Running, error) {
			// Read through a reader, as ssh's relay does, not the file.
			stdio.Stdin = struct{ io.Reader }{stdio.Stdin}
			return viaExecutor(&n)(ctx, p, stdio)
		})
	inR.Close()
	outW.Close()
	if err != nil {
		t.Fatal(err)
	}
	inW.WriteString("through\n")
	inW.Close()
	io.Copy(&out, outR)
	h.Exited()
	if err := h.Wait(); err != nil {
		t.Fatal(err)
	}
	if out.String() != "through\n" {
		t.Errorf("output %q", out.String())
	}
}
