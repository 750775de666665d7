package k8s

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/substrat/substrat/executor/ssh"
)

// ErrRefused: a workspace that Pull refuses to bring back (over its
// bounds); the local copy is left as it was.
var ErrRefused = errors.New("k8s executor: workspace refused")

// Bounds of what Pull brings back: the SSH executor's.
const (
	MaxFileSize  = ssh.DefaultMaxFileSize
	MaxTotalSize = ssh.DefaultMaxTotalSize
	MaxFiles     = ssh.DefaultMaxFiles
)

// The bounds in force (tests lower them).
var (
	maxFileSize  int64 = MaxFileSize
	maxTotalSize int64 = MaxTotalSize
	maxFiles     int64 = MaxFiles
)

// MountPath is where the workspace is mounted in the executor's pods.
func (e *Executor) MountPath() string { return e.opts.MountPath }

// copyPath is the PATH of the copies' commands in the pod.
const copyPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// pushScript empties the workspace in the pod ($1; a volume's
// lost+found stays) with the find expression of the arguments after
// the $2 it checks first (pushArgv), and unpacks the tar stream of its
// input there, as the pod's user (no owner kept, modes under umask
// 022). It exits 4, before it changes anything, if one of those it
// checks is not a directory there (a symlink is none). A directory the
// agent locked (no write or search for its owner) is unlocked, so that
// no agent can make its pod's workspace one that no push can replace.
const pushScript = `umask 022; d=$1; n=$2; shift 2; [ -d "$d" ] || { echo "no workspace at $d" >&2; exit 2; };` +
	` while [ "$n" -gt 0 ]; do [ -d "$d/$1" ] && [ ! -h "$d/$1" ] || { echo "no $1 to keep" >&2; exit 4; }; shift; n=$((n-1)); done;` +
	` { find "$d" -mindepth 1 "$@" || { find "$d" -mindepth 1 -type d ! -perm -u=rwx -exec chmod u+rwx {} \; 2>/dev/null;` +
	` find "$d" -mindepth 1 "$@"; }; } && tar -x -o -f - -C "$d"` + tokenScript

