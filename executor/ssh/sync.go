package ssh

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// rsyncFlags are what a place's copy takes, both ways: files,
// directories, symlinks that stay inside the place, modification times
// and the executable bit; no symlink that points out of the place
// (--safe-links, decided by the receiving side), no device, FIFO or
// socket, no owner, group, set-id bits or hard links. Push and Pull add
// --delete, which makes the copy an exact one (deletions travel too);
// --protect-args keeps
// the remote shell away from the paths. No .git travels, at any depth,
// either way, and the receiving side's are neither replaced nor deleted:
// git reads a repository's config, hooks and a .git file's redirection
// as code and paths to trust (see the git sandbox's rules), and what
// comes back from the host was written by the agent.
//
// --modify-window=-1 compares modification times to the nanosecond, not
// the second: a file the agent changes within the second of its copy,
// to the same size, would otherwise look unchanged and stay behind.
var rsyncFlags = []string{
	"--recursive", "--links", "--times", "--modify-window=-1", "--executability",
	"--safe-links", "--no-devices", "--no-specials",
	"--protect-args", "--exclude=.git",
}

// rsh returns rsync's --rsh: the executor's ssh through the master m,
// in rsync's own quoting (words split on spaces, single quotes keep
// them together).
func (e *Executor) rsh(m *master) (string, error) {
	words := append([]string{"ssh"}, e.args(m.sock, "-o", "ControlMaster=no", "-o", "ClearAllForwardings=yes")...)
	for i, w := range words {
		if strings.ContainsAny(w, "'\"\\\n") {
			return "", fmt.Errorf("ssh executor: %q cannot be passed to rsync", w)
		}
		if strings.Contains(w, " ") {
			words[i] = "'" + w + "'"
		}
	}
	return strings.Join(words, " "), nil
}

// FDPrefix begins a local path that names an open descriptor of this
// process: FDPrefix + N, or FDPrefix + N + "/" for a directory. Push,
// Pull, Salvage, PushExtra and PullExtra take such a path for what the
// caller opened (an O_PATH descriptor will do): rsync gets the
// descriptor itself, so that the file or directory opened is the one
// copied, whatever its name leads to by then (a directory swapped for a
// symlink meanwhile is not followed). The caller keeps it open until
// the call returns.
const FDPrefix = "/proc/self/fd/"

// localFD returns the descriptor that the local path p names, if it is
// an FDPrefix path, and what follows its number.
func localFD(p string) (fd int, rest string, ok bool) {
	n, ok := strings.CutPrefix(p, FDPrefix)
	if !ok {
		return 0, "", false
	}
	num, rest, _ := strings.Cut(n, "/")
	fd, err := strconv.Atoi(num)
	if err != nil || fd < 0 {
		return 0, "", false
	}
	if rest != "" {
		rest = "/" + rest
	} else if strings.HasSuffix(n, "/") {
		rest = "/"
	}
	return fd, rest, true
}

// statLocal is os.Lstat of a local path, or os.Stat of the file an
// FDPrefix path's descriptor refers to (not of its magic link).
func statLocal(p string) (os.FileInfo, error) {
	if _, _, ok := localFD(p); ok {
		return os.Stat(p)
	}
	return os.Lstat(p)
}

