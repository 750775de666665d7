package k8s

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/executor"
	"github.com/substrat/substrat/fsstore"
)

// gitClone makes, as the daemon does (package workspace/gitws), a
// repository with one commit and a clone of it sharing its objects:
// the clone's work tree root, its git directory gitDir (beside it, with
// the daemon's config, empty hooks/ and info/) and the repository's
// common directory.
func gitClone(t *testing.T) (root, gitDir, common string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	repo, root, gitDir := filepath.Join(dir, "repo"), filepath.Join(dir, "root"), filepath.Join(dir, "git")
	git := func(env []string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Env = append(append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	os.Mkdir(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "README"), []byte("hello\n"), 0o644)
	git(nil, "-C", repo, "init", "-q", "-b", "main")
	git(nil, "-C", repo, "add", ".")
	git(nil, "-C", repo, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "init")
	common = filepath.Join(repo, ".git")
	git(nil, "clone", "--quiet", "--shared", "--no-checkout", "--template=", "--separate-git-dir="+gitDir, "--branch", "main", "--", common, root)
	config := "[core]\n\trepositoryformatversion = 0\n\tbare = false\n[remote \"origin\"]\n\turl = " + quote(common) +
		"\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[user]\n\tname = agent\n\temail = agent@substrat.invalid\n"
	os.WriteFile(filepath.Join(gitDir, "config"), []byte(config), 0o644)
	os.MkdirAll(filepath.Join(gitDir, "hooks"), 0o755)
	os.MkdirAll(filepath.Join(gitDir, "info"), 0o755)
	os.Remove(filepath.Join(root, ".git"))
	os.Mkdir(filepath.Join(root, ".git"), 0o755) // the inert .git's place
	git([]string{"GIT_DIR=" + gitDir, "GIT_WORK_TREE=" + root}, "checkout", "--quiet", "--force", "main", "--")
	return root, gitDir, common
}

// inPodSh runs script with /bin/sh in a's pod (on kwok, this machine),
// in the workspace, as the agent's process would run, and returns its
// output.
func inPodSh(t *testing.T, e *Executor, a Agent, script string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	p, err := e.Start(ctxT(t), &executor.Cmd{Agent: a.ID, Incarnation: a.Incarnation, Argv: []string{"/bin/sh", "-c", script},
		Env: []string{copyPath, "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1"}, Dir: e.MountPath(), Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	err = p.Wait()
	return out.String(), err
}

func writeFile(t *testing.T, p, text string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
}

// TestGitTreesInPod: a git workspace's clone works in the pod with the
// real git (its git directory at .git, the repository's copy that its
// alternates and origin name, a read-only link): the agent commits
// there, and the commit comes back; what the agent planted in the
// clone's hooks, config, info, alternates, in the repository's copy or
// a read-only link, a redirection (commondir) and symlinks out of the
// git directory do not, and nothing local of them is deleted.
func TestGitTreesInPod(t *testing.T) {
	root, gitDir, common := gitClone(t)
	inPod := t.TempDir()
	e := newExec(t, Options{Workspace: emptyDir, MountPath: inPod})
	a := Agent{ID: fsstore.NewID(), Incarnation: "1"}
	running(t, e, a)
	link := t.TempDir()
	writeFile(t, filepath.Join(link, "data.txt"), "linked", 0o644)
	os.MkdirAll(filepath.Join(root, "sub", "data"), 0o755) // the link's mount point
	linkFile := filepath.Join(t.TempDir(), "notes")
	writeFile(t, linkFile, "notes", 0o644)
	gt, err := GitTrees(gitDir, common, inPod)
	if err != nil {
		t.Fatal(err)
	}
	trees := append([]Tree{{Local: root, RW: true}}, gt...)
	trees = append(trees, Tree{Rel: "sub/data", Local: link}, Tree{Rel: "notes.txt", Local: linkFile})
	config, _ := os.ReadFile(filepath.Join(gitDir, "config"))
	alternates, _ := os.ReadFile(filepath.Join(gitDir, "objects/info/alternates"))
	t0 := time.Now()
	if err := e.PushTrees(ctxT(t), a.ID, a.Incarnation, trees); err != nil {
		t.Fatal(err)
	}
	push := time.Since(t0)
	out, err := inPodSh(t, e, a, `set -e
echo work > work.txt
mkdir -p `+OwnDir+`/state && echo own > `+OwnDir+`/state/f
git status --porcelain
git add work.txt && git commit -qm "agent: work"
git log --format=%s
git ls-remote origin refs/heads/main | cut -f2
cat sub/data/data.txt notes.txt`)
	if err != nil {
		t.Fatalf("git in the pod: %v\n%s", err, out)
	}
	for _, want := range []string{"?? work.txt\n", "agent: work\ninit\n", "refs/heads/main\n", "linkednotes"} {
		if !strings.Contains(out, want) {
			t.Errorf("git in the pod said:\n%s\nwithout %q", out, want)
		}
	}
	if strings.Contains(out, ".substrat-origin") || strings.Contains(out, OwnDir) || strings.Contains(out, "error") {
		t.Errorf("git in the pod said:\n%s", out)
	}

	// The attack, in the pod's copy.
	marks := t.TempDir()
	out, err = inPodSh(t, e, a, `set -e
printf '#!/bin/sh\ntouch `+marks+`/hook-ran\n' > .git/hooks/post-commit; chmod +x .git/hooks/post-commit
printf '[core]\n\tfsmonitor = touch `+marks+`/fsmonitor-ran\n\thooksPath = /tmp\n' > .git/config
echo '*.txt filter=evil' > .git/info/attributes
echo /etc > .git/objects/info/alternates
echo /etc > .git/commondir
echo 'gitdir: /etc' > .git/gitdir
ln -s /etc .git/refs/etc
ln -s /etc/passwd .git/packed-refs.lnk
mkdir -p .git/.substrat-origin/hooks && echo evil > .git/.substrat-origin/hooks/pre-receive
echo planted > sub/data/planted; echo changed > notes.txt
mkdir -p deep && echo 'gitdir: /etc' > deep/.git
echo refs > .git/refs/heads/agent-branch`)
	if err != nil {
		t.Fatalf("the attack: %v\n%s", err, out)
	}
	t0 = time.Now()
	if err := e.PullTrees(ctxT(t), a.ID, a.Incarnation, trees, ""); err != nil {
		t.Fatal(err)
	}
	t.Logf("a git workspace's trees: push %v, pull %v", push.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	if now, _ := os.ReadFile(filepath.Join(gitDir, "config")); !bytes.Equal(now, config) {
		t.Errorf("the clone's config changed here:\n%s", now)
	}
	if now, _ := os.ReadFile(filepath.Join(gitDir, "objects/info/alternates")); !bytes.Equal(now, alternates) || len(now) == 0 {
		t.Errorf("the clone's alternates here: %q, want %q", now, alternates)
	}
	for _, bad := range []string{"hooks/post-commit", "info/attributes", "commondir", "gitdir", "refs/etc", "packed-refs.lnk", ".substrat-origin"} {
		if _, err := os.Lstat(filepath.Join(gitDir, bad)); !os.IsNotExist(err) {
			t.Errorf("%s came back into the git directory: %v", bad, err)
		}
	}
	for _, bad := range []string{"sub/data/planted", "sub/data/data.txt", "deep/.git", "notes.txt"} {
		if _, err := os.Lstat(filepath.Join(root, bad)); !os.IsNotExist(err) {
			t.Errorf("%s came back into the root: %v", bad, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(link, "data.txt")); string(b) != "linked" {
		t.Errorf("the link's file here: %q", b)
	}
	if fi, err := os.Stat(filepath.Join(root, "sub", "data")); err != nil || !fi.IsDir() {
		t.Errorf("the link's mount point was deleted: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(gitDir, "refs/heads/agent-branch")); string(b) != "refs\n" {
		t.Errorf("the agent's ref did not come back: %q", b)
	}
	// The commit came back: git here (hardened) sees it, and ran none of
	// what was planted.
	cmd := exec.Command("git", "--git-dir="+gitDir, "--work-tree="+root, "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "log", "--format=%s", "main")
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	if b, err := cmd.CombinedOutput(); err != nil || string(b) != "agent: work\ninit\n" {
		t.Errorf("the clone here: %v\n%s", err, b)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "work.txt")); string(b) != "work\n" {
		t.Errorf("work.txt here: %q", b)
	}
	if ran, _ := os.ReadDir(marks); len(ran) > 0 {
		t.Errorf("planted code ran: %v", ran)
	}
}

// TestGitTreesRefused: a pod's .git swapped for a symlink (to the pod's
// /), or holding a file over the bound, brings nothing back, of the
// root either.
func TestGitTreesRefused(t *testing.T) {
	root, gitDir, common := gitClone(t)
	inPod := t.TempDir()
	e := newExec(t, Options{Workspace: emptyDir, MountPath: inPod})
	a := Agent{ID: fsstore.NewID(), Incarnation: "1"}
	running(t, e, a)
	gt, err := GitTrees(gitDir, common, inPod)
	if err != nil {
		t.Fatal(err)
	}
	trees := append([]Tree{{Local: root, RW: true}}, gt...)
	head, _ := os.ReadFile(filepath.Join(gitDir, "HEAD"))
	for _, attack := range []string{
		"echo new > new.txt; mv .git .git.old; ln -s / .git",
		"echo new > new.txt; echo 'gitdir: /etc' > .git.file; rm -rf .git; mv .git.file .git",
		"echo new > new.txt; echo x > .git/HEAD; head -c 2000000 /dev/zero > .git/objects/big",
	} {
		lower(t, &maxFileSize, 1<<20)
		if err := e.PushTrees(ctxT(t), a.ID, a.Incarnation, trees); err != nil {
			t.Fatal(err)
		}
		if out, err := inPodSh(t, e, a, attack); err != nil {
			t.Fatalf("%s: %v\n%s", attack, err, out)
		}
		err := e.PullTrees(ctxT(t), a.ID, a.Incarnation, trees, "")
		if err == nil {
			t.Errorf("%s: it came back", attack)
		}
		t.Logf("%s: %v", attack, err)
		if _, err := os.Lstat(filepath.Join(root, "new.txt")); !os.IsNotExist(err) {
			t.Errorf("%s: the root came back: %v", attack, err)
		}
		if b, _ := os.ReadFile(filepath.Join(gitDir, "HEAD")); !bytes.Equal(b, head) {
			t.Errorf("%s: HEAD here is %q", attack, b)
		}
		os.RemoveAll(filepath.Join(inPod, ".git"))
		os.RemoveAll(filepath.Join(inPod, ".git.old"))
	}
	// The bounds are over all the trees: each under, both over.
	lower(t, &maxTotalSize, 1500000) // (and files stay under 1 MiB)
	if err := e.PushTrees(ctxT(t), a.ID, a.Incarnation, trees); err != nil {
		t.Fatal(err)
	}
	attack := "echo new > new.txt; head -c 1000000 /dev/zero > half; head -c 1000000 /dev/zero > .git/half"
	if out, err := inPodSh(t, e, a, attack); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := e.PullTrees(ctxT(t), a.ID, a.Incarnation, trees, ""); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "more than 1500000 bytes") {
		t.Errorf("%s: %v", attack, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "new.txt")); !os.IsNotExist(err) {
		t.Errorf("%s: the root came back: %v", attack, err)
	}
}

// TestSalvage: what a lost turn left in the pod's workspace comes back
// before the next push, newer files only: nothing here is deleted, no
// newer file here is replaced by an older one, nothing of another kind
// (a symlink, a directory) replaces a file here, no symlink out comes,
// and the clone's config and hooks stay as they are.
func TestSalvage(t *testing.T) {
	root, gitDir, common := gitClone(t)
	inPod := t.TempDir()
	e := newExec(t, Options{Workspace: emptyDir, MountPath: inPod})
	a := Agent{ID: fsstore.NewID(), Incarnation: "1"}
	running(t, e, a)
	gt, err := GitTrees(gitDir, common, inPod)
	if err != nil {
		t.Fatal(err)
	}
	trees := append([]Tree{{Local: root, RW: true}}, gt...)
	// Nothing there yet: nothing to salvage, nothing changed.
	if err := e.SalvageTrees(ctxT(t), a.ID, a.Incarnation, trees, ""); err != nil {
		t.Fatalf("salvage of an empty workspace: %v", err)
	}
	if err := e.PushTrees(ctxT(t), a.ID, a.Incarnation, trees); err != nil {
		t.Fatal(err)
	}
	old, now := time.Now().Add(-time.Hour), time.Now()
	at := func(p string, tm time.Time) {
		t.Helper()
		if err := os.Chtimes(p, tm, tm); err != nil {
			t.Fatal(err)
		}
	}
	// The lost turn's work, and its attack, in the pod.
	writeFile(t, filepath.Join(inPod, "lost.txt"), "lost work", 0o644)
	writeFile(t, filepath.Join(inPod, "newer-there.txt"), "pod's", 0o644)
	writeFile(t, filepath.Join(inPod, "newer-here.txt"), "pod's old", 0o644)
	at(filepath.Join(inPod, "newer-here.txt"), old)
	writeFile(t, filepath.Join(inPod, "dir/inside.txt"), "in a new dir", 0o644)
	os.Symlink("/etc", filepath.Join(inPod, "etc"))
	os.Symlink("/etc/passwd", filepath.Join(inPod, "was-file"))
	os.Mkdir(filepath.Join(inPod, "was-file2"), 0o755)
	writeFile(t, filepath.Join(inPod, "was-file2/x"), "x", 0o644)
	writeFile(t, filepath.Join(inPod, ".git/hooks/post-checkout"), "#!/bin/sh\necho pwned\n", 0o755)
	writeFile(t, filepath.Join(inPod, ".git/config"), "[core]\n\tfsmonitor = evil\n", 0o644)
	writeFile(t, filepath.Join(inPod, ".git/refs/heads/lost"), "ref\n", 0o644)
	// Here meanwhile.
	writeFile(t, filepath.Join(root, "newer-there.txt"), "here's old", 0o644)
	at(filepath.Join(root, "newer-there.txt"), old)
	writeFile(t, filepath.Join(root, "newer-here.txt"), "here's new", 0o644)
	at(filepath.Join(root, "newer-here.txt"), now)
	writeFile(t, filepath.Join(root, "was-file"), "a file here", 0o644)
	writeFile(t, filepath.Join(root, "was-file2"), "a file here", 0o644)
	writeFile(t, filepath.Join(root, "only-here.txt"), "mine", 0o644)
	os.Mkdir(filepath.Join(root, "real"), 0o755)
	os.Symlink("real", filepath.Join(root, "via")) // a symlink here, a directory there
	writeFile(t, filepath.Join(inPod, "via/x.txt"), "through", 0o644)
	os.Symlink("README", filepath.Join(inPod, "in-link")) // inside: it comes
	config, _ := os.ReadFile(filepath.Join(gitDir, "config"))

	if err := e.SalvageTrees(ctxT(t), a.ID, a.Incarnation, trees, ""); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"lost.txt": "lost work", "newer-there.txt": "pod's", "newer-here.txt": "here's new",
		"dir/inside.txt": "in a new dir", "was-file": "a file here", "was-file2": "a file here", "only-here.txt": "mine", "README": "hello\n"} {
		if b, err := os.ReadFile(filepath.Join(root, name)); err != nil || string(b) != want {
			t.Errorf("%s here: %q, %v; want %q", name, b, err, want)
		}
	}
	if l, err := os.Readlink(filepath.Join(root, "in-link")); err != nil || l != "README" {
		t.Errorf("in-link here: %q, %v", l, err)
	}
	if l, err := os.Readlink(filepath.Join(root, "via")); err != nil || l != "real" {
		t.Errorf("via here: %q, %v", l, err)
	}
	for _, bad := range []string{"etc", "real/x.txt", filepath.Join(gitDir, "hooks/post-checkout")} {
		if !filepath.IsAbs(bad) {
			bad = filepath.Join(root, bad)
		}
		if _, err := os.Lstat(bad); !os.IsNotExist(err) {
			t.Errorf("%s was salvaged: %v", bad, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(gitDir, "config")); !bytes.Equal(b, config) {
		t.Errorf("the clone's config here: %s", b)
	}
	if b, _ := os.ReadFile(filepath.Join(gitDir, "refs/heads/lost")); string(b) != "ref\n" {
		t.Errorf("the lost turn's ref: %q", b)
	}
	// Over a bound: nothing salvaged.
	lower(t, &maxFileSize, 1<<20)
	writeFile(t, filepath.Join(inPod, "big"), strings.Repeat("x", 1<<20+1), 0o644)
	writeFile(t, filepath.Join(inPod, "lost2.txt"), "x", 0o644)
	if err := e.SalvageTrees(ctxT(t), a.ID, a.Incarnation, trees, ""); !errors.Is(err, ErrRefused) {
		t.Errorf("salvage over a bound: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "lost2.txt")); !os.IsNotExist(err) {
		t.Errorf("lost2.txt was salvaged from a refused copy: %v", err)
	}
}

// TestHeldTrees: a read-only tree unchanged here since the last push
// stays as the pod holds it, and is not sent again; one changed here is
// sent again; one the pod no longer holds is sent again; the rest is
// pushed as ever.
func TestHeldTrees(t *testing.T) {
	root, gitDir, common := gitClone(t)
	inPod := t.TempDir()
	e := newExec(t, Options{Workspace: emptyDir, MountPath: inPod})
	a := Agent{ID: fsstore.NewID(), Incarnation: "1"}
	running(t, e, a)
	link := t.TempDir()
	writeFile(t, filepath.Join(link, "facts.txt"), "facts", 0o644)
	gt, err := GitTrees(gitDir, common, inPod)
	if err != nil {
		t.Fatal(err)
	}
	odd := t.TempDir() // a place whose name find would read as a pattern
	writeFile(t, filepath.Join(odd, "f"), "odd", 0o644)
	trees := append(append([]Tree{{Local: root, RW: true}}, gt...), Tree{Rel: "data", Local: link}, Tree{Rel: "we[i]rd*/x", Local: odd})
	push := func() {
		t.Helper()
		if err := e.PushTrees(ctxT(t), a.ID, a.Incarnation, trees); err != nil {
			t.Fatal(err)
		}
		if m, _ := filepath.Glob(filepath.Join(inPod, ".substrat-keep.*")); len(m) > 0 {
			t.Errorf("left in the pod: %v", m)
		}
	}
	has := func(rel string) bool {
		_, err := os.Lstat(filepath.Join(inPod, rel))
		return err == nil
	}
	push()
	writeFile(t, filepath.Join(inPod, OriginRel, "marker"), "m", 0o644)
	writeFile(t, filepath.Join(inPod, "data/marker"), "m", 0o644)
	writeFile(t, filepath.Join(inPod, "we[i]rd*/x/marker"), "m", 0o644)
	writeFile(t, filepath.Join(inPod, "weird/other"), "not kept", 0o644)
	writeFile(t, filepath.Join(root, "new.txt"), "n", 0o644)
	push()
	if !has(OriginRel+"/marker") || !has("data/marker") || !has("we[i]rd*/x/marker") {
		t.Errorf("unchanged read-only trees were sent again")
	}
	if has("weird") {
		t.Errorf("what the pattern of a held tree's name matches was kept")
	}
	if !has("new.txt") || !has(".git/HEAD") || !has(OriginRel+"/HEAD") {
		t.Errorf("the push left out more than the held trees")
	}
	writeFile(t, filepath.Join(link, "more.txt"), "more", 0o644)
	push()
	if !has(OriginRel+"/marker") || has("data/marker") || !has("data/more.txt") {
		t.Errorf("a changed read-only tree was not sent again, or an unchanged one was")
	}
	os.RemoveAll(filepath.Join(inPod, OriginRel))
	push()
	if !has(OriginRel+"/HEAD") || has(OriginRel+"/marker") || !has("data/more.txt") {
		t.Errorf("a read-only tree the pod lost was not sent again")
	}
	out, err := inPodSh(t, e, a, "git log --format=%s")
	if err != nil || out != "init\n" {
		t.Errorf("git in the pod: %v\n%s", err, out)
	}
}
