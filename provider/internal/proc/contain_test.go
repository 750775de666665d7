package proc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// escaper starts two processes that leave the group, as a CLI's
// background command can (setsid, and a subshell's orphan), then says
// "started".
func escaper(tag string) Command {
	return Command{Path: "/bin/sh", Args: []string{"-c",
		fmt.Sprintf("setsid sleep 3171%s </dev/null >/dev/null 2>&1 & (sleep 3172%s </dev/null >/dev/null 2>&1 &); echo started; exec sleep 60", tag, tag)}}
}

// alive lists the processes whose command line holds s.
func alive(s string) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), s) {
			out = append(out, d)
		}
	}
	return out
}

func needBwrap(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatal("bwrap is not installed (make test installs it)")
	}
}

// TestEscapedProcessesDieWithTheTurn: processes a turn's CLI started
// outside its group (setsid, orphans) do not outlive it.
func TestEscapedProcessesDieWithTheTurn(t *testing.T) {
	needBwrap(t)
	tag := fmt.Sprint(os.Getpid() % 1000)
	p, err := Start(context.Background(), escaper(tag), 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	if line, err := p.Line(); err != nil || string(line) != "started" {
		t.Fatalf("line %q, %v", line, err)
	}
	waitStarted(t, "sleep 3171"+tag)
	p.Finish(100 * time.Millisecond) // the turn ends: the CLI is killed after its grace
	waitGone(t, "sleep 317", tag)
}

// TestEscapedProcessesDieWithTheDaemon: killed with SIGKILL, the process
// that started the turn (the daemon) takes the turn's escaped processes
// with it.
func TestEscapedProcessesDieWithTheDaemon(t *testing.T) {
	needBwrap(t)
	if os.Getenv("PROC_TEST_DAEMON") != "" {
		p, err := Start(context.Background(), escaper(os.Getenv("PROC_TEST_DAEMON")), 1<<10)
		if err != nil {
			os.Exit(3)
		}
		line, _ := p.Line()
		fmt.Println(string(line))
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	tag := fmt.Sprint(os.Getpid()%1000 + 1000)
	cmd := exec.Command(os.Args[0], "-test.run", "^TestEscapedProcessesDieWithTheDaemon$")
	cmd.Env = append(os.Environ(), "PROC_TEST_DAEMON="+tag)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := out.Read(buf); err != nil || string(buf) != "started" {
		t.Fatalf("the daemon said %q, %v", buf, err)
	}
	waitStarted(t, "sleep 3171"+tag)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	waitGone(t, "sleep 317", tag)
}

// waitStarted waits (bounded) for a process whose command line holds s:
// without it the test would prove nothing.
func waitStarted(t *testing.T, s string) {
	t.Helper()
	for range 100 {
		if len(alive(s)) > 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s did not start", s)
}

// waitGone waits (bounded) until no process "sleep 317?<tag>" is left.
func waitGone(t *testing.T, prefix, tag string) {
	t.Helper()
	for range 100 {
		if len(alive(prefix+"1"+tag))+len(alive(prefix+"2"+tag)) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("escaped processes outlived the turn: %v %v", alive(prefix+"1"+tag), alive(prefix+"2"+tag))
}
