package main

// The end-to-end tests of agents on an ssh executor at real work: a real
// CLI, a git workspace, a workspace shared by two agents, limits.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider/fakeapi"
	wire "github.com/substrat/substrat/supervisor/api"
)

// TestSSHExecutorClaude: the real Claude Code CLI, for an agent on an
// ssh executor, runs on the host in bwrap against the loopback fake
// API: its own HOME goes there and comes back (its transcript, so that
// the next turn resumes the conversation), and its MCP server reaches
// the agent tools through the tool socket forwarded over ssh: it spawns
// a child, which runs on the host too.
func TestSSHExecutorClaude(t *testing.T) {
	cli := claudeCLI(t)
	api := fakeapi.NewClaude(e2eReply)
	t.Cleanup(api.Close)
	d, s, places := sshDaemon(t, claudeEnv(cli, api.URL)...)
	layout := fsstore.Layout{Home: d.home}
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab", Network: true}, nil)
	var boss wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "boss", Provider: "claude", Workspace: "lab", Executor: "ssh://" + s.Host}, &boss)
	if res := d.send("boss", e2eRemember); res.Text != "Noted." {
		t.Fatalf("reply %q, want Noted.", res.Text)
	}
	reqs := api.Requests()
	raw, _ := json.Marshal(reqs[len(reqs)-1])
	if !strings.Contains(string(raw), "Primary working directory: /workspace") {
		t.Errorf("the CLI did not run in the sandbox's /workspace; its request: %s", raw)
	}
	// Its HOME on the host is the copy beside its place.
	if !strings.Contains(string(raw), filepath.Join(places, boss.ID)) && !strings.Contains(string(raw), filepath.Join(layout.ProviderDir("claude"), "homes", boss.ID)) {
		t.Logf("the request names neither HOME: %.400s", raw)
	}
	session := d.sessionID(boss.ID)
	transcript := filepath.Join(layout.ProviderDir("claude"), "homes", boss.ID, ".claude", "projects", "-workspace", session+".jsonl")
	if _, err := os.Stat(transcript); err != nil {
		t.Fatalf("the CLI's transcript did not come back: %v", err)
	}
	// The agent tools, through the socket forwarded to the host.
	if res := d.send("boss", "please SPAWN a helper"); !strings.Contains(res.Text, "spawn result:") {
		t.Fatalf("reply %q, want the spawn result", res.Text)
	}
	helper, ok := d.agents()["boss/helper"]
	if !ok || helper.Executor != "ssh://"+s.Host {
		t.Fatalf("the child: %+v", helper)
	}
	d.waitFirstTurn("boss/helper")
	if _, err := os.Stat(filepath.Join(places, helper.ID, "extra", strings.TrimPrefix(layout.ProviderDir("claude"), d.home+"/"), "homes", helper.ID)); err != nil {
		t.Errorf("the child did not run on the host: %v", err)
	}
	// The next turn resumes the conversation from the transcript that
	// came back and went there again.
	if res := d.send("boss", e2eAsk); res.Text != "The word was "+e2eSecret+"." {
		t.Fatalf("reply %q: the conversation was not resumed", res.Text)
	}
	for _, id := range []string{boss.ID, helper.ID} {
		if ps := markerProcs(id); len(ps) > 0 {
			t.Errorf("left on the host: %v", ps)
		}
	}
	// An agent that leaves the tree leaves nothing of its own there.
	mustCall(d, wire.AgentTerminate, wire.TerminateParams{Ref: "boss/helper"}, nil)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Lstat(filepath.Join(places, helper.ID)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the terminated child's copy is still on the host")
		}
	}
	if _, err := os.Stat(filepath.Join(places, boss.ID)); err != nil {
		t.Errorf("the boss's copy went too: %v", err)
	}
}

