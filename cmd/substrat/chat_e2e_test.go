package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	wire "github.com/substrat/substrat/supervisor/api"
)

// TestAgentChatInterruptE2E: Ctrl-C during a turn of agent chat says the
// message is stored and its turn goes on, and the chat goes on; the end
// of the input then ends it with success, and the turn finishes in the
// daemon.
func TestAgentChatInterruptE2E(t *testing.T) {
	dir := t.TempDir()
	gate := filepath.Join(dir, "go")
	model := filepath.Join(dir, "slow.sh")
	script := "#!/bin/sh\nread turn\nwhile [ ! -e " + gate + " ]; do sleep 0.05; done\necho '{\"type\":\"done\",\"text\":\"finally\"}'\n"
	if err := os.WriteFile(model, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	d := runDaemon(t)
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "slow", Model: model, WorkDir: dir}, nil)

	cmd := exec.Command("substrat", "--home", d.home, "agent", "chat", "slow")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	lines, stderr := d.startCLI(t, cmd)
	stdin.Write([]byte("take your time\n"))
	lines.waitFor(t, "< USER       take your time") // printed once the message is stored
	cmd.Process.Signal(syscall.SIGINT)
	stdin.Write([]byte("second\n"))
	lines.waitFor(t, "< USER       second")
	stdin.Close()
	os.WriteFile(gate, nil, 0o600)
	lines.rest()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("agent chat: %v; stderr: %s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "is stored, and its turn goes on in the daemon") {
		t.Errorf("Ctrl-C during the turn: stderr %q", stderr.String())
	}
	all := strings.Join(lines.all, "\n")
	if !strings.Contains(all, "text         finally") {
		t.Errorf("the second message's turn did not stream:\n%s\nstderr: %s", all, stderr.String())
	}
}
