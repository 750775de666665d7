package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// salvageInto moves into local, from the tree stage (its entries names),
// what is missing in local, and the regular files that are newer in
// stage (to the second) than local's regular files of the same name;
// it deletes nothing, replaces nothing of another kind (a directory, a
// symlink, a file), and leaves .git at any depth and what keep names
// alone. It goes into no directory of stage that local does not hold
// as a directory, and follows no symlink of local (os.Root, and each
// parent checked as a directory before what it holds).
func salvageInto(stage, local string, names map[string]kind, keep []string) error {
	root, err := os.OpenRoot(local)
	if err != nil {
		return err
	}
	defer root.Close()
	sroot, err := os.OpenRoot(stage)
	if err != nil {
		return err
	}
	defer sroot.Close()
	return filepath.WalkDir(stage, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == stage {
			return err
		}
		rel, err := filepath.Rel(stage, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if skipped(name) || kept(name, keep) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		cur, cerr := root.Lstat(name)
		missing := errors.Is(cerr, fs.ErrNotExist)
		if cerr != nil && !missing {
			return cerr
		}
		switch names[name] {
		case kindDir:
			if missing {
				if err := root.Mkdir(name, 0o755); err != nil {
					return err
				}
				root.Chtimes(name, fi.ModTime(), fi.ModTime())
				return nil
			}
			if !cur.IsDir() {
				return filepath.SkipDir // another kind here: nothing under it comes
			}
		case kindLink:
			if !missing {
				return nil
			}
			target, err := sroot.Readlink(name)
			if err != nil {
				return err
			}
			if !safeLink(name, target) {
				return nil
			}
			return root.Symlink(target, name)
		case kindFile:
			newer := !missing && cur.Mode().IsRegular() && fi.ModTime().Unix() > cur.ModTime().Unix()
			if !missing && (!newer || sameFile(root, sroot, name, fi)) {
				return nil
			}
			return moveIn(root, sroot, name, fi)
		default:
			if d.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
}

// moveIn copies stage's regular file name into local's (root), through
// a temporary file renamed over it, with its mode and time.
func moveIn(root, sroot *os.Root, name string, fi fs.FileInfo) error {
	tmp := path.Join(path.Dir(name), "."+path.Base(name)+".substrat-pull")
	root.Remove(tmp)
	in, err := sroot.Open(name)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Chtimes(tmp, fi.ModTime(), fi.ModTime())
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		root.Remove(tmp)
	}
	return err
}

// VolumeID names the workspace volume that pod, one of the executor's
// (as WaitRunning returns it), mounts, so that a daemon can tell from
// one turn to the next, across its own restarts, that a volume is the
// one it last copied back in full (and so has nothing to salvage): for
// a PersistentVolumeClaim, the executor's home, its target and the
// claim's name and UID (a claim made again under its name is another
// volume); for an emptyDir, the pod's UID (the volume goes with its
// pod); "" for another kind, which cannot be told apart. What is in
// the volume plays no part: only the API server's objects, which the
// pod's processes cannot change.
func (e *Executor) VolumeID(ctx context.Context, pod *corev1.Pod) (string, error) {
	for _, v := range pod.Spec.Volumes {
		if v.Name != volWorkspace {
			continue
		}
		switch {
		case v.PersistentVolumeClaim != nil:
			pvc, err := e.core.PersistentVolumeClaims(pod.Namespace).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
			if err != nil {
				return "", fmt.Errorf("the workspace claim of pod %s: %w", pod.Name, err)
			}
			return fmt.Sprintf("home=%s target=%s claim=%s uid=%s", e.opts.Home, e.target, pvc.Name, pvc.UID), nil
		case v.EmptyDir != nil:
			return fmt.Sprintf("home=%s target=%s pod=%s uid=%s", e.opts.Home, e.target, pod.Name, pod.UID), nil
		}
	}
	return "", nil
}
