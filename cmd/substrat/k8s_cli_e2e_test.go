package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/executor/k8s"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/internal/k8stest"
	"github.com/substrat/substrat/provider/fakeapi"
	wire "github.com/substrat/substrat/supervisor/api"
)

// k8sClaudeReply plays the model of TestK8sExecutorCLI: "remember" is
// answered with a send_message to USER (a tool call through the pod's
// relay), its result with "sent", and "what did I say" from the
// conversation (a resumed session remembers).
func k8sClaudeReply(req fakeapi.ClaudeRequest) fakeapi.ClaudeOut {
	for _, b := range req.Last().Blocks() {
		if b.Type == "tool_result" {
			return fakeapi.ClaudeOut{Text: "sent: " + fakeapi.ResultText(b)}
		}
	}
	text := req.Last().Text()
	switch {
	case strings.Contains(text, "what did I say"):
		if strings.Contains(req.Conversation(), "remember MANGO") {
			return fakeapi.ClaudeOut{Text: "you said MANGO"}
		}
		return fakeapi.ClaudeOut{Text: "I was never told"}
	case strings.Contains(text, "ATTACK "):
		// The agent's own shell, in the pod: what it plants in its
		// HOME and around it.
		cmd := text[strings.LastIndex(text, "ATTACK ")+len("ATTACK "):]
		cmd, _, _ = strings.Cut(cmd, "\n")
		in, _ := json.Marshal(map[string]string{"command": cmd, "description": "plant"})
		return fakeapi.ClaudeOut{ToolUse: &fakeapi.Call{ID: "toolu_k8s_attack", Name: "Bash", Args: string(in)}}
	case strings.Contains(text, "remember MANGO"):
		in, _ := json.Marshal(map[string]string{"recipient": "USER", "text": "MANGO noted from the pod"})
		return fakeapi.ClaudeOut{ToolUse: &fakeapi.Call{ID: "toolu_k8s_send", Name: "mcp__substrat__send_message", Args: string(in)}}
	}
	return fakeapi.ClaudeOut{Text: "noted"}
}

// relayProcs lists the processes of `substrat tool-relay` for agent's
// socket (on kwok, whose exec runs them on this machine).
func relayProcs(agent string) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range dirs {
		b, _ := os.ReadFile(d)
		if s := string(b); strings.Contains(s, "tool-relay\x00") && strings.Contains(s, agent) {
			out = append(out, d+": "+strings.ReplaceAll(s, "\x00", " "))
		}
	}
	return out
}

