package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/internal/k8stest"
	wire "github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/daemon"
)

// k8sGitModel is a script-provider model program (k8s-git-model in
// TestMain) for an agent in a git workspace on a Kubernetes executor,
// working in the pod's workspace (on kwok, a directory of the test). The
// last line of its prompt that is one of these says what to do:
//
//	commit NAME TEXT  write TEXT to NAME and commit it; say the log and
//	                  what origin's main is
//	attack DIR        commit attack.txt, then plant in the clone's git
//	                  directory what would run code here (touching files
//	                  in DIR): a hook, core.fsmonitor, core.hooksPath, a
//	                  filter, alternates and commondir elsewhere, symlinks
//	                  out
//	cat NAME          say what NAME holds
//	lose NAME TEXT R  unless R exists: write TEXT to NAME, then R.started,
//	                  and wait for R (outside the workspace)
func k8sGitModel() int {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	var turn struct {
		Prompt string `json:"prompt"`
	}
	if !in.Scan() || json.Unmarshal(in.Bytes(), &turn) != nil {
		return 1
	}
	var words []string
	for _, l := range strings.Split(turn.Prompt, "\n") {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == "commit" || f[0] == "attack" || f[0] == "cat" || f[0] == "lose") {
			words = f
		}
	}
	out := json.NewEncoder(os.Stdout)
	done := func(text string) int {
		out.Encode(map[string]any{"type": "done", "text": text})
		return 0
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sh := func(script string, args ...string) (string, error) {
		b, err := exec.Command("/bin/sh", append([]string{"-c", script, "sh"}, args...)...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s: %v: %s", script, err, b)
		}
		return strings.TrimSpace(string(b)), nil
	}
	switch {
	case len(words) >= 3 && words[0] == "commit":
		o, err := sh(`printf %s "$2" > "$1" && git add -- "$1" && git commit -qm "far: $1" && git log --format=%s | tr '\n' ' ' &&
			git ls-remote origin refs/heads/main | cut -c1-7`, words[1], strings.Join(words[2:], " "))
		if err != nil {
			return fail(err)
		}
		return done("committed: " + o)
	case len(words) == 2 && words[0] == "attack":
		d := words[1]
		if _, err := sh(`echo attack > attack.txt && git add attack.txt && git commit -qm "far: attack.txt"`); err != nil {
			return fail(err)
		}
		_, err := sh(`set -e; d=$1
printf '#!/bin/sh\ntouch %s/hook-ran\n' "$d" > .git/hooks/post-commit; chmod +x .git/hooks/post-commit
cp .git/hooks/post-commit .git/hooks/post-checkout
printf '[core]\n\tfsmonitor = touch %s/fsmonitor-ran\n\thooksPath = %s\n[filter "evil"]\n\tclean = touch %s/filter-ran\n' "$d" "$d" "$d" > .git/config
echo '* filter=evil' > .git/info/attributes
echo /etc > .git/objects/info/alternates
echo /etc > .git/commondir
ln -s /etc .git/refs/etc
ln -s /etc/passwd .git/description.lnk
mkdir -p sub && echo "gitdir: /etc" > sub/.git`, d)
		if err != nil {
			return fail(err)
		}
		return done("planted")
	case len(words) == 2 && words[0] == "cat":
		b, err := os.ReadFile(words[1])
		if err != nil {
			return fail(err)
		}
		return done(string(b))
	case len(words) == 4 && words[0] == "lose":
		if _, err := os.Stat(words[3]); err == nil {
			return done("released")
		}
		if err := os.WriteFile(words[1], []byte(words[2]), 0o644); err != nil {
			return fail(err)
		}
		if err := os.WriteFile(words[3]+".started", nil, 0o644); err != nil {
			return fail(err)
		}
		for {
			if _, err := os.Stat(words[3]); err == nil {
				return done("released")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return done("say what to do")
}

// gitRepo makes a repository with one commit on main.
func gitRepo(t *testing.T) string {
	t.Helper()
	repo := filepath.Join(t.TempDir(), "repo")
	os.Mkdir(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "README"), []byte("hello\n"), 0o644)
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "."}, {"commit", "-qm", "init"}} {
		if out, err := exec.Command("git", append([]string{"-C", repo, "-c", "user.email=t@example.com", "-c", "user.name=t"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	return repo
}

// TestK8sExecutorGit: an agent in a git workspace on a Kubernetes
// executor commits in its pod, with the real git: its clone's git
// directory is there at .git, the repository's .git as a copy that its
// alternates and origin name, a read-only link at its place; the commit
// comes back and is published to the repository's branch. What the agent
// plants in the clone's git directory there (a hook, core.fsmonitor,
// core.hooksPath, a filter, alternates and commondir elsewhere, symlinks
// out, a .git file) does not come back, and the daemon's git here runs
// none of it; a read-write link, and a read-only one outside /workspace,
// are refused with what to do.
func TestK8sExecutorGit(t *testing.T) {
	kubeconfig, ns, core := k8sCluster(t)
	inPod := t.TempDir()
	d := k8sDaemon(t, kubeconfig, inPod)
	model := lookPath(t, "k8s-git-model")
	repo := gitRepo(t)
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "team", Git: repo, Branch: "team", Network: true}, nil)
	data := t.TempDir()
	os.WriteFile(filepath.Join(data, "facts.txt"), []byte("linked facts"), 0o644)
	mustCall(d, wire.WorkspaceLink, wire.LinkParams{Workspace: "team", Source: data, Target: "/workspace/data", Mode: "ro"}, nil)
	var a wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "far", Model: model, Workspace: "team",
		Executor: "k8s://" + k8stest.Context + "/" + ns}, &a)
	agentVolume(t, core, ns, a.ID)
	res := d.send("far", "commit work.txt from the pod")
	if !strings.HasPrefix(res.Text, "committed: far: work.txt init ") {
		t.Fatalf("the turn said %q", res.Text)
	}
	published := func(want string) {
		t.Helper()
		waitUntil(t, "branch team to hold "+want, func() bool {
			log, _ := exec.Command("git", "-C", repo, "log", "--format=%s", "team").Output()
			return strings.Contains(string(log), want)
		})
	}
	published("far: work.txt")
	t0 := time.Now()
	if res := d.send("far", "cat data/facts.txt"); res.Text != "linked facts" {
		t.Errorf("the read-only link in the pod: %q", res.Text)
	}
	catTurn := time.Since(t0)
	layout := fsstore.Layout{Home: d.home}
	gitDir, root := layout.WorkspaceGitDir("USER", "team"), layout.WorkspaceRoot("USER", "team")
	if b, _ := os.ReadFile(filepath.Join(root, "work.txt")); string(b) != "from the pod" {
		t.Errorf("work.txt here: %q", b)
	}
	config, _ := os.ReadFile(filepath.Join(gitDir, "config"))
	alternates, _ := os.ReadFile(filepath.Join(gitDir, "objects/info/alternates"))

	// The attack.
	marks := t.TempDir()
	if res := d.send("far", "attack "+marks); res.Text != "planted" {
		t.Fatalf("the attack turn said %q", res.Text)
	}
	published("far: attack.txt")
	if now, _ := os.ReadFile(filepath.Join(gitDir, "config")); string(now) != string(config) {
		t.Errorf("the clone's config changed:\n%s", now)
	}
	if now, _ := os.ReadFile(filepath.Join(gitDir, "objects/info/alternates")); string(now) != string(alternates) {
		t.Errorf("the clone's alternates changed: %q", now)
	}
	for _, bad := range []string{"hooks/post-commit", "hooks/post-checkout", "info/attributes", "commondir", "refs/etc", "description.lnk", ".substrat-origin"} {
		if _, err := os.Lstat(filepath.Join(gitDir, bad)); !os.IsNotExist(err) {
			t.Errorf("%s came back into the clone's git directory: %v", bad, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "sub/.git")); !os.IsNotExist(err) {
		t.Errorf("sub/.git came back: %v", err)
	}
	// The daemon's git on the clone (the publish above, a diff, the next
	// turn's) ran none of it; the next turn in the pod works.
	var diff wire.WorkspaceDiffResult
	mustCall(d, wire.WorkspaceDiff, wire.WorkspaceDiffParams{Ref: "team", Stat: true}, &diff)
	if !strings.Contains(diff.Diff, "attack.txt") {
		t.Errorf("workspace diff: %s", diff.Diff)
	}
	t0 = time.Now()
	if res := d.send("far", "commit after.txt after the attack"); !strings.HasPrefix(res.Text, "committed: far: after.txt far: attack.txt") {
		t.Errorf("the turn after the attack said %q", res.Text)
	}
	commitTurn := time.Since(t0)
	// The same turn here, in the local sandbox, to compare.
	needBwrap(t)
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "near", Model: model, Workspace: "team"}, nil)
	d.send("near", "cat data/facts.txt")
	t0 = time.Now()
	if res := d.send("near", "cat data/facts.txt"); res.Text != "linked facts" {
		t.Errorf("the read-only link here: %q", res.Text)
	}
	t.Logf("in a git workspace on kwok: a pod's turn that commits (and is published) %v, one that reads a file %v; the latter in the local sandbox %v",
		commitTurn.Round(time.Millisecond), catTurn.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	if ran, _ := os.ReadDir(marks); len(ran) > 0 {
		t.Errorf("planted code ran here: %v", ran)
	}

	// Links a pod cannot have: refused, saying why.
	rw := t.TempDir()
	mustCall(d, wire.WorkspaceLink, wire.LinkParams{Workspace: "team", Source: rw, Target: "/workspace/rw", Mode: "rw"}, nil)
	if failed := sendFailed(d, "far", "commit x.txt x"); !strings.Contains(failed, "links "+rw+" read-write: not on a Kubernetes executor") {
		t.Errorf("a read-write link: %q", failed)
	}
	mustCall(d, wire.WorkspaceUnlink, wire.UnlinkParams{Workspace: "team", Target: "/workspace/rw"}, nil)
	mustCall(d, wire.WorkspaceLink, wire.LinkParams{Workspace: "team", Source: rw, Target: "/opt/out", Mode: "ro"}, nil)
	if failed := sendFailed(d, "far", "commit y.txt y"); !strings.Contains(failed, "at /opt/out, outside /workspace") {
		t.Errorf("a read-only link outside /workspace: %q", failed)
	}
}