// TestSSHExecutorCodexGemini: the real Codex and Gemini CLIs, for agents
// on an ssh executor, run on the host in bwrap against the loopback
// fakes: a turn, and a second that resumes the CLI's session from its
// HOME, which came back from the host and went there again.
func TestSSHExecutorCodexGemini(t *testing.T) {
	d, s, places := sshDaemon(t, codexGeminiEnv(t, rememberReply)...)
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "box", Network: true}, nil)
	for _, p := range []string{"codex", "gemini"} {
		var a wire.AgentInfo
		mustCall(d, wire.AgentCreate, wire.CreateParams{Name: p, Provider: p, Model: "fake-model", Workspace: "box", Executor: "ssh://" + s.Host}, &a)
		if res := d.send(p, "remember MANGO"); res.Text != "noted" {
			t.Fatalf("%s: first turn %q", p, res.Text)
		}
		// Its own HOME went to the host, beside its place.
		if _, err := os.Stat(filepath.Join(places, a.ID, "extra")); err != nil {
			t.Errorf("%s did not run on the host: %v", p, err)
		}
		if res := d.send(p, "what did I say?"); res.Text != "you said MANGO" {
			t.Errorf("%s: the second turn on the host %q", p, res.Text)
		}
		if ps := markerProcs(a.ID); len(ps) > 0 {
			t.Errorf("%s left on the host: %v", p, ps)
		}
	}
	// A person's agent shell runs here, on this machine's copy of the
	// agent's files: the session the host's turns left, which came back.
	cmd := exec.Command("substrat", "--home", d.home, "agent", "shell", "gemini", "--", "-p", "what did I say?")
	cmd.Env = d.env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), "you said MANGO") {
		t.Errorf("agent shell of the agent on the host: %q, %v\n%s", out, err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "gemini runs its turns on ssh://"+s.Host+"; this shell runs here") {
		t.Errorf("agent shell did not say where it runs: %s", stderr.String())
	}
}

// TestSSHExecutorGit: an agent on an ssh executor in a git workspace
// commits on the host; its clone's git directory goes there beside the
// place (its config, hooks and info read-only in the sandbox, and never
// brought back), the repository's .git as a read-only copy, and the
// commit comes back and is published to the repository's branch. What
// a compromised host writes into the clone's hooks and config there
// stays there.
func TestSSHExecutorGit(t *testing.T) {
	d, s, places := sshDaemon(t)
	model := lookPath(t, "remote-model")
	repo := filepath.Join(t.TempDir(), "repo")
	os.Mkdir(repo, 0o755)
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "."}, {"commit", "-qm", "init"}} {
		if args[0] == "add" {
			os.WriteFile(filepath.Join(repo, "README"), []byte("hello\n"), 0o644)
		}
		if out, err := exec.Command("git", append([]string{"-C", repo, "-c", "user.email=t@example.com", "-c", "user.name=t"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "team", Git: repo, Branch: "team"}, nil)
	var a wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "far", Model: model, Workspace: "team", Executor: "ssh://" + s.Host}, &a)
	if res := d.send("far", "commit work.txt from the host"); res.Text != "committed far: work.txt" {
		t.Fatalf("the turn said %q", res.Text)
	}
	published := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			log, _ := exec.Command("git", "-C", repo, "log", "--format=%s", "team").Output()
			if strings.Contains(string(log), want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("branch team of the repository lacks %q:\n%s", want, log)
			}
		}
	}
	published("far: work.txt")
	// The host, compromised, plants a hook and config in its copy of
	// the clone's git directory; they do not come back.
	layout := fsstore.Layout{Home: d.home}
	gitDir, root := layout.WorkspaceGitDir("USER", "team"), layout.WorkspaceRoot("USER", "team")
	remoteGit := wsCopy(places, root, "extra", strings.TrimPrefix(gitDir, d.home+"/"))
	if _, err := os.Stat(filepath.Join(remoteGit, "HEAD")); err != nil {
		t.Fatalf("the clone's git directory is not on the host: %v", err)
	}
	config, _ := os.ReadFile(filepath.Join(gitDir, "config"))
	marks := t.TempDir()
	// Mid-turn, after the push and before the pull.
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "far", Text: "commitwait more.txt again"}, nil)
	waitFile(t, wsCopy(places, root, "place", "more.txt"))
	if err := os.WriteFile(filepath.Join(remoteGit, "hooks", "post-commit"), []byte("#!/bin/sh\ntouch "+marks+"/hook-ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(remoteGit, "config"), []byte("[core]\n\tfsmonitor = touch "+marks+"/fsmonitor-ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(wsCopy(places, root, "place", "release"), nil, 0o644)
	published("far: more.txt")
	if _, err := os.Lstat(filepath.Join(gitDir, "hooks", "post-commit")); !os.IsNotExist(err) {
		t.Errorf("the planted hook came back: %v", err)
	}
	if now, _ := os.ReadFile(filepath.Join(gitDir, "config")); string(now) != string(config) {
		t.Errorf("the clone's config changed:\n%s", now)
	}
	// The daemon's git on the clone (the publish, a diff) ran none of it.
	var diff wire.WorkspaceDiffResult
	mustCall(d, wire.WorkspaceDiff, wire.WorkspaceDiffParams{Ref: "team", Stat: true}, &diff)
	if !strings.Contains(diff.Diff, "more.txt") {
		t.Errorf("workspace diff: %s", diff.Diff)
	}
	if ran, _ := os.ReadDir(marks); len(ran) > 0 {
		t.Errorf("planted code ran here: %v", ran)
	}
}

// TestSSHExecutorShared: two agents in one workspace on the host share
// its copy there, as they share the root here: what one writes while the
// other works is not undone when either's process ends, and both come
// back.
func TestSSHExecutorShared(t *testing.T) {
	d, s, places := sshDaemon(t)
	model := lookPath(t, "remote-model")
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab"}, nil)
	root := fsstore.Layout{Home: d.home}.WorkspaceRoot("USER", "lab")
	for _, name := range []string{"one", "two"} {
		mustCall(d, wire.AgentCreate, wire.CreateParams{Name: name, Model: model, Workspace: "lab", Executor: "ssh://" + s.Host}, nil)
	}
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "one", Text: "writewait a.txt from one"}, nil)
	waitFile(t, wsCopy(places, root, "place", "a.txt"))
	if res := d.send("two", "write b.txt from two"); !strings.HasPrefix(res.Text, "wrote b.txt") {
		t.Fatalf("two's turn: %q", res.Text)
	}
	if b, err := os.ReadFile(wsCopy(places, root, "place", "b.txt")); err != nil || string(b) != "from two" {
		t.Fatalf("one does not see two's file there: %q, %v", b, err)
	}
	os.WriteFile(wsCopy(places, root, "place", "release"), nil, 0o644)
	waitFile(t, filepath.Join(root, "a.txt"))
	d.waitFirstTurn("one")
	for name, want := range map[string]string{"a.txt": "from one", "b.txt": "from two"} {
		if b, err := os.ReadFile(filepath.Join(root, name)); err != nil || string(b) != want {
			t.Errorf("%s here: %q, %v", name, b, err)
		}
	}
}

