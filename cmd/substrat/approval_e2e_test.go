package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	wire "github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider/fakeapi"
)

var requestRE = regexp.MustCompile(`Approval request (\S+):`)

// approverModel is a script-provider model program (registered in
// TestMain as the command approver-model): a parent that allows every
// approval request its prompt names, with the approve tool.
func approverModel() int {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	out := json.NewEncoder(os.Stdout)
	var turn struct {
		Prompt string `json:"prompt"`
	}
	if !in.Scan() || json.Unmarshal(in.Bytes(), &turn) != nil {
		return 1
	}
	n := 0
	for _, m := range requestRE.FindAllStringSubmatch(turn.Prompt, -1) {
		out.Encode(map[string]any{"type": "call", "name": "approve", "args": map[string]any{"request_id": m[1], "allow": true, "reason": "fine by the lead"}})
		if !in.Scan() { // the tool's result
			return 1
		}
		n++
	}
	out.Encode(map[string]any{"type": "done", "text": fmt.Sprintf("approved %d", n)})
	return 0
}

// approvalReply is the worker's scripted model: "RUN X" makes it call
// Bash to write x.txt, and then report what the tool said.
func approvalReply(req fakeapi.ClaudeRequest) fakeapi.ClaudeOut {
	last := req.Last()
	for _, b := range last.Blocks() {
		if b.Type == "tool_result" {
			return fakeapi.ClaudeOut{Text: "the tool said: " + fakeapi.ResultText(b)}
		}
	}
	if m := regexp.MustCompile(`RUN (\w+)`).FindStringSubmatch(last.Text()); m != nil {
		word := strings.ToLower(m[1])
		return fakeapi.ClaudeOut{ToolUse: &fakeapi.Call{ID: "toolu_appr_" + word + fmt.Sprint(len(req.Messages)), Name: "Bash",
			Args: fmt.Sprintf(`{"command":"echo %s > %s.txt","description":"write a file"}`, word, word)}}
	}
	return fakeapi.ClaudeOut{Text: "Noted."}
}

// TestApprovalE2E: a worker running the real Claude Code CLI in its safe
// mode, outside any sandbox, calls Bash. (1) The request reaches its
// parent (a script model that allows it) and the command runs. (2) With
// USER as its approver, `substrat deny` refuses the next one and the turn
// goes on with the reason. (3) A third gets no answer and is denied when
// its timeout ends. (4) A kill -9 while a request waits keeps it listed.
func TestApprovalE2E(t *testing.T) {
	cli := claudeCLI(t)
	bin := lookPath(t, "substrat")
	model := lookPath(t, "approver-model")
	api := fakeapi.NewClaude(approvalReply)
	t.Cleanup(api.Close)
	d := runDaemon(t, claudeEnv(cli, api.URL)...)
	dir := t.TempDir()
	var lead, w wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "lead", Model: model, WorkDir: dir}, &lead)
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "w", Provider: "claude", Parent: lead.ID, WorkDir: dir,
		Permissions: &fsstore.Permissions{Mode: fsstore.ModeDefault, ApprovalTimeout: "60s"}}, &w)
	exists := func(name string) bool { _, err := os.Stat(filepath.Join(dir, name)); return err == nil }

	// 1. The parent allows; the command runs.
	res := d.send("w", "RUN ONE")
	if !exists("one.txt") || strings.Contains(res.Text, "denied") {
		t.Fatalf("the allowed command did not run: %q", res.Text)
	}
	var info wire.InspectResult
	mustCall(d, wire.AgentInspect, wire.RefParams{Ref: "w"}, &info)
	if ap := info.Session.Approvals; len(ap) != 1 || ap[0].Answer != fsstore.ApprovalAllow || ap[0].By != lead.ID || ap[0].Tool != "Bash" {
		t.Fatalf("the worker's approvals: %+v", ap)
	}

	// 2. USER is the approver now, and denies from the CLI.
	mustCall(d, wire.AgentPermissions, wire.PermissionsParams{Ref: "w", Approver: fsstore.ApproverUser}, nil)
	done := make(chan wire.SendResult, 1)
	go func() { done <- d.send("w", "RUN TWO") }()
	req := waitApproval(t, d, 1)[0]
	if req.Approver != fsstore.User || req.Agent != "lead/w" {
		t.Fatalf("the second request: %+v", req)
	}
	cmd := exec.Command(bin, "deny", req.ID, "--reason", "not now, says the user", "--home", d.home)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "deny "+req.ID) {
		t.Fatalf("substrat deny: %v: %s", err, out)
	}
	if res := <-done; !strings.Contains(res.Text, "not now, says the user") || exists("two.txt") {
		t.Fatalf("a denied command ran, or the turn did not see why: %q", res.Text)
	}
	out, _ := exec.Command(bin, "deny", req.ID, "--home", d.home).CombinedOutput()
	if !strings.Contains(string(out), "already answered: deny by USER") {
		t.Errorf("a second answer: %s", out)
	}

	// 3. Nobody answers: denied when the timeout ends.
	mustCall(d, wire.AgentPermissions, wire.PermissionsParams{Ref: "w", ApprovalTimeout: "2s"}, nil)
	if res := d.send("w", "RUN THREE"); !strings.Contains(res.Text, "no answer within 2s") || exists("three.txt") {
		t.Fatalf("an unanswered request: %q", res.Text)
	}

	// 4. A kill -9 while a request waits: it is still listed afterwards.
	mustCall(d, wire.AgentPermissions, wire.PermissionsParams{Ref: "w", ApprovalTimeout: "10m"}, nil)
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "w", Text: "RUN FOUR", Wait: false}, nil)
	req = waitApproval(t, d, 1)[0]
	d.kill()
	d.start()
	var list []wire.PendingApproval
	mustCall(d, wire.ApprovalList, struct{}{}, &list)
	found := false
	for _, p := range list {
		found = found || p.ID == req.ID
	}
	if !found {
		t.Fatalf("the request that waited at the kill is gone: %+v", list)
	}
	if out, err := exec.Command(bin, "approvals", "--home", d.home).CombinedOutput(); err != nil || !strings.Contains(string(out), req.ID) {
		t.Errorf("substrat approvals: %v: %s", err, out)
	}
}

func waitApproval(t *testing.T, d *e2eDaemon, n int) []wire.PendingApproval {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var list []wire.PendingApproval
		mustCall(d, wire.ApprovalList, struct{}{}, &list)
		if len(list) >= n {
			return list
		}
		if time.Now().After(deadline) {
			t.Fatalf("no approval request came; daemon output in %s", filepath.Join(d.home, "e2e-daemon.out"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