// TestK8sExecutorSalvage: what a turn wrote in its pod before the pod
// went (k8s.ErrPodGone) is not lost: the retry, in a new pod on the same
// claim, brings it back before its push; it replaces nothing newer here.
func TestK8sExecutorSalvage(t *testing.T) {
	kubeconfig, ns, core := k8sCluster(t)
	inPod := t.TempDir()
	d := k8sDaemon(t, kubeconfig, inPod)
	cfg := `{"version": 1, "retry": {"limit": 5, "window": "1m", "base": "200ms"}}`
	if err := os.WriteFile(filepath.Join(d.home, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d.kill()
	d.start()
	model := lookPath(t, "k8s-git-model")
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab", Network: true}, nil)
	root := fsstore.Layout{Home: d.home}.WorkspaceRoot("USER", "lab")
	os.WriteFile(filepath.Join(root, "mine.txt"), []byte("old"), 0o644)
	var a wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "far", Model: model, Workspace: "lab",
		Executor: "k8s://" + k8stest.Context + "/" + ns}, &a)
	agentVolume(t, core, ns, a.ID)
	release := filepath.Join(t.TempDir(), "release")
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "far", Text: "lose lost.txt precious " + release}, nil)
	waitFile(t, release+".started")
	// The agent's older copy of mine.txt in the pod, and a newer one here.
	past := time.Now().Add(-time.Hour)
	os.WriteFile(filepath.Join(inPod, "mine.txt"), []byte("the pod's, older"), 0o644)
	os.Chtimes(filepath.Join(inPod, "mine.txt"), past, past)
	os.WriteFile(filepath.Join(root, "mine.txt"), []byte("newer here"), 0o644)
	pods := agentPods(t, core, ns, a.ID)
	if len(pods) != 1 {
		t.Fatalf("%d pods", len(pods))
	}
	zero := int64(0)
	if err := core.Pods(ns).Delete(context.Background(), pods[0].Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the pod's deletion", func() bool {
		_, err := core.Pods(ns).Get(context.Background(), pods[0].Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d.waitFirstTurn("far")
	if b, err := os.ReadFile(filepath.Join(root, "lost.txt")); err != nil || string(b) != "precious" {
		t.Errorf("lost.txt was not salvaged: %q, %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "mine.txt")); string(b) != "newer here" {
		t.Errorf("mine.txt here: %q", b)
	}
	after := agentPods(t, core, ns, a.ID)
	if len(after) != 1 || after[0].Name == pods[0].Name {
		t.Fatalf("after the retry: %d pods", len(after))
	}

	// The daemon killed mid-turn: the turn run again after its restart
	// (which writes nothing more: its release is there) salvages first.
	release2 := filepath.Join(t.TempDir(), "release")
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "far", Text: "lose lost2.txt kept " + release2}, nil)
	waitFile(t, release2+".started")
	d.kill()
	if err := os.WriteFile(release2, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d.start()
	waitUntil(t, "lost2.txt salvaged after the restart", func() bool {
		b, _ := os.ReadFile(filepath.Join(root, "lost2.txt"))
		return string(b) == "kept"
	})
}

// sendFailed sends USER's message, waits for the turn that takes it, and
// returns why it failed ("" if it did not).
func sendFailed(d *e2eDaemon, ref, text string) string {
	d.t.Helper()
	var res wire.SendResult
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: ref, Text: text, Wait: true}, &res)
	return res.Failed
}

