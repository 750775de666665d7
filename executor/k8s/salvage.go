package k8s

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
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
