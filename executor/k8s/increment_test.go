package k8s

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
)

// snapshot lists the tree dir: each entry's kind and bytes or target.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.IsDir():
			out[rel] = "dir"
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "link " + target
		default:
			b, _ := os.ReadFile(p)
			out[rel] = "file " + string(b)
		}
		return nil
	})
	return out
}

// copies returns the push and the copy back of trees into a's pod; a
// failure fails t.
func copies(t *testing.T, e *Executor, a Agent, trees []Tree) (push, pull func()) {
	return func() {
			t.Helper()
			if err := e.PushTrees(ctxT(t), a.ID, a.Incarnation, trees); err != nil {
				t.Fatal(err)
			}
		}, func() {
			t.Helper()
			if err := e.PullTrees(ctxT(t), a.ID, a.Incarnation, trees, t.TempDir()); err != nil {
				t.Fatal(err)
			}
		}
}

// TestIncrementalPush: after a clean copy back, a push sends only what
// changed here (a file changed in the pod since, and not here, stays as
// the pod has it) and deletes what went here (files, a directory, a
// file that became a directory); a file rewritten here with the same
// size and time right after a push is sent all the same; a pod without
// the last push's token gets a full push.
func TestIncrementalPush(t *testing.T) {
	root, ro, inPod := t.TempDir(), t.TempDir(), t.TempDir()
	e := newExec(t, Options{Workspace: emptyDir, MountPath: inPod})
	a := Agent{ID: fsstore.NewID(), Incarnation: "1"}
	running(t, e, a)
	t.Cleanup(func() { os.Remove(tokenFile(a.ID)) }) // kwok's exec: this machine's /tmp
	old := time.Now().Add(-time.Hour)
	for name, text := range map[string]string{"a.txt": "a", "b.txt": "bb", "d/x": "x", "gone/deep/f": "f", "kind": "file"} {
		writeFile(t, filepath.Join(root, name), text, 0o644)
		os.Chtimes(filepath.Join(root, name), old, old)
	}
	os.Symlink("a.txt", filepath.Join(root, "l"))
	os.Mkdir(filepath.Join(root, "ref"), 0o755) // the read-only tree's mount point
	writeFile(t, filepath.Join(ro, "r.txt"), "ro", 0o644)
	trees := []Tree{{Local: root, RW: true}, {Rel: "ref", Local: ro}}
	push, pull := copies(t, e, a, trees)
	same := func(what string, want map[string]string) {
		t.Helper()
		got := snapshot(t, inPod)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: the pod's %s is %q, want %q", what, k, got[k], v)
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("%s: the pod has %s (%s)", what, k, got[k])
			}
		}
	}
	push()
	want := snapshot(t, root)
	want["ref/r.txt"] = "file ro"
	same("the first push", want)
	pull()

	// The pod's copy changed after the copy back; changes here.
	os.WriteFile(filepath.Join(inPod, "a.txt"), []byte("drift"), 0o644)
	os.WriteFile(filepath.Join(root, "b.txt"), []byte("BBBB"), 0o644)
	os.Remove(filepath.Join(root, "d", "x"))
	os.RemoveAll(filepath.Join(root, "gone"))
	os.Remove(filepath.Join(root, "kind"))
	writeFile(t, filepath.Join(root, "kind", "inner"), "in", 0o644)
	writeFile(t, filepath.Join(root, "new", "y"), "y", 0o644)
	os.Remove(filepath.Join(root, "l"))
	os.Symlink("b.txt", filepath.Join(root, "l"))
	writeFile(t, filepath.Join(ro, "r.txt"), "RO2", 0o644)
	push()
	want = snapshot(t, root)
	want["a.txt"] = "file drift" // not sent: unchanged here
	want["ref/r.txt"] = "file RO2"
	same("the push of what changed", want)

	// Rewritten with the same size and time right after a push.
	pull()
	b := filepath.Join(root, "b.txt")
	fi, _ := os.Stat(b)
	os.WriteFile(b, []byte("CCCC"), 0o644)
	os.Chtimes(b, fi.ModTime(), fi.ModTime())
	push()
	if got, _ := os.ReadFile(filepath.Join(inPod, "b.txt")); string(got) != "CCCC" {
		t.Errorf("a racily clean file in the pod: %q", got)
	}

	// What the pod holds that never comes back: a .git below the top
	// goes at the next push; a symlink out of the tree, which the copy
	// back leaves out, makes the next push a full one.
	pull()
	writeFile(t, filepath.Join(inPod, "d", ".git"), "gitdir: /etc", 0o644)
	push()
	if _, err := os.Lstat(filepath.Join(inPod, "d", ".git")); !os.IsNotExist(err) {
		t.Errorf("a planted d/.git survived a push: %v", err)
	}
	pull()
	os.Symlink("/etc", filepath.Join(inPod, "out"))
	pull()
	push()
	if _, err := os.Lstat(filepath.Join(inPod, "out")); !os.IsNotExist(err) {
		t.Errorf("a symlink out of the tree survived the push after its copy back: %v", err)
	}

	// A pod without the token: everything again.
	pull()
	os.Remove(tokenFile(a.ID))
	os.WriteFile(filepath.Join(inPod, "junk"), []byte("j"), 0o644)
	push()
	want = snapshot(t, root)
	want["ref/r.txt"] = "file RO2"
	same("the push to a pod without the token", want)

	// A push with no copy back since: everything again.
	os.WriteFile(filepath.Join(inPod, "junk"), []byte("j"), 0o644)
	push()
	same("the push after one with no copy back", want)
}