// TestSSHExecutorLimits: an agent's memory limit holds on the host, as
// an rlimit: a model that allocates 1 GiB under 256M fails there, and
// one that does not runs under the same limit.
func TestSSHExecutorLimits(t *testing.T) {
	d, s, _ := sshDaemon(t)
	// The models are shell scripts, not this test binary: built with
	// -race, it cannot start under a data-segment limit (ThreadSanitizer
	// maps its shadow memory first).
	dir := t.TempDir()
	hog, model := filepath.Join(dir, "hog-model"), filepath.Join(dir, "calm-model")
	scripts := map[string]string{
		// Holds 300 MiB, past its limit, then says done.
		hog: `read -r turn; head -c 314572800 /dev/zero | tail -c 314572800 >/dev/null || exit 1; echo '{"type":"done","text":"survived"}'`,
		// Says its data-segment limit.
		model: `read -r turn; echo "{\"type\":\"done\",\"text\":\"$(awk '/^Max data size/ {print $1, $2, $3, $4, $5, $6}' /proc/self/limits)\"}"`,
	}
	for path, body := range scripts {
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab"}, nil)
	mem := &fsstore.Limits{MemoryBytes: 256 << 20}
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "hog", Model: hog, Workspace: "lab", Executor: "ssh://" + s.Host, Limits: mem}, nil)
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "calm", Model: model, Workspace: "lab", Executor: "ssh://" + s.Host, Limits: mem}, nil)
	var res wire.SendResult
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "hog", Text: "go", Wait: true}, &res)
	if res.Failed == "" {
		t.Fatalf("the hog's turn did not fail: %q", res.Text)
	}
	t.Logf("hog: %.200s", res.Failed)
	if r := d.send("calm", "limits"); r.Text != "Max data size 268435456 268435456 bytes" {
		t.Fatalf("calm's limit: %q", r.Text)
	}
}

// scriptedCalls plays a model that makes the tool calls steps, one per
// turn of the conversation, and then says the tools' results, one per
// line.
func scriptedCalls(steps ...fakeapi.Call) func(fakeapi.OpenAIRequest) fakeapi.OpenAIOut {
	return func(req fakeapi.OpenAIRequest) fakeapi.OpenAIOut {
		var results []string
		for _, m := range req.Messages {
			if m.Role == "tool" {
				results = append(results, m.Text())
			}
		}
		if len(results) < len(steps) {
			c := steps[len(results)]
			c.ID = fmt.Sprintf("call_%d", len(results))
			return fakeapi.OpenAIOut{Calls: []fakeapi.Call{c}}
		}
		return fakeapi.OpenAIOut{Text: strings.Join(results, "\n---\n")}
	}
}

