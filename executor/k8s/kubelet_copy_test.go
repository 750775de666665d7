package k8s

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/substrat/substrat/executor"
	"github.com/substrat/substrat/fsstore"
)

// TestRealKubeletTurn: a turn's copies and process on the node with a
// real kubelet and container (skipped where there is none): the
// workspace goes into the container's /workspace (a volume, written by
// the pod's user under a read-only root), a command there works on it
// and plants what must not come back, and Pull brings back only the
// work.
func TestRealKubeletTurn(t *testing.T) {
	e := kubeletExec(t)
	ctx := ctxT(t)
	a := Agent{ID: fsstore.NewID(), Incarnation: "1", Limits: fsstore.Limits{MemoryBytes: 64 << 20}}
	running(t, e, a)

	local := t.TempDir()
	os.WriteFile(filepath.Join(local, "input.txt"), []byte("from here"), 0o644)
	os.MkdirAll(filepath.Join(local, ".git"), 0o755)
	os.WriteFile(filepath.Join(local, ".git", "config"), []byte("[core]\n"), 0o644)
	t0 := time.Now()
	if err := e.Push(ctx, a.ID, a.Incarnation, local); err != nil {
		t.Fatal(err)
	}
	push := time.Since(t0)
	var out bytes.Buffer
	p, err := e.Start(ctx, &executor.Cmd{Agent: a.ID, Incarnation: a.Incarnation, Dir: "/workspace",
		Env: []string{"PATH=/usr/bin:/bin"}, Stdout: &out, Stderr: &out,
		Argv: []string{"/bin/sh", "-c", `set -e; id -u; cat input.txt; echo; [ ! -e .git ] && echo no-git;` +
			` echo work > out.txt; ln -s /etc etc; mkdir -p .git/hooks sub; echo evil > .git/hooks/post-checkout;` +
			` echo 'gitdir: /etc' > sub/.git`}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if want := "65532\nfrom here\nno-git\n"; out.String() != want {
		t.Errorf("in the container: %q, want %q", out.String(), want)
	}
	t0 = time.Now()
	if err := e.Pull(ctx, a.ID, a.Incarnation, local, ""); err != nil {
		t.Fatal(err)
	}
	t.Logf("on a real kubelet: push %v, pull %v", push.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	if b, err := os.ReadFile(filepath.Join(local, "out.txt")); err != nil || string(b) != "work\n" {
		t.Errorf("out.txt: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(local, ".git", "config")); err != nil || string(b) != "[core]\n" {
		t.Errorf(".git/config here: %q, %v", b, err)
	}
	for _, bad := range []string{"etc", ".git/hooks", "sub/.git"} {
		if _, err := os.Lstat(filepath.Join(local, bad)); !os.IsNotExist(err) {
			t.Errorf("%s came back: %v", bad, err)
		}
	}
}

// TestRealKubeletTrees: a git workspace's trees in a real container
// (skipped where there is none), as its user, through the image's tar:
// the clone's git directory at /workspace/.git with the pod's own
// alternates and config naming the repository's copy, the copy, a
// read-only link; what the process changes in the clone's config and
// hooks, the copy or the link does not come back, its new ref does.
func TestRealKubeletTrees(t *testing.T) {
	e := kubeletExec(t)
	root, gitDir, common := gitClone(t)
	ctx := ctxT(t)
	a := Agent{ID: fsstore.NewID(), Incarnation: "1", Limits: fsstore.Limits{MemoryBytes: 64 << 20}}
	running(t, e, a)
	link := t.TempDir()
	os.WriteFile(filepath.Join(link, "facts.txt"), []byte("facts"), 0o644)
	gt, err := GitTrees(gitDir, common, "/workspace")
	if err != nil {
		t.Fatal(err)
	}
	trees := append(append([]Tree{{Local: root, RW: true}}, gt...), Tree{Rel: "data", Local: link})
	config, _ := os.ReadFile(filepath.Join(gitDir, "config"))
	if err := e.PushTrees(ctx, a.ID, a.Incarnation, trees); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	p, err := e.Start(ctx, &executor.Cmd{Agent: a.ID, Incarnation: a.Incarnation, Dir: "/workspace",
		Env: []string{"PATH=/usr/bin:/bin"}, Stdout: &out, Stderr: &out,
		Argv: []string{"/bin/sh", "-c", `set -e; cat README .git/objects/info/alternates data/facts.txt; echo;` +
			` tr '\n' ' ' < .git/config | grep -o 'url "/workspace/.git/.substrat-origin"' ; cat .git/.substrat-origin/HEAD;` +
			` echo evil > .git/config; mkdir -p .git/hooks; echo evil > .git/hooks/post-commit; echo ref > .git/refs/heads/new;` +
			` echo evil > .git/.substrat-origin/HEAD; echo evil > data/facts.txt; echo work > out.txt`}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if want := "hello\n/workspace/.git/.substrat-origin/objects\nfacts\nurl \"/workspace/.git/.substrat-origin\"\nref: refs/heads/main\n"; out.String() != want {
		t.Errorf("in the container: %q, want %q", out.String(), want)
	}
	if err := e.PullTrees(ctx, a.ID, a.Incarnation, trees, ""); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(gitDir, "config")); !bytes.Equal(b, config) {
		t.Errorf("the clone's config here: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(gitDir, "refs/heads/new")); string(b) != "ref\n" {
		t.Errorf("the new ref here: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "out.txt")); string(b) != "work\n" {
		t.Errorf("out.txt here: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(link, "facts.txt")); string(b) != "facts" {
		t.Errorf("the link here: %q", b)
	}
	for _, bad := range []string{filepath.Join(gitDir, "hooks/post-commit"), filepath.Join(gitDir, ".substrat-origin"), filepath.Join(root, "data")} {
		if _, err := os.Lstat(bad); !os.IsNotExist(err) {
			t.Errorf("%s came back: %v", bad, err)
		}
	}
	// The next push keeps the unchanged read-only copies as they are
	// there (the repository's, as the process left it), sends the rest.
	os.WriteFile(filepath.Join(link, "facts.txt"), []byte("new facts"), 0o644)
	if err := e.PushTrees(ctx, a.ID, a.Incarnation, trees); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	p, err = e.Start(ctx, &executor.Cmd{Agent: a.ID, Incarnation: a.Incarnation, Dir: "/workspace",
		Env: []string{"PATH=/usr/bin:/bin"}, Stdout: &out, Stderr: &out,
		Argv: []string{"/bin/sh", "-c", `cat .git/.substrat-origin/HEAD; head -c 1 .git/config; echo; cat data/facts.txt; echo; echo *`}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if want := "evil\n[\nnew facts\nREADME data out.txt\n"; out.String() != want {
		t.Errorf("in the container after the second push: %q, want %q", out.String(), want)
	}
}

// TestRealKubeletLocked: in a real container, as the pod's user (not
// root: its permissions hold), what the agent locked in its workspace (a
// directory with no permission for its owner, a file it cannot read)
// neither keeps the workspace from coming back nor the next push from
// replacing it.
func TestRealKubeletLocked(t *testing.T) {
	e := kubeletExec(t)
	ctx := ctxT(t)
	a := Agent{ID: fsstore.NewID(), Incarnation: "1", Limits: fsstore.Limits{MemoryBytes: 64 << 20}}
	running(t, e, a)
	local := t.TempDir()
	os.WriteFile(filepath.Join(local, "a.txt"), []byte("A"), 0o644)
	if err := e.Push(ctx, a.ID, a.Incarnation, local); err != nil {
		t.Fatal(err)
	}
	sh := func(script string) { t.Helper(); containerSh(t, e, a, script) }
	sh("command -v chmod >/dev/null || { echo no chmod in the image; exit 1; }; mkdir -p locked/deep && echo x > locked/deep/f &&" +
		" echo y > unreadable && chmod 000 unreadable locked/deep locked && ! cat unreadable 2>/dev/null")
	if err := e.Pull(ctx, a.ID, a.Incarnation, local, ""); err != nil {
		t.Fatalf("the pull of a locked workspace: %v", err)
	}
	for name, want := range map[string]string{"locked/deep/f": "x\n", "unreadable": "y\n"} {
		if b, err := os.ReadFile(filepath.Join(local, name)); err != nil || string(b) != want {
			t.Errorf("%s here: %q, %v", name, b, err)
		}
	}
	sh("chmod 000 locked/deep locked")
	os.RemoveAll(filepath.Join(local, "locked"))
	if err := e.Push(ctx, a.ID, a.Incarnation, local); err != nil {
		t.Fatalf("the push over a locked workspace: %v", err)
	}
	sh("[ ! -e locked ] && [ -e a.txt ]")
}

// TestRealKubeletReap: a process that setsid took out of its exec's
// group outlives the exec in the pod, writing; Reap kills it, and the
// pod goes on (its PID 1, and the next exec).
func TestRealKubeletReap(t *testing.T) {
	e := kubeletExec(t)
	ctx := ctxT(t)
	a := Agent{ID: fsstore.NewID(), Incarnation: "1"}
	pod := running(t, e, a)
	sh := func(script string) string { t.Helper(); return containerSh(t, e, a, script) }
	size := func() string { return sh("wc -c < /workspace/escaped") }
	sh(`setsid /bin/sh -c 'while :; do echo x >> /workspace/escaped; sleep 0.05; done' </dev/null >/dev/null 2>&1 & sleep 0.3`)
	s1 := size()
	time.Sleep(300 * time.Millisecond)
	if s2 := size(); s1 == s2 {
		t.Fatalf("the escaped process does not run (the test would prove nothing): %s", s1)
	}
	if err := e.Reap(ctx, a.ID, a.Incarnation); err != nil {
		t.Fatal(err)
	}
	s1 = size()
	time.Sleep(300 * time.Millisecond)
	if s2 := size(); s1 != s2 {
		t.Errorf("the escaped process still writes after Reap: %s then %s", s1, s2)
	}
	p, err := e.core.Pods(e.target.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil || Classify(p, a.Incarnation).State != StateRunning {
		t.Errorf("the pod after Reap: %v, %v", err, p.Status.Phase)
	}
}

// TestReapNotHere: on kwok, whose exec runs on this machine (as root
// here), Reap kills nothing.
func TestReapNotHere(t *testing.T) {
	e := newExec(t, Options{Workspace: emptyDir})
	a := Agent{ID: fsstore.NewID(), Incarnation: "1"}
	running(t, e, a)
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Process.Kill()
	if err := e.Reap(ctxT(t), a.ID, a.Incarnation); err != nil {
		t.Fatal(err)
	}
	if err := sleeper.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("Reap on kwok killed a process of this machine: %v", err)
	}
}
