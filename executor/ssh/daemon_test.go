package ssh

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/executor"
)

// The environment that makes the test binary play a daemon (see
// TestMain) that starts a sleeper on the host and waits to be killed.
const (
	daemonEnv = "SSHEXEC_TEST_DAEMON" // "config root agent secs"
	dialEnv   = "SSHEXEC_TEST_DIAL"   // a Unix socket to say ping to
)

func TestMain(m *testing.M) {
	if v := os.Getenv(daemonEnv); v != "" {
		playDaemon(strings.Fields(v))
		return
	}
	if v := os.Getenv(dialEnv); v != "" {
		dial(v)
		return
	}
	os.Exit(m.Run())
}

// playDaemon starts a sleeper that never gets the end of its input,
// says so, and waits for its death.
func playDaemon(a []string) {
	e, err := New("substrat-test", Options{Config: a[0], Root: a[1]})
	if err != nil {
		panic(err)
	}
	inR, _ := io.Pipe()
	outR, outW := io.Pipe()
	if _, err := e.Start(context.Background(), &executor.Cmd{Agent: a[2], Incarnation: "1",
		Argv:  sandboxed(a[1], "/bin/sh", "-c", `sleep "$1" & echo started; wait`, "sh", a[3]),
		Stdin: inR, Stdout: outW}); err != nil {
		panic(err)
	}
	line, _ := bufio.NewReader(outR).ReadString('\n')
	os.Stdout.WriteString(line)
	select {}
}

// TestDaemonKilled: a kill -9 of the daemon (its ssh clients die with
// it; one that lived on would have its input cut) leaves nothing on the
// host.
func TestDaemonKilled(t *testing.T) {
	s, _ := start(t)
	agent, secs := token("daemon"), "1000.77"+strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return '5'
	}, token(""))
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// The daemon's private dir outlives it (its master must not): a
	// temporary dir of the test's own, short enough for the master's
	// socket.
	tmp, err := os.MkdirTemp("", "sx")
	if err != nil {
		t.Fatal(err)
	}
	masters := func() (alive []string) {
		socks, _ := filepath.Glob(filepath.Join(tmp, "*", "m[0-9]"))
		for _, sock := range socks {
			if exec.Command("ssh", "-F", s.Config, "-o", "ControlPath="+sock, "-O", "check", s.Host).Run() == nil {
				alive = append(alive, sock)
			}
		}
		return alive
	}
	t.Cleanup(func() {
		for _, sock := range masters() { // only if the test failed
			exec.Command("ssh", "-F", s.Config, "-o", "ControlPath="+sock, "-O", "exit", s.Host).Run()
		}
		os.RemoveAll(tmp)
	})
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, daemonEnv+"="+strings.Join([]string{s.Config, t.TempDir(), agent, secs}, " "))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if line != "started\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the daemon said %q, %v; stderr: %s", line, err, stderr.String())
	}
	if len(remote(t, s, secs)) == 0 {
		t.Fatal("the sleeper is not seen on the host")
	}
	if len(masters()) != 1 {
		t.Fatalf("the daemon's master: %v", masters())
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	gone(t, s, secs, agent)
	// Its master connection died with it, and the forwardings it held.
	for deadline := time.Now().Add(10 * time.Second); len(masters()) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the dead daemon's master connection lives on: %v", masters())
		}
	}
}