// TestK8sExecutorCleanRestart: a turn that ended cleanly, its copy
// back done, is remembered across a clean restart of the daemon: a file
// deleted here meanwhile, still in the claim's volume, does not come
// back with the first turn after the restart (no salvage: the volume
// was in sync).
func TestK8sExecutorCleanRestart(t *testing.T) {
	kubeconfig, ns, core := k8sCluster(t)
	inPod := t.TempDir()
	d := k8sDaemon(t, kubeconfig, inPod)
	model := lookPath(t, "k8s-model")
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab", Network: true}, nil)
	root := fsstore.Layout{Home: d.home}.WorkspaceRoot("USER", "lab")
	var a wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "far", Model: model, Workspace: "lab",
		Executor: "k8s://" + k8stest.Context + "/" + ns}, &a)
	agentVolume(t, core, ns, a.ID)
	if res := d.send("far", "write gone.txt from the pod"); !strings.HasPrefix(res.Text, "wrote gone.txt") {
		t.Fatalf("the turn said %q", res.Text)
	}
	stop := func() {
		t.Helper()
		mustCall(d, wire.DaemonStop, struct{}{}, nil)
		select {
		case <-d.done:
			d.cmd = nil
		case <-time.After(30 * time.Second):
			t.Fatal("the daemon did not stop")
		}
	}
	stop()
	if err := os.Remove(filepath.Join(root, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(inPod, "gone.txt")); err != nil {
		t.Fatalf("gone.txt is not in the volume: %v", err)
	}
	d.start()
	if res := d.send("far", "write next.txt after the restart"); !strings.HasPrefix(res.Text, "wrote next.txt") {
		t.Fatalf("the turn after the restart said %q", res.Text)
	}
	for _, dir := range []string{root, inPod} {
		if _, err := os.Lstat(filepath.Join(dir, "gone.txt")); !os.IsNotExist(err) {
			t.Errorf("gone.txt, deleted here, came back in %s: %v", dir, err)
		}
	}

	// A turn whose copy into the pod fails (a daemon restarted with a
	// wrong mount path) ran nothing there: the volume is still in sync,
	// and a file deleted here after it does not come back either.
	stop()
	env := d.env
	d.env = append(slices.Clone(env), daemon.K8sMountPathEnv+"=/nonexistent/workspace")
	d.start()
	var res wire.SendResult
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "far", Text: "write never.txt", Wait: true}, &res)
	if !strings.Contains(res.Failed, "no workspace at /nonexistent/workspace") {
		t.Fatalf("the turn with a wrong mount path: %+v", res)
	}
	stop()
	d.env = env
	if err := os.Remove(filepath.Join(root, "next.txt")); err != nil {
		t.Fatal(err)
	}
	d.start()
	if res := d.send("far", "write last.txt after the failed turn"); !strings.HasPrefix(res.Text, "wrote last.txt") {
		t.Fatalf("the turn after the failed one said %q", res.Text)
	}
	for _, dir := range []string{root, inPod} {
		if _, err := os.Lstat(filepath.Join(dir, "next.txt")); !os.IsNotExist(err) {
			t.Errorf("next.txt, deleted here after a failed copy, came back in %s: %v", dir, err)
		}
	}
}