// TestK8sExecutorCLI: the real Claude Code CLI runs an agent's turns in
// its pod (kwok: the exec runs it on this machine, in the pod's
// workspace, a directory of the test). Its own HOME goes into the pod's
// volume under k8s.OwnDir and comes back, so the second turn resumes
// the session the first left; its MCP server reaches the agent's tools
// through the relay of its tool socket (a send_message that reaches
// USER); the relay ends with the turn; the CLI's files never land in
// the workspace root here.
func TestK8sExecutorCLI(t *testing.T) {
	kubeconfig, ns, core := k8sCluster(t)
	inPod := t.TempDir()
	api := fakeapi.NewClaude(k8sClaudeReply)
	t.Cleanup(api.Close)
	d := k8sDaemon(t, kubeconfig, inPod, claudeEnv(claudeCLI(t), api.URL)...)
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab", Network: true}, nil)
	var a wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "far", Provider: "claude", Workspace: "lab",
		Executor: "k8s://" + k8stest.Context + "/" + ns}, &a)
	agentVolume(t, core, ns, a.ID)

	if res := d.send("far", "remember MANGO"); !strings.HasPrefix(res.Text, "sent: ") {
		t.Fatalf("the first turn said %q", res.Text)
	}
	if got := d.waitInbox("MANGO noted from the pod", time.Minute); got != "MANGO noted from the pod" {
		t.Errorf("USER got %q", got)
	}
	// The CLI ran in the pod: its HOME is there, and its transcript
	// came back here.
	own := filepath.Join(inPod, k8s.OwnDir)
	var transcripts []string
	filepath.WalkDir(own, func(p string, de os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".jsonl") {
			transcripts = append(transcripts, p)
		}
		return nil
	})
	if len(transcripts) == 0 {
		t.Fatalf("no session transcript in the pod's %s", own)
	}
	rel, _ := filepath.Rel(own, transcripts[0])
	if _, err := os.Stat(filepath.Join(d.home, rel)); err != nil {
		t.Errorf("the transcript did not come back: %v", err)
	}
	root := fsstore.Layout{Home: d.home}.WorkspaceRoot("USER", "lab")
	if _, err := os.Lstat(filepath.Join(root, k8s.OwnDir)); !os.IsNotExist(err) {
		out, _ := exec.Command("find", filepath.Join(root, k8s.OwnDir)).CombinedOutput()
		t.Errorf("%s landed in the workspace root here: %v\n%s", k8s.OwnDir, err, out)
	}
	if ps := relayProcs(a.ID); len(ps) > 0 {
		t.Errorf("the relay outlived the turn: %v", ps)
	}
	if _, err := os.Lstat("/tmp/substrat-tool-" + a.ID + ".sock"); !os.IsNotExist(err) {
		t.Errorf("the pod's tool socket outlived the turn: %v", err)
	}

	// The second turn resumes the session from the HOME that came back
	// and went again (its copy in the pod removed meanwhile: only what
	// came back here can carry it).
	os.RemoveAll(own)
	if res := d.send("far", "what did I say?"); res.Text != "you said MANGO" {
		t.Errorf("the second turn in the pod said %q", res.Text)
	}

	// The attack, with the CLI's own shell in the pod: a symlink out of
	// its HOME, one out through another (to another agent's HOME), its
	// read-only MCP config overwritten, a file planted in another
	// agent's HOME's place and in the store's, and one plain file. Only
	// the plain file comes back (and the link inside).
	other := fsstore.NewID()
	cliHome := filepath.Join(d.home, rel[:strings.Index(rel, "/homes/"+a.ID)+len("/homes/"+a.ID)])
	homeRel, _ := filepath.Rel(d.home, cliHome)
	mcpRel := filepath.Join("agents", a.ID, "mcp.json")
	mcpBefore, err := os.ReadFile(filepath.Join(d.home, mcpRel))
	if err != nil {
		t.Fatal(err)
	}
	attack := strings.Join([]string{
		`ln -s /etc/passwd "$HOME/leak"`,
		`printf pwned > "$PWD/` + k8s.OwnDir + "/" + mcpRel + `"`,
		`mkdir -p "$PWD/` + k8s.OwnDir + `/` + filepath.Dir(homeRel) + `/` + other + `"`,
		`printf x > "$PWD/` + k8s.OwnDir + `/` + filepath.Dir(homeRel) + `/` + other + `/planted"`,
		`printf x > "$PWD/` + k8s.OwnDir + `/agents/` + a.ID + `/planted"`,
		`printf data > "$HOME/fine.txt"`,
		// Inside as written, out through the other link (CVE-2024-12088).
		`ln -s . "$HOME/s"`,
		`ln -s s/s/s/../../../` + other + ` "$HOME/other"`,
	}, " && ")
	if res := d.send("far", "ATTACK "+attack); !strings.HasPrefix(res.Text, "sent: ") {
		t.Fatalf("the attack turn said %q", res.Text)
	}
	if b, err := os.ReadFile(filepath.Join(cliHome, "fine.txt")); err != nil || string(b) != "data" {
		t.Fatalf("the plain file of the CLI's HOME: %q, %v (did the attack run in the pod? %v)", b, err, api.Requests()[len(api.Requests())-1].Last().Blocks())
	}
	for _, l := range []string{"leak", "other"} {
		if fi, err := os.Lstat(filepath.Join(cliHome, l)); !os.IsNotExist(err) {
			t.Errorf("the symlink out %s came back: %v, %v", l, fi, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(d.home, mcpRel)); string(b) != string(mcpBefore) {
		t.Errorf("the MCP config here became %q", b)
	}
	for _, p := range []string{filepath.Join(filepath.Dir(cliHome), other), filepath.Join(d.home, "agents", a.ID, "planted")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s was planted here: %v", p, err)
		}
	}
}

// TestK8sExecutorCodexGemini: the real Codex and Gemini CLIs run turns
// in their pods (kwok), each resuming, at its second turn, the session
// its HOME carried back from the first and into the pod again.
func TestK8sExecutorCodexGemini(t *testing.T) {
	kubeconfig, ns, core := k8sCluster(t)
	inPod := t.TempDir()
	d := k8sDaemon(t, kubeconfig, inPod, codexGeminiEnv(t, rememberReply)...)
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "box", Network: true}, nil)
	for _, p := range []string{"codex", "gemini"} {
		var a wire.AgentInfo
		mustCall(d, wire.AgentCreate, wire.CreateParams{Name: p, Provider: p, Model: "fake-model", Workspace: "box",
			Executor: "k8s://" + k8stest.Context + "/" + ns}, &a)
		agentVolume(t, core, ns, a.ID)
		if res := d.send(p, "remember MANGO"); res.Text != "noted" {
			t.Fatalf("%s: first turn %q", p, res.Text)
		}
		// Its HOME went into the pod.
		found := false
		filepath.WalkDir(filepath.Join(inPod, k8s.OwnDir), func(q string, de os.DirEntry, err error) error {
			found = found || (err == nil && de.IsDir() && de.Name() == a.ID)
			return nil
		})
		if !found {
			t.Errorf("%s: no HOME of its own in the pod", p)
		}
		if res := d.send(p, "what did I say?"); res.Text != "you said MANGO" {
			t.Errorf("%s: the second turn in the pod %q", p, res.Text)
		}
		if ps := relayProcs(a.ID); len(ps) > 0 {
			t.Errorf("%s: the relay outlived the turn: %v", p, ps)
		}
	}
}
