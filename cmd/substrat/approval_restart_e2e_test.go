package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	wire "github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider/fakeapi"
)

// TestApprovalAcrossKillE2E: a root agent (script provider) asks for
// approval; the daemon is killed with SIGKILL while the request waits.
// After the restart the turn runs again and asks again: it waits for the
// same request (one request, one message to USER), the agent shows
// WAITING in agent list meanwhile, a turn timeout shorter than the wait
// does not fail it, and `substrat approve` releases it.
func TestApprovalAcrossKillE2E(t *testing.T) {
	bin := lookPath(t, "substrat")
	d := runDaemon(t, "SUBSTRAT_TURN_TIMEOUT=2s")
	var solo wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "solo",
		Permissions: &fsstore.Permissions{Mode: fsstore.ModeDefault, ApprovalTimeout: "10m"}}, &solo)
	events := fsstore.Layout{Home: d.home}.Agent(solo.ID).Events()
	waits := func() int {
		b, _ := os.ReadFile(events)
		return strings.Count(string(b), "waiting for approval request")
	}
	agentList := func() string {
		out, err := exec.Command(bin, "agent", "list", "--home", d.home).CombinedOutput()
		if err != nil {
			t.Fatalf("agent list: %v: %s", err, out)
		}
		return string(out)
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; daemon output in %s", what, d.home+"/e2e-daemon.out")
			}
		}
	}

	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "solo", Wait: false, Text: `!request_approval {"tool_name":"Bash","input":{"command":"make install"},"tool_use_id":"toolu_1"}` +
		"\n" + `!send_message {"recipient":"USER","text":"installed"}`}, nil)
	req := waitApproval(t, d, 1)[0]
	eventually("WAITING in agent list", func() bool { return strings.Contains(agentList(), "WAITING") })

	d.kill()
	d.start()
	// The turn runs again and waits for the same request, past the turn
	// timeout.
	eventually("the turn run again to wait", func() bool { return waits() >= 2 })
	time.Sleep(3 * time.Second)
	var list []wire.PendingApproval
	mustCall(d, wire.ApprovalList, struct{}{}, &list)
	if len(list) != 1 || list[0].ID != req.ID {
		t.Fatalf("after the restart the requests are %+v, want only %s", list, req.ID)
	}
	if out := agentList(); !strings.Contains(out, "WAITING") {
		t.Errorf("waiting for approval after the restart, agent list says:\n%s", out)
	}
	if out, err := exec.Command(bin, "approve", req.ID, "--home", d.home).CombinedOutput(); err != nil {
		t.Fatalf("substrat approve: %v: %s", err, out)
	}
	var inbox []wire.InboxMessage
	eventually("the turn to finish", func() bool {
		inbox = nil
		mustCall(d, wire.InboxList, wire.InboxListParams{All: true}, &inbox)
		for _, m := range inbox {
			if m.Text == "installed" {
				return true
			}
		}
		return false
	})
	asks := 0
	for _, m := range inbox {
		if m.Kind == fsstore.KindApproval {
			asks++
		}
	}
	var info wire.InspectResult
	mustCall(d, wire.AgentInspect, wire.RefParams{Ref: "solo"}, &info)
	if ap := info.Session.Approvals; asks != 1 || len(ap) != 1 || ap[0].Answer != fsstore.ApprovalAllow {
		t.Errorf("USER asked %d times; the agent's requests: %+v", asks, ap)
	}
	// The transcript is written as the turn ends, after its message.
	eventually("the answer in the transcript", func() bool {
		b, _ := os.ReadFile(fsstore.Layout{Home: d.home}.Agent(solo.ID).Transcript())
		return strings.Contains(string(b), `request_approval -> {"behavior":"allow"`)
	})
}

// TestApprovalClaudeAcrossKillE2E: the same with the real Claude Code CLI
// in its safe mode. Its Bash call waits for USER's approval when the
// daemon is SIGKILLed; after the restart the CLI resumes, the model asks
// for the same command under a new tool-use id, and that is the same
// request: `substrat approve` runs the command, and only one request was
// ever made.
func TestApprovalClaudeAcrossKillE2E(t *testing.T) {
	cli := claudeCLI(t)
	bin := lookPath(t, "substrat")
	api := fakeapi.NewClaude(approvalReply)
	t.Cleanup(api.Close)
	d := runDaemon(t, claudeEnv(cli, api.URL)...)
	dir := t.TempDir()
	var w wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "w", Provider: "claude", WorkDir: dir,
		Permissions: &fsstore.Permissions{Mode: fsstore.ModeDefault, ApprovalTimeout: "10m"}}, &w)
	events := fsstore.Layout{Home: d.home}.Agent(w.ID).Events()
	waits := func() int {
		b, _ := os.ReadFile(events)
		return strings.Count(string(b), "waiting for approval request")
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); !cond(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; daemon output in %s", what, filepath.Join(d.home, "e2e-daemon.out"))
			}
		}
	}

	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "w", Text: "RUN FOUR", Wait: false}, nil)
	req := waitApproval(t, d, 1)[0]
	eventually("WAITING", func() bool { return waits() >= 1 })
	d.kill()
	d.start()
	eventually("the turn run again to wait", func() bool { return waits() >= 2 })
	var list []wire.PendingApproval
	mustCall(d, wire.ApprovalList, struct{}{}, &list)
	if len(list) != 1 || list[0].ID != req.ID {
		t.Fatalf("after the restart the requests are %+v, want only %s", list, req.ID)
	}
	if out, err := exec.Command(bin, "approve", req.ID, "--home", d.home).CombinedOutput(); err != nil {
		t.Fatalf("substrat approve: %v: %s", err, out)
	}
	eventually("four.txt", func() bool { _, err := os.Stat(filepath.Join(dir, "four.txt")); return err == nil })
	var info wire.InspectResult
	mustCall(d, wire.AgentInspect, wire.RefParams{Ref: "w"}, &info)
	if ap := info.Session.Approvals; len(ap) != 1 || ap[0].ID != req.ID || ap[0].Answer != fsstore.ApprovalAllow {
		t.Errorf("the agent's requests: %+v", ap)
	}
}