// BenchmarkPushTrees: a push of a workspace of 2,000 files of 8 KiB
// (16 MiB) into a pod on kwok, whole and when one file changed.
func BenchmarkPushTrees(b *testing.B) {
	root, inPod := b.TempDir(), b.TempDir()
	e := newExec(b, Options{Workspace: emptyDir, MountPath: inPod})
	a := Agent{ID: fsstore.NewID(), Incarnation: "1"}
	running(b, e, a)
	b.Cleanup(func() { os.Remove(tokenFile(a.ID)) })
	data := make([]byte, 8<<10)
	old := time.Now().Add(-time.Hour)
	for i := range 2000 {
		p := filepath.Join(root, "d"+string(rune('a'+i%20)), "f"+time.Duration(i).String())
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, data, 0o644)
		os.Chtimes(p, old, old)
	}
	trees := []Tree{{Local: root, RW: true}}
	ctx := ctxT(b)
	for _, whole := range []bool{true, false} {
		name := "one-changed"
		if whole {
			name = "whole"
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if whole {
					e.pushed.Delete(a.ID)
				} else {
					os.WriteFile(filepath.Join(root, "changed"), []byte(time.Duration(i).String()), 0o644)
				}
				if err := e.PushTrees(ctx, a.ID, a.Incarnation, trees); err != nil {
					b.Fatal(err)
				}
				e.markClean(a.ID) // as a copy back would
			}
		})
	}
}

// BenchmarkPullTrees: a copy back of the workspace of BenchmarkPushTrees
// from a pod on kwok where nothing changed: whole, and of what changed.
func BenchmarkPullTrees(b *testing.B) {
	root, inPod := b.TempDir(), b.TempDir()
	e := newExec(b, Options{Workspace: emptyDir, MountPath: inPod})
	a := Agent{ID: fsstore.NewID(), Incarnation: "1"}
	running(b, e, a)
	b.Cleanup(func() { os.Remove(tokenFile(a.ID)) })
	data := make([]byte, 8<<10)
	for i := range 2000 {
		p := filepath.Join(root, "d"+string(rune('a'+i%20)), "f"+time.Duration(i).String())
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, data, 0o644)
	}
	trees := []Tree{{Local: root, RW: true}}
	ctx := ctxT(b)
	if err := e.PushTrees(ctx, a.ID, a.Incarnation, trees); err != nil {
		b.Fatal(err)
	}
	for _, whole := range []bool{true, false} {
		name := "nothing-changed"
		if whole {
			name = "whole"
		}
		b.Run(name, func(b *testing.B) {
			if err := e.PushTrees(ctx, a.ID, a.Incarnation, trees); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if whole {
					os.Remove(tokenFile(a.ID)) // no proof of the push: all of it
				}
				if err := e.PullTrees(ctx, a.ID, a.Incarnation, trees, b.TempDir()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestIncrementalPull: after a push, a copy back brings what changed in
// the pod since (even a file whose time the agent set back: its ctime
// moved), deletes here what went there, and leaves alone what did not
// change there (a change made here meanwhile survives, and goes at the
// next push); a pod without the push's token gets a full copy back.
func TestIncrementalPull(t *testing.T) {
	root, inPod := t.TempDir(), t.TempDir()
	e := newExec(t, Options{Workspace: emptyDir, MountPath: inPod})
	a := Agent{ID: fsstore.NewID(), Incarnation: "1"}
	running(t, e, a)
	t.Cleanup(func() { os.Remove(tokenFile(a.ID)) })
	for name, text := range map[string]string{"a.txt": "a", "b.txt": "b", "c.txt": "c", "d/x": "x", "kind": "file"} {
		writeFile(t, filepath.Join(root, name), text, 0o644)
	}
	trees := []Tree{{Local: root, RW: true}}
	push, pull := copies(t, e, a, trees)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			return "(" + err.Error() + ")"
		}
		return string(b)
	}
	push()
	time.Sleep(20 * time.Millisecond) // the process starts after the push
	// The process, in the pod.
	os.WriteFile(filepath.Join(inPod, "b.txt"), []byte("B from the pod"), 0o644)
	os.Chtimes(filepath.Join(inPod, "b.txt"), time.Unix(1e9, 0), time.Unix(1e9, 0))
	writeFile(t, filepath.Join(inPod, "new", "z"), "z", 0o644)
	os.Remove(filepath.Join(inPod, "d", "x"))
	os.Remove(filepath.Join(inPod, "kind"))
	writeFile(t, filepath.Join(inPod, "kind", "in"), "in", 0o644)
	// Meanwhile, here.
	os.WriteFile(filepath.Join(root, "c.txt"), []byte("C here"), 0o644)
	pull()
	for name, want := range map[string]string{"a.txt": "a", "b.txt": "B from the pod", "c.txt": "C here", "new/z": "z", "kind/in": "in"} {
		if got := read(name); got != want {
			t.Errorf("after the copy back, %s here is %q, want %q", name, got, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "d", "x")); !os.IsNotExist(err) {
		t.Errorf("d/x, deleted in the pod, is here: %v", err)
	}
	// The change made here goes at the next push.
	push()
	if b, _ := os.ReadFile(filepath.Join(inPod, "c.txt")); string(b) != "C here" {
		t.Errorf("c.txt in the pod after the push: %q", b)
	}

	// No token: a full copy back, which mirrors the pod.
	os.WriteFile(filepath.Join(root, "c.txt"), []byte("C again here"), 0o644)
	os.Remove(tokenFile(a.ID))
	pull()
	if got := read("c.txt"); got != "C here" {
		t.Errorf("after a full copy back, c.txt here is %q, want the pod's", got)
	}
}
