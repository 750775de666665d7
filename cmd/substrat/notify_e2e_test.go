package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"

	"github.com/substrat/substrat/supervisor/api"
)

// TestNotifyStatusE2E: `substrat daemon status` shows what notify_command
// did: messages, runs, coalesced, failures and the last error.
func TestNotifyStatusE2E(t *testing.T) {
	bin := lookPath(t, "substrat")
	d := runDaemon(t)
	cfg := `{"version": 1, "notify_command": ["sh", "-c", "echo no display >&2; exit 3"]}`
	if err := os.WriteFile(fsstore.Layout{Home: d.home}.Config(), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	status := func() string {
		out, err := exec.Command(bin, "daemon", "status", "--home", d.home).CombinedOutput()
		if err != nil {
			t.Fatalf("daemon status: %v: %s", err, out)
		}
		return string(out)
	}
	// The daemon adopts the file while it runs.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, _ := exec.Command(bin, "config", "show", "--home", d.home).CombinedOutput()
		if strings.Contains(string(out), "exit 3") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("config.json not adopted: %s", out)
		}
	}
	mustCall(d, api.AgentCreate, api.CreateParams{Name: "r"}, nil)
	d.send("r", `!send_message {"recipient":"USER","text":"all done"}`)
	var out string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if out = status(); strings.Contains(out, "1 failed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon status never showed the failure:\n%s", out)
		}
	}
	for _, want := range []string{"notify: 1 messages to USER, 1 notifications run (0 more messages coalesced into them), 1 failed", "exit status 3"} {
		if !strings.Contains(out, want) {
			t.Errorf("daemon status lacks %q:\n%s", want, out)
		}
	}
}