// pushArgv is the command line of pushScript for the workspace at mount,
// whose directories keep (relative to it) stay as they are: checked
// first with their parents, which are emptied of all else, and the find
// expression that deletes all but them and lost+found.
func pushArgv(mount string, keep []string) []string {
	esc := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`)
	at := func(rel string) string { return esc.Replace(path.Join(mount, rel)) }
	var parents []string
	for _, k := range keep {
		for p := path.Dir(k); p != "."; p = path.Dir(p) {
			if !slices.Contains(parents, p) {
				parents = append(parents, p)
			}
		}
	}
	check := append(slices.Clone(keep), parents...)
	argv := append([]string{"/bin/sh", "-c", pushScript, "substrat-push", mount, strconv.Itoa(len(check))}, check...)
	argv = append(argv, "(", "-path", at("lost+found"))
	for _, k := range keep {
		argv = append(argv, "-o", "-path", at(k))
	}
	argv = append(argv, ")", "-prune", "-o")
	for _, p := range parents {
		argv = append(argv, "!", "-path", at(p))
	}
	return append(argv, "-exec", "rm", "-rf", "{}", "+", "-prune")
}

// pullScript writes a tar stream of the directory $1 of the pod's
// workspace, without .git or lost+found at any depth, nor what the
// arguments after $1 exclude; it exits 3 if there is no such directory
// (a symlink is none). What the agent made unreadable to its owner is
// made readable first (else tar would fail, and no turn of the agent
// could end well).
const pullScript = `d=$1; shift; [ -d "$d" ] && [ ! -h "$d" ] || { echo "no directory at $d" >&2; exit 3; };` +
	` cd -- "$d" || exit 2; find . \( -type d ! -perm -u=rx -exec chmod u+rwx {} \; \) -o` +
	` \( -type f ! -perm -u=r -exec chmod u+r {} \; \) 2>/dev/null;` +
	` exec tar -c -f - --exclude=.git --exclude=lost+found "$@" .`

// Push copies the local directory local into the workspace of the pod of
// agent's incarnation (through an exec, as Start runs a command), which
// it then mirrors: files, directories, and symlinks that stay inside
// the tree, with their modification times and executable bit. No .git
// travels, at any depth; nor a symlink out of the tree, a device, FIFO
// or socket, an owner or a set-id bit. The pod's image needs tar and
// find (busybox's will do).
func (e *Executor) Push(ctx context.Context, agent, incarnation, local string) error {
	return e.PushTrees(ctx, agent, incarnation, []Tree{{Local: local}})
}

// Pull copies the workspace of the pod of agent's incarnation back into
// local, which it then mirrors, with what the agent wrote there treated
// as hostile, under the rules of the SSH executor's Pull: no .git nor
// lost+found at any depth (and local's own are neither replaced nor
// deleted), no symlink that points out of the tree (see safeLink), no
// device, FIFO, socket or hard link to
// outside it, no owner, no mode but the executable bit; a file larger
// than MaxFileSize, more than MaxTotalSize in all, or more than MaxFiles
// entries refuses the whole workspace (ErrRefused), and local is left as
// it was. What comes back is first unpacked into a directory of its own
// (under tmp, "" for the system's), then moved into local with no
// symlink of local followed (os.Root). Call it when no process of the
// agent runs in the pod.
func (e *Executor) Pull(ctx context.Context, agent, incarnation, local, tmp string) error {
	return e.PullTrees(ctx, agent, incarnation, []Tree{{Local: local, RW: true}}, tmp)
}

// skipped reports whether name (slash-separated, relative) is never
// copied: .git or lost+found at any depth (the copy back leaves out a
// lost+found, as a volume's own: one here is neither sent nor deleted).
func skipped(name string) bool {
	for _, c := range strings.Split(name, "/") {
		if never(c) {
			return true
		}
	}
	return false
}

// never reports whether an entry of a tree named base is never copied.
func never(base string) bool { return base == ".git" || base == "lost+found" }

// safeLink reports whether a symlink at name (relative to the tree) to
// target stays inside the tree, as rsync's --safe-links decides it
// since 3.4.0: a relative target whose ".." come first, none after a
// name, and that stays inside as written. (One with a ".." after a name
// can go out through a symlink of the tree, though it stays inside as
// written: s -> ., x -> s/s/../..; CVE-2024-12088. A name of a target
// with none may be a symlink too, itself safe: it stays inside.)
func safeLink(name, target string) bool {
	if target == "" || path.IsAbs(target) || strings.ContainsRune(target, 0) {
		return false
	}
	named := false
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if named {
				return false
			}
		default:
			named = true
		}
	}
	return filepath.IsLocal(path.Join(path.Dir(name), target))
}

// walkTree calls f with the path, the slash-separated name below root
// and the entry of everything under root, but for .git and lost+found
// (a directory, a file) at any depth, which it skips.
func walkTree(root string, f func(p, name string, d fs.DirEntry) error) error {
	root = filepath.Clean(root)
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if never(d.Name()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		return f(p, filepath.ToSlash(rel), d)
	})
}

// writeEntry writes the entry at p, of the tree, as name (its place in
// the pod's workspace): a directory, a regular file (its bytes read
// now), or a symlink that stays inside the tree (inTree: its name
// relative to the tree's top); anything else, or what went meanwhile,
// is left out.
func writeEntry(tw *tar.Writer, p, name, inTree string, fi fs.FileInfo) error {
	hdr := &tar.Header{Name: name, ModTime: fi.ModTime(), Mode: 0o644}
	switch {
	case fi.IsDir():
		hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, name+"/", 0o755
		return tw.WriteHeader(hdr)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil || !safeLink(inTree, target) {
			return nil
		}
		hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, target, 0o777
		return tw.WriteHeader(hdr)
	case fi.Mode().IsRegular():
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return nil // gone meanwhile
		}
		defer f.Close()
		if fi, err = f.Stat(); err != nil || !fi.Mode().IsRegular() {
			return nil
		}
		if fi.Mode()&0o100 != 0 {
			hdr.Mode = 0o755
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		n, err := io.Copy(tw, io.LimitReader(f, fi.Size()))
		if err != nil {
			return err
		}
		// A file that shrank meanwhile is padded: the header said its
		// size.
		_, err = io.CopyN(tw, zeros{}, fi.Size()-n)
		return err
	}
	return nil // a device, FIFO or socket
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// kind is what an entry of a pulled tree is.
type kind byte

const (
	kindDir kind = iota + 1
	kindFile
	kindLink
)

// budget is what is left of Pull's bounds, over all the trees of one
// copy back: entries and bytes; and how many entries of the stream were
// left out (skipped: a symlink out of the tree, a FIFO, a name twice),
// which the pod keeps while this side has none of them.
type budget struct{ entries, total, skipped int64 }

// readTar unpacks the tar stream r into the empty directory stage,
// under Pull's rules and bounds (what is left of them in b), and returns
// the entries kept (by their slash-separated relative names): none of
// keep, or under one (see kept), though they count.
func readTar(r io.Reader, stage string, keep []string, b *budget) (map[string]kind, error) {
	root, err := os.OpenRoot(stage)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	names := map[string]kind{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return names, nil
		}
		if err != nil {
			return nil, err
		}
		if b.entries++; b.entries > maxFiles {
			return nil, fmt.Errorf("%w: it holds more than %d entries", ErrRefused, maxFiles)
		}
		if hdr.Size > 0 {
			// Every entry's bytes count, even those left out.
			if b.total += hdr.Size; b.total > maxTotalSize {
				return nil, fmt.Errorf("%w: it holds more than %d bytes", ErrRefused, maxTotalSize)
			}
		}
		name := strings.TrimSuffix(strings.TrimPrefix(path.Clean("/"+hdr.Name), "/"), "/")
		if name == "" || name == "." {
			continue // the root itself
		}
		if !filepath.IsLocal(name) || names[name] != 0 {
			b.skipped++
			continue
		}
		if skipped(name) || kept(name, keep) {
			continue
		}
		if hdr.Typeflag != tar.TypeDir && aboveKept(name, keep) {
			b.skipped++
			continue // what is kept here stays in a directory
		}
		// Every parent is a directory of the stream (made if the stream
		// did not name it): nothing goes through a symlink or a file.
		parentOK := true
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if k := names[dir]; k != 0 && k != kindDir {
				parentOK = false
				break
			}
		}
		if !parentOK {
			b.skipped++
			continue
		}
		mkParents := func() error {
			var chain []string
			for dir := path.Dir(name); dir != "." && names[dir] == 0; dir = path.Dir(dir) {
				chain = append(chain, dir)
			}
			for i := len(chain) - 1; i >= 0; i-- {
				if err := root.Mkdir(chain[i], 0o755); err != nil {
					return err
				}
				names[chain[i]] = kindDir
			}
			return nil
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := mkParents(); err != nil {
				return nil, err
			}
			if err := root.Mkdir(name, 0o755); err != nil {
				return nil, err
			}
			names[name] = kindDir
			root.Chtimes(name, hdr.ModTime, hdr.ModTime)
		case tar.TypeReg, tar.TypeLink: // (the reader makes a TypeRegA a TypeReg)
			size := hdr.Size
			var src io.Reader = tr
			closeSrc := func() error { return nil }
			if hdr.Typeflag == tar.TypeLink {
				// A hard link: a copy of a file of the stream, if it is
				// one.
				target := strings.TrimSuffix(strings.TrimPrefix(path.Clean("/"+hdr.Linkname), "/"), "/")
				if names[target] != kindFile {
					b.skipped++
					continue
				}
				f, err := root.Open(target)
				if err != nil {
					return nil, err
				}
				fi, err := f.Stat()
				if err != nil {
					f.Close()
					return nil, err
				}
				size, src = fi.Size(), f
				closeSrc = f.Close
			}
			if size > maxFileSize {
				return nil, fmt.Errorf("%w: it holds a file larger than %d bytes: %q", ErrRefused, maxFileSize, trimName(name))
			}
			if hdr.Typeflag == tar.TypeLink {
				if b.total += size; b.total > maxTotalSize {
					return nil, fmt.Errorf("%w: it holds more than %d bytes", ErrRefused, maxTotalSize)
				}
			}
			if err := mkParents(); err != nil {
				return nil, err
			}
			mode := os.FileMode(0o644)
			if hdr.Mode&0o100 != 0 {
				mode = 0o755
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
			if err != nil {
				return nil, err
			}
			_, err = io.CopyN(f, src, size)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			closeSrc()
			if err != nil {
				return nil, err
			}
			root.Chmod(name, mode)
			root.Chtimes(name, hdr.ModTime, hdr.ModTime)
			names[name] = kindFile
		case tar.TypeSymlink:
			if !safeLink(name, hdr.Linkname) {
				b.skipped++
				continue
			}
			if err := mkParents(); err != nil {
				return nil, err
			}
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return nil, err
			}
			names[name] = kindLink
		default:
			// A device, FIFO, or what this does not know: skipped.
			b.skipped++
		}
	}
}

func trimName(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// mirror moves the tree stage (its entries names) into local, which it
// then mirrors: local's entries that are not in stage are deleted, but
// for .git at any depth and what keep names (see kept), which are
// neither replaced nor deleted (nor the directories that hold one). No
// symlink of local is followed: each entry is written through an
// os.Root of local, parents before what they hold, and one of another
// kind is replaced.
func mirror(stage, local string, names map[string]kind, keep []string) error {
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
	// Deletions first: what is in local and not in stage (or of another
	// kind, which is replaced). A directory goes after what it holds,
	// and only if it is empty then: one that holds a .git stays, with
	// it.
	var dirs []string
	err = walkTree(local, func(_, name string, d fs.DirEntry) error {
		if kept(name, keep) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		var k kind
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			k = kindLink
		case d.IsDir():
			k = kindDir
		case d.Type().IsRegular():
			k = kindFile
		}
		if names[name] == k && k != 0 {
			return nil
		}
		if k == kindDir {
			dirs = append(dirs, name)
			return nil
		}
		return root.Remove(name)
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		root.Remove(dirs[i]) // fails if it still holds a .git
	}
	return filepath.WalkDir(stage, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == stage {
			return err
		}
		rel, err := filepath.Rel(stage, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch names[name] {
		case kindDir:
			if err := root.Mkdir(name, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			// Its time once what it holds is in: set below, after the
			// walk would be exact, but a directory's time matters little.
			root.Chtimes(name, fi.ModTime(), fi.ModTime())
		case kindLink:
			target, err := sroot.Readlink(name)
			if err != nil {
				return err
			}
			if cur, err := root.Readlink(name); err == nil && cur == target {
				return nil
			}
			root.Remove(name)
			return root.Symlink(target, name)
		case kindFile:
			if sameFile(root, sroot, name, fi) {
				return nil
			}
			return moveIn(root, sroot, name, fi)
		}
		return nil
	})
}

// sameFile reports whether local's regular file name already holds what
// the staged one does: its bytes, and its executable bit. (Times are
// not enough: a tar stream's are to the second.)
func sameFile(root, sroot *os.Root, name string, fi fs.FileInfo) bool {
	cur, err := root.Lstat(name)
	if err != nil || !cur.Mode().IsRegular() || cur.Size() != fi.Size() || cur.Mode()&0o100 != fi.Mode()&0o100 {
		return false
	}
	a, err := root.Open(name)
	if err != nil {
		return false
	}
	defer a.Close()
	b, err := sroot.Open(name)
	if err != nil {
		return false
	}
	defer b.Close()
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, ea := io.ReadFull(a, ba)
		nb, eb := io.ReadFull(b, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false
		}
		if ea != nil || eb != nil {
			return (ea == io.EOF || ea == io.ErrUnexpectedEOF) && (eb == io.EOF || eb == io.ErrUnexpectedEOF)
		}
	}
}

// limitedBuffer keeps the first n bytes written to it.
type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
