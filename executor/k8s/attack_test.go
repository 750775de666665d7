package k8s

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/substrat/substrat/fsstore"
)

// outOfTree returns the symlinks of dir that resolve out of it.
func outOfTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.Type()&os.ModeSymlink == 0 {
			return err
		}
		target, _ := os.Readlink(p)
		abs := filepath.Join(filepath.Dir(p), target)
		// Resolve every symlink of the target, as the kernel would.
		if real, err := filepath.EvalSymlinks(p); err == nil {
			abs = real
		}
		if rel, err := filepath.Rel(dir, abs); err != nil || !filepath.IsLocal(rel) && rel != "." {
			out = append(out, p+" -> "+target+" = "+abs)
		}
		return nil
	})
	return out
}

// TestPullLinkThroughLink: a symlink whose target is inside the tree as
// written, but goes out of it through another symlink of the pod's
// (s -> ., x -> s/s/s/../../..: rsync's CVE-2024-12088), does not come
// back, by a pull or a salvage.
func TestPullLinkThroughLink(t *testing.T) {
	inPod := t.TempDir()
	e := newExec(t, Options{Workspace: emptyDir, MountPath: inPod})
	a := Agent{ID: fsstore.NewID(), Incarnation: "1"}
	running(t, e, a)
	t.Cleanup(func() { os.Remove(tokenFile(a.ID)) })
	parent := t.TempDir()
	local := filepath.Join(parent, "deep", "er", "ws")
	writeFile(t, filepath.Join(local, "a.txt"), "a", 0o644)
	writeFile(t, filepath.Join(parent, "secret"), "outside", 0o644)
	if err := e.Push(ctxT(t), a.ID, a.Incarnation, local); err != nil {
		t.Fatal(err)
	}
	attack := `ln -s . s && ln -s s/s/s/../../.. x && mkdir -p d/e && ln -s ../.. d/e/up && ln -s d/e/up/../.. y`
	if out, err := inPodSh(t, e, a, attack); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(outOfTree(t, inPod)) != 2 {
		t.Fatalf("the attack's links do not point out of the pod's tree: %v", outOfTree(t, inPod))
	}
	if err := e.Pull(ctxT(t), a.ID, a.Incarnation, local, ""); err != nil {
		t.Fatal(err)
	}
	if bad := outOfTree(t, local); len(bad) > 0 {
		t.Errorf("symlinks out of the tree came back: %s", strings.Join(bad, "; "))
	}
	if b, err := os.ReadFile(filepath.Join(local, "x", "secret")); err == nil {
		t.Errorf("x here reads %q, out of the tree", b)
	}
	// Salvage: what is missing here comes.
	for _, n := range []string{"x", "y", "s", "d"} {
		os.RemoveAll(filepath.Join(local, n))
	}
	if err := e.SalvageTrees(ctxT(t), a.ID, a.Incarnation, []Tree{{Local: local, RW: true}}, ""); err != nil {
		t.Fatal(err)
	}
	if bad := outOfTree(t, local); len(bad) > 0 {
		t.Errorf("salvage: symlinks out of the tree came back: %s", strings.Join(bad, "; "))
	}
}

// TestLostFoundHere: a file or directory named lost+found here (the
// pod's copy back leaves out that name at any depth, as a volume's
// own) is not deleted here by the copy back.
func TestLostFoundHere(t *testing.T) {
	inPod := t.TempDir()
	e := newExec(t, Options{Workspace: emptyDir, MountPath: inPod})
	a := Agent{ID: fsstore.NewID(), Incarnation: "1"}
	running(t, e, a)
	t.Cleanup(func() { os.Remove(tokenFile(a.ID)) })
	local := t.TempDir()
	writeFile(t, filepath.Join(local, "notes", "lost+found"), "my list of lost things", 0o644)
	writeFile(t, filepath.Join(local, "lost+found", "x"), "x", 0o644)
	if err := e.Push(ctxT(t), a.ID, a.Incarnation, local); err != nil {
		t.Fatal(err)
	}
	if err := e.Pull(ctxT(t), a.ID, a.Incarnation, local, ""); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"notes/lost+found", "lost+found/x"} {
		if _, err := os.Lstat(filepath.Join(local, n)); err != nil {
			t.Errorf("%s here after a copy back: %v", n, err)
		}
	}
}

