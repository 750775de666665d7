package daemon

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Under a subreaper (systemd), a provider's group leader killed with the
// daemon is reaped at once, and its children live on in its process group
// with no leader. The next start kills the group anyway. It used to skip a
// group whose leader was gone, and the children outlived the daemon.
func TestReapGroupWithoutLeader(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	// A provider process: a group leader with a child of its own.
	leader := exec.Command("/bin/sh", "-c", "sleep 300 & echo $!; wait")
	leader.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := leader.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	child, _ := strconv.Atoi(strings.TrimSpace(line))
	start, err := procStart(leader.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "providers.json")
	data, _ := json.Marshal(map[string]any{"version": 1, "processes": []procEntry{{Pid: leader.Process.Pid, Start: start, Agent: "a"}}})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	// The daemon dies with the leader; the subreaper (this process)
	// reaps the leader at once; its child lives on.
	leader.Process.Kill()
	leader.Wait()
	if syscall.Kill(child, 0) != nil {
		t.Fatal("the provider's child died with its leader; the test proves nothing")
	}
	reaped := reap(path, slog.New(slog.DiscardHandler))
	if len(reaped) != 1 {
		t.Fatalf("reaped %v", reaped)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ws unix.WaitStatus
		unix.Wait4(child, &ws, unix.WNOHANG, nil) // we are its subreaper
		if syscall.Kill(child, 0) != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leaderless group's process %d survived", child)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