// TestSSHExecutorWorkTools: the daemon's work tools for an agent on an
// ssh executor (--provider openai, whose model has no tools of its own):
// its shell runs on the host, in its sandbox there, in the workspace's
// copy, with its working directory kept between calls, and what it wrote
// comes back; the file tools work here on the root, which the next
// shell's copy carries there.
func TestSSHExecutorWorkTools(t *testing.T) {
	api := fakeapi.NewOpenAI(scriptedCalls(
		fakeapi.Call{Name: "shell", Args: `{"command":"mkdir sub && cd sub && echo remote > made.txt && grep ' /workspace ' /proc/self/mountinfo | cut -d' ' -f4"}`},
		fakeapi.Call{Name: "write_file", Args: `{"path":"sub/local.txt","content":"written here"}`},
		fakeapi.Call{Name: "shell", Args: `{"command":"pwd; cat local.txt; exit 3"}`},
		fakeapi.Call{Name: "read_file", Args: `{"path":"sub/made.txt"}`},
	))
	t.Cleanup(api.Close)
	d, s, places := sshDaemon(t, "OPENAI_BASE_URL="+api.URL, "OPENAI_API_KEY=sk-fake", "OPENAI_MODEL=fake-model")
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab"}, nil)
	root := fsstore.Layout{Home: d.home}.WorkspaceRoot("USER", "lab")
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "far", Provider: "openai", Workspace: "lab", Executor: "ssh://" + s.Host}, nil)
	res := d.send("far", "go")
	out := strings.Split(res.Text, "\n---\n")
	if len(out) != 4 {
		t.Fatalf("the turn said %q", res.Text)
	}
	place := wsCopy(places, root, "place")
	if want := place + "\n[exit status 0]"; out[0] != want {
		t.Errorf("the first shell said %q, want %q (run in the copy on the host)", out[0], want)
	}
	if want := "/workspace/sub\nwritten here\n[exit status 3]"; out[2] != want {
		t.Errorf("the second shell said %q, want %q (in the directory the first left, with the file written here)", out[2], want)
	}
	if !strings.Contains(out[3], "remote") {
		t.Errorf("read_file of what the shell wrote there: %q", out[3])
	}
	if b, err := os.ReadFile(filepath.Join(root, "sub", "made.txt")); err != nil || string(b) != "remote\n" {
		t.Errorf("made.txt here: %q, %v", b, err)
	}
}

// TestSSHExecutorWorkToolsInUse: while another agent's process uses the
// workspace's copy on the host, the file tools refuse (what they wrote
// here would be replaced when the copy comes back), and the shell, which
// runs in that copy, sees the other's work.
func TestSSHExecutorWorkToolsInUse(t *testing.T) {
	api := fakeapi.NewOpenAI(scriptedCalls(
		fakeapi.Call{Name: "write_file", Args: `{"path":"b.txt","content":"lost"}`},
		fakeapi.Call{Name: "shell", Args: `{"command":"cat a.txt"}`},
	))
	t.Cleanup(api.Close)
	d, s, places := sshDaemon(t, "OPENAI_BASE_URL="+api.URL, "OPENAI_API_KEY=sk-fake", "OPENAI_MODEL=fake-model")
	model := lookPath(t, "remote-model")
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab"}, nil)
	root := fsstore.Layout{Home: d.home}.WorkspaceRoot("USER", "lab")
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "one", Model: model, Workspace: "lab", Executor: "ssh://" + s.Host}, nil)
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "two", Provider: "openai", Workspace: "lab", Executor: "ssh://" + s.Host}, nil)
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "one", Text: "writewait a.txt from one"}, nil)
	waitFile(t, wsCopy(places, root, "place", "a.txt"))
	res := d.send("two", "go")
	out := strings.Split(res.Text, "\n---\n")
	if len(out) != 2 || !strings.Contains(out[0], "in use on "+s.Host) || out[1] != "from one\n[exit status 0]" {
		t.Fatalf("two's tools said %q", res.Text)
	}
	if _, err := os.Lstat(filepath.Join(root, "b.txt")); !os.IsNotExist(err) {
		t.Fatalf("b.txt was written here: %v", err)
	}
	os.WriteFile(wsCopy(places, root, "place", "release"), nil, 0o644)
	waitFile(t, filepath.Join(root, "a.txt"))
}