// TestIncrementalPlanted: what the agent plants in its copy that never
// comes back, and that a full push would delete (a .git at the top of
// a workspace that has none, a lost+found below it, a file under
// OwnDir but in no tree), does not outlive an incremental push either: a later turn would find it there, unseen
// here (a .git's config runs its core.fsmonitor at the next git status).
func TestIncrementalPlanted(t *testing.T) {
	inPod := t.TempDir()
	e := newExec(t, Options{Workspace: emptyDir, MountPath: inPod})
	a := Agent{ID: fsstore.NewID(), Incarnation: "1"}
	running(t, e, a)
	t.Cleanup(func() { os.Remove(tokenFile(a.ID)) })
	local, home := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(local, "a.txt"), "a", 0o644)
	writeFile(t, filepath.Join(home, "h.txt"), "h", 0o644)
	own := OwnDir + "/state/cli/homes/" + a.ID
	trees := []Tree{{Local: local, RW: true}, {Rel: own, Local: home, RW: true}}
	if err := e.PushTrees(ctxT(t), a.ID, a.Incarnation, trees); err != nil {
		t.Fatal(err)
	}
	attack := `mkdir -p .git sub/lost+found && printf '[core]\n\tfsmonitor = touch pwned\n' >.git/config && echo x >sub/lost+found/evil && echo b >b.txt` +
		` && echo x >` + OwnDir + `/planted && echo x >` + OwnDir + `/state/cli/planted && echo h2 >` + own + `/h2.txt`
	if out, err := inPodSh(t, e, a, attack); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := e.PullTrees(ctxT(t), a.ID, a.Incarnation, trees, ""); err != nil {
		t.Fatal(err)
	}
	if e.lastPush(a.ID) == nil {
		t.Fatal("no incremental push to attack")
	}
	if err := e.PushTrees(ctxT(t), a.ID, a.Incarnation, trees); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{".git", "sub/lost+found", OwnDir + "/planted", OwnDir + "/state/cli/planted"} {
		if _, err := os.Lstat(filepath.Join(inPod, n)); err == nil {
			t.Errorf("the planted %s outlived the push", n)
		}
	}
	for n, want := range map[string]string{own + "/h.txt": "h", own + "/h2.txt": "h2\n"} {
		if b, err := os.ReadFile(filepath.Join(inPod, n)); err != nil || string(b) != want {
			t.Errorf("%s in the pod: %q, %v", n, b, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(inPod, "b.txt")); err != nil || string(b) != "b\n" {
		t.Errorf("b.txt in the pod: %q, %v", b, err)
	}
}

// TestIsolationHostNetwork: an isolated agent's pod that Customize puts
// in the host's network (which no NetworkPolicy reaches) is refused,
// whatever the daemon checked of its own settings.
func TestIsolationHostNetwork(t *testing.T) {
	e := newExec(t, Options{Workspace: emptyDir, NetworkPolicies: true,
		Customize: func(p *corev1.Pod) { p.Spec.HostNetwork = true }})
	a := Agent{ID: fsstore.NewID(), Incarnation: "1", Busy: true, Isolated: true}
	if _, err := e.Ensure(ctxT(t), a); err == nil || !strings.Contains(err.Error(), "host's network") {
		t.Errorf("Ensure of an isolated agent in the host's network: %v", err)
	}
	if pods, err := e.pods(ctxT(t), a.ID, a.Incarnation); err != nil || len(pods) > 0 {
		t.Errorf("pods made: %d, %v", len(pods), err)
	}
	a.Isolated = false
	if _, err := e.Ensure(ctxT(t), a); err != nil {
		t.Errorf("Ensure of an agent with network in the host's network: %v", err)
	}
}