// rsync runs rsync with the place's flags, then more; an argument that
// is an FDPrefix path is passed as that descriptor (see FDPrefix).
func (e *Executor) rsync(ctx context.Context, more ...string) error {
	m, err := e.acquire(ctx)
	if err != nil {
		return err
	}
	defer e.release(m)
	rsh, err := e.rsh(m)
	if err != nil {
		return err
	}
	args := append([]string{"--rsh=" + rsh}, rsyncFlags...)
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, a := range more {
		fd, rest, ok := localFD(a)
		if !ok {
			args = append(args, a)
			continue
		}
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("ssh executor: local %s: %w", a, err)
		}
		files = append(files, os.NewFile(uintptr(dup), a))
		args = append(args, FDPrefix+strconv.Itoa(2+len(files))+rest)
	}
	cmd := exec.CommandContext(ctx, "rsync", args...)
	cmd.ExtraFiles = files
	out, err := cmd.CombinedOutput()
	e.watch(m, out)
	if err != nil {
		return fmt.Errorf("rsync with %s: %v: %s", e.host, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// globEscape escapes the wildcards of a remote source path: the remote
// rsync expands them (with --protect-args, it does what the shell would
// have), so a root of a[1] would read from a1.
func globEscape(p string) string {
	var b strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`*?[]\{}`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Push copies the local directory local (an agent's place) to the
// agent's place on the host (Place), which it then mirrors exactly.
func (e *Executor) Push(ctx context.Context, agent, local string) error {
	dir, err := e.Place(ctx, agent)
	if err != nil {
		return err
	}
	if _, err := e.run(ctx, `mkdir -p -- "$1"`, dir); err != nil {
		return err
	}
	return e.rsync(ctx, "--delete", strings.TrimSuffix(local, "/")+"/", e.host+":"+dir+"/")
}

// placeScript prints, for the place $1, the first file larger than $2
// bytes if there is one ("big NAME"), then the total size of the place
// in bytes and its number of entries ("total N M"); "none" if there is
// no place. It runs outside the
// sandbox on what the agent wrote: find and du follow no symlink. du
// counts every hard link (-l): rsync, without -H, writes each as a file
// of its own here.
const placeScript = `[ -d "$1" ] || { echo none; exit 0; }; cd -- "$1" || exit 1;` +
	` b=$(find . -type f -size +"$2"c -print | head -n 1); [ -z "$b" ] || printf 'big %s\n' "$b";` +
	` printf 'total %s %s\n' "$(du -s -b -l . | cut -f1)" "$(find . | wc -l)"`

// Pull copies the agent's place on the host back into local, which it
// then mirrors, with what the agent wrote there treated as hostile: see
// rsyncFlags. A place holding a file larger than MaxFileSize, more than
// MaxTotalSize in all, or more than MaxFiles entries is refused
// (ErrRefused) and local is left as it was. Call it when no process of
// the agent runs on the host (after the turn, or Fence).
func (e *Executor) Pull(ctx context.Context, agent, local string) error {
	dir, err := e.Place(ctx, agent)
	if err != nil {
		return err
	}
	return e.pull(ctx, agent, dir, local, "--delete")
}

// Salvage copies back from the agent's place on the host, under Pull's
// rules and bounds, the files that are newer there than in local, and
// deletes nothing: what a process cut off before its Pull (a daemon
// that died) left there, without undoing what changed in local since.
// Call it before the Push that replaces the place, after Fence.
func (e *Executor) Salvage(ctx context.Context, agent, local string) error {
	dir, err := e.Place(ctx, agent)
	if err != nil {
		return err
	}
	return e.pull(ctx, agent, dir, local, "--update")
}

// Remove removes, on the host, everything kept there for agent: its
// place, extras and sockets. Call it when none of its processes runs.
func (e *Executor) Remove(ctx context.Context, agent string) error {
	dir, err := e.copyDir(ctx, agent)
	if err != nil {
		return err
	}
	_, err = e.run(ctx, `rm -rf -- "$1"`, dir)
	return err
}

// Extra returns the path on the host of the agent's copy of rel (a
// clean relative path): a file or directory of this machine that its
// processes see besides its place (a CLI's own HOME, its config), kept
// beside the place.
func (e *Executor) Extra(ctx context.Context, agent, rel string) (string, error) {
	if !filepath.IsLocal(rel) || filepath.Clean(rel) != rel {
		return "", fmt.Errorf("ssh executor: %q is not a clean relative path", rel)
	}
	dir, err := e.copyDir(ctx, agent)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "extra", rel), nil
}

// PushExtra copies local, a directory or a regular file (never a
// symlink), to the agent's copy of rel on the host (Extra), which it
// then mirrors.
func (e *Executor) PushExtra(ctx context.Context, agent, rel, local string) error {
	dir, err := e.Extra(ctx, agent, rel)
	if err != nil {
		return err
	}
	fi, err := statLocal(local)
	if err != nil {
		return err
	}
	switch {
	case fi.IsDir():
		if _, err := e.run(ctx, `mkdir -p -- "$1"`, dir); err != nil {
			return err
		}
		return e.rsync(ctx, "--delete", strings.TrimSuffix(local, "/")+"/", e.host+":"+dir+"/")
	case fi.Mode().IsRegular():
		if _, err := e.run(ctx, `mkdir -p -- "$1"`, filepath.Dir(dir)); err != nil {
			return err
		}
		if _, _, ok := localFD(local); ok {
			// One regular file, opened: --copy-links reads it through
			// its magic link, and there is no other link to follow. (A
			// name, swapped for a symlink since, goes as a symlink.)
			return e.rsync(ctx, "--copy-links", local, e.host+":"+dir)
		}
		return e.rsync(ctx, local, e.host+":"+dir)
	}
	return fmt.Errorf("ssh executor: %s is neither a directory nor a regular file", local)
}

// PullExtra copies the agent's copy of rel on the host, a directory,
// back into local, which it then mirrors, under Pull's rules and
// bounds; with salvage, only its files newer there, deleting nothing,
// and nothing at all if there is no copy (see Salvage). The paths in
// keep ("/config": relative to the directory, anchored) are neither
// brought back nor deleted here.
func (e *Executor) PullExtra(ctx context.Context, agent, rel, local string, salvage bool, keep ...string) error {
	dir, err := e.Extra(ctx, agent, rel)
	if err != nil {
		return err
	}
	mode := []string{"--delete"}
	if salvage {
		mode = []string{"--update"}
	}
	for _, k := range keep {
		if !strings.HasPrefix(k, "/") || strings.ContainsAny(k, "*?[\\\n") {
			return fmt.Errorf("ssh executor: %q is not an anchored plain path to keep", k)
		}
		mode = append(mode, "--exclude="+k)
	}
	return e.pull(ctx, agent, dir, local, mode...)
}

// pull copies dir on the host, agent's, into local with mode: --delete
// (a mirror) or --update (newer files only), and more flags.
func (e *Executor) pull(ctx context.Context, agent, dir, local string, mode ...string) error {
	out, err := e.run(ctx, placeScript, dir, strconv.FormatInt(e.opts.MaxFileSize, 10))
	if err != nil {
		return err
	}
	if string(out) == "none\n" {
		if mode[0] == "--update" {
			return nil // nothing to salvage
		}
		return fmt.Errorf("ssh %s: %s of %s is not there", e.host, dir, agent)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if name, ok := strings.CutPrefix(l, "big "); ok {
			if len(name) > 200 {
				name = name[:200] + "..."
			}
			return fmt.Errorf("%w: %s holds a file larger than %d bytes: %q", ErrRefused, agent, e.opts.MaxFileSize, name)
		}
		if rest, ok := strings.CutPrefix(l, "total "); ok {
			var size, n int64
			if _, err := fmt.Sscan(rest, &size, &n); err != nil {
				return fmt.Errorf("ssh %s: unreadable size of the place: %q", e.host, l)
			}
			if size > e.opts.MaxTotalSize {
				return fmt.Errorf("%w: %s's place holds %d bytes, more than %d", ErrRefused, agent, size, e.opts.MaxTotalSize)
			}
			if n > e.opts.MaxFiles {
				return fmt.Errorf("%w: %s's place holds %d entries, more than %d", ErrRefused, agent, n, e.opts.MaxFiles)
			}
			// --max-size as well, for a file that grew since.
			args := append(mode, "--max-size="+strconv.FormatInt(e.opts.MaxFileSize, 10),
				e.host+":"+globEscape(dir)+"/", strings.TrimSuffix(local, "/")+"/")
			return e.rsync(ctx, args...)
		}
	}
	return fmt.Errorf("ssh %s: no size of the place: %q", e.host, out)
}
