package k8s

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/substrat/substrat/executor"
)

// A Tree is a local directory (or, read-only, a regular file) that a
// turn's copies carry into the pod's workspace volume: the workspace
// root itself (Rel ""), and what the process sees besides it there, at
// Rel below the mount (a git workspace's clone's git directory at .git,
// a read-only link, the repository a clone's alternates name). Trees
// later in a list may lie inside earlier ones: the earlier's copy leaves
// them out, both ways.
type Tree struct {
	// Rel is the tree's place in the pod's workspace: a clean,
	// slash-separated relative path, "" for the workspace itself.
	Rel string
	// Local is the tree on this machine.
	Local string
	// RW: the tree comes back (PullTrees, SalvageTrees). Only a
	// directory can.
	RW bool
	// Keep names entries of a read-write tree (slash-separated,
	// relative to it) that go into the pod but never come back, and are
	// never deleted here: what the process may not change (a clone's
	// config, hooks, info).
	Keep []string
	// Files replaces, in the pod's copy, the bytes of files of the tree
	// (by their names relative to it), or adds them.
	Files map[string][]byte
}

// checkTrees checks that trees are fit to copy: clean relative places,
// none twice, the first the workspace itself.
func checkTrees(trees []Tree) error {
	if len(trees) == 0 || trees[0].Rel != "" {
		return errors.New("k8s executor: the first tree is the workspace's root")
	}
	seen := map[string]bool{}
	for _, t := range trees {
		if t.Rel != "" && (!filepath.IsLocal(t.Rel) || path.Clean(t.Rel) != t.Rel || strings.Contains(t.Rel, "\\")) {
			return fmt.Errorf("k8s executor: %q is not a clean relative place in the workspace", t.Rel)
		}
		if seen[t.Rel] {
			return fmt.Errorf("k8s executor: two trees at %q", t.Rel)
		}
		seen[t.Rel] = true
	}
	return nil
}

// under reports whether name is base or lies under it ("" holds all).
func under(name, base string) bool {
	return base == "" || name == base || strings.HasPrefix(name, base+"/")
}

// kept reports whether name is one of keep or lies under one.
func kept(name string, keep []string) bool {
	for _, k := range keep {
		if under(name, k) {
			return true
		}
	}
	return false
}

// aboveKept reports whether name is a parent directory of one of keep.
func aboveKept(name string, keep []string) bool {
	for _, k := range keep {
		if strings.HasPrefix(k, name+"/") {
			return true
		}
	}
	return false
}

// OwnDir is where, in the pod's workspace, the trees of the agent's
// provider go (its CLI's own HOME, its MCP config), at their place
// relative to the Substrat home: the copies of the workspace root leave
// it out whole, both ways, as they do .git, so nothing of it lands in
// the root here (a directory of that name in the root stays here).
const OwnDir = ".substrat-home"

// nested returns the places of the trees after trees[i] that lie inside
// it, relative to it; for the root, OwnDir stands for the trees under
// it.
func nested(trees []Tree, i int) []string {
	var out []string
	for j, u := range trees {
		if j != i && u.Rel != trees[i].Rel && under(u.Rel, trees[i].Rel) {
			rel := strings.TrimPrefix(strings.TrimPrefix(u.Rel, trees[i].Rel), "/")
			if trees[i].Rel == "" && under(rel, OwnDir) {
				rel = OwnDir
			}
			if !slices.Contains(out, rel) {
				out = append(out, rel)
			}
		}
	}
	return out
}

// PushTrees copies trees into the workspace of the pod of agent's
// incarnation, which it then mirrors: the first, the workspace root, as
// Push copies it, and each other at its place, under the same rules
// (no .git inside any, no symlink out of its tree), with the bytes of
// its Files. A read-only directory that holds no other tree, and that
// has not changed here (its names, sizes, modes and times) since this
// executor last pushed it for agent, is kept as the pod holds it, if it
// does (the agent's claim outlives its pods), and not sent again: the
// agent may have changed that copy meanwhile, as it may during a turn,
// and nothing of it ever comes back.
func (e *Executor) PushTrees(ctx context.Context, agent, incarnation string, trees []Tree) error {
	if err := checkTrees(trees); err != nil {
		return err
	}
	stamps := map[string]string{}
	for i, t := range trees {
		if keepable(trees, i) {
			if s, err := stampOf(t.Local); err == nil {
				stamps[t.Rel] = s
			}
		}
	}
	var keep []string
	if v, ok := e.held.Load(agent); ok {
		for rel, s := range v.(map[string]string) {
			if stamps[rel] == s {
				keep = append(keep, rel)
			}
		}
	}
	sort.Strings(keep)
	at := time.Now()
	now, err := stampTrees(sendOf(trees, keep), trees)
	if err != nil {
		return err
	}
	prev := e.lastPush(agent)
	e.pushed.Delete(agent) // until this push is done
	if prev != nil {
		if err := e.pushChanges(ctx, agent, incarnation, trees, keep, prev, now); err == nil {
			e.pushed.Store(agent, &pushed{token: prev.token, at: at, entries: now, kept: keep})
			e.held.Store(agent, stamps)
			return nil
		}
		// Any failure: a full push says why, if it fails too.
	}
	token := newToken()
	err = e.push(ctx, agent, incarnation, trees, keep, token)
	if errors.Is(err, errNotHeld) {
		keep = nil
		if now, err = stampTrees(trees, trees); err == nil {
			err = e.push(ctx, agent, incarnation, trees, nil, token)
		}
	}
	if err != nil {
		e.held.Delete(agent)
		return err
	}
	e.held.Store(agent, stamps)
	e.pushed.Store(agent, &pushed{token: token, at: at, entries: now, kept: keep})
	return nil
}

// sendOf returns the trees but those at keep.
func sendOf(trees []Tree, keep []string) []Tree {
	var send []Tree
	for _, t := range trees {
		if !slices.Contains(keep, t.Rel) {
			send = append(send, t)
		}
	}
	return send
}

// errNotHeld: the pod no longer holds what a push would keep.
var errNotHeld = errors.New("the pod does not hold what it would keep")

// keepable reports whether trees[i] may be kept in the pod from one
// push to the next: a read-only directory with no other tree inside it,
// inside no other read-only one.
func keepable(trees []Tree, i int) bool {
	t := trees[i]
	if t.RW || t.Rel == "" || len(nested(trees, i)) > 0 {
		return false
	}
	for j, u := range trees {
		if j != i && !u.RW && under(t.Rel, u.Rel) {
			return false
		}
	}
	fi, err := os.Stat(t.Local)
	return err == nil && fi.IsDir()
}

// stampOf is what identifies the tree local's state here: a hash of its
// names, kinds, modes, sizes and modification times (and symlinks'
// targets).
func stampOf(local string) (string, error) {
	h := sha256.New()
	err := walkTree(local, func(p, name string, d fs.DirEntry) error {
		fi, err := d.Info()
		if err != nil {
			return err
		}
		target := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, _ = os.Readlink(p)
		}
		fmt.Fprintf(h, "%q %o %d %d %q\n", name, fi.Mode(), fi.Size(), fi.ModTime().UnixNano(), target)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)), err
}

// push sends trees but those at keep, which the pod keeps (errNotHeld
// if it does not hold one).
func (e *Executor) push(ctx context.Context, agent, incarnation string, trees []Tree, keep []string, token string) error {
	send := sendOf(trees, keep)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTrees(pw, send, trees, nil)) }()
	defer pr.CloseWithError(errors.New("push ended"))
	var stderr bytes.Buffer
	p, err := e.Start(ctx, &executor.Cmd{Agent: agent, Incarnation: incarnation,
		Argv:  pushArgv(e.opts.MountPath, keep),
		Env:   tokenEnv(agent, token),
		Stdin: pr, Stderr: &limitedBuffer{b: &stderr, n: 4096}})
	if err != nil {
		return err
	}
	err = p.Wait()
	if ee := (*executor.ExitError)(nil); errors.As(err, &ee) && ee.Code == 4 {
		return errNotHeld
	}
	if err != nil {
		return fmt.Errorf("copying %s into the pod: %w: %s", trees[0].Local, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// writeTrees writes send, of all, as one tar stream (each without the
// trees of all inside it): see PushTrees. With only, it writes only the
// entries whose names only holds. It writes in chunks of feedChunk:
// each write becomes one frame of the exec's input, which the pod's
// wrapper reads with a process of its own (a small write per header
// made a push of 2,000 small files take 8 s on kwok, not 0.5).
func writeTrees(w io.Writer, send, all []Tree, only map[string]bool) error {
	bw := bufio.NewWriterSize(w, feedChunk)
	if err := writeTar(bw, send, all, only); err != nil {
		return err
	}
	return bw.Flush()
}

// feedChunk is the size of the writes of a push's stream: the frames of
// ssh.Feed are at most that.
const feedChunk = 32 << 10

func writeTar(w io.Writer, send, all []Tree, only map[string]bool) error {
	tw := tar.NewWriter(w)
	for _, t := range send {
		i := slices.IndexFunc(all, func(u Tree) bool { return u.Rel == t.Rel })
		err := eachEntry(t, nested(all, i), func(en entry) error {
			switch {
			case only != nil && !only[en.name]:
				return nil
			case en.fi == nil:
				return writeBytes(tw, en.name, en.data)
			}
			return writeEntry(tw, en.p, en.name, en.inTree, en.fi)
		})
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

// An entry is what a tree puts at name in the pod's workspace: the
// file, directory or symlink at p here (inTree: its name relative to
// the tree's top), or, with no fi, the bytes data (the tree's Files).
type entry struct {
	name, p, inTree string
	fi              fs.FileInfo
	data            []byte
}

// eachEntry calls f with each entry of the tree t, parents first, but
// for what skip names (relative to it).
func eachEntry(t Tree, skip []string, f func(entry) error) error {
	at := func(name string) string { return path.Join(t.Rel, name) }
	fi, err := os.Stat(t.Local)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		if t.Rel == "" {
			return fmt.Errorf("k8s executor: the workspace %s is not a directory", t.Local)
		}
		return f(entry{name: t.Rel, p: t.Local, inTree: path.Base(t.Rel), fi: fi})
	}
	if t.Rel != "" {
		if err := f(entry{name: t.Rel, p: t.Local, inTree: ".", fi: fi}); err != nil {
			return err
		}
	}
	done := map[string]bool{}
	err = walkTree(t.Local, func(p, name string, d fs.DirEntry) error {
		if kept(name, skip) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if b, ok := t.Files[name]; ok {
			done[name] = true
			return f(entry{name: at(name), data: b})
		}
		fi, err := d.Info()
		if err != nil {
			return nil // gone meanwhile
		}
		return f(entry{name: at(name), p: p, inTree: name, fi: fi})
	})
	if err != nil {
		return err
	}
	var more []string
	for name := range t.Files {
		if !done[name] && !kept(name, skip) && filepath.IsLocal(name) && !skipped(name) {
			more = append(more, name)
		}
	}
	sort.Strings(more)
	for _, name := range more {
		if err := f(entry{name: at(name), data: t.Files[name]}); err != nil {
			return err
		}
	}
	return nil
}

// writeBytes writes a regular file name that holds b.
func writeBytes(tw *tar.Writer, name string, b []byte) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b))}); err != nil {
		return err
	}
	_, err := tw.Write(b)
	return err
}

// PullTrees copies back, from the workspace of the pod of agent's
// incarnation, each read-write tree of trees into its Local, which it
// then mirrors, as Pull does the workspace root, but for its Keep and
// the trees inside it, which are neither brought back nor deleted. The
// bounds are over them all: over them, none comes back (ErrRefused).
// Each is unpacked aside first (under tmp), all before any is moved
// in. A read-write tree that the pod does not hold as a directory (a
// symlink is not one) fails it.
func (e *Executor) PullTrees(ctx context.Context, agent, incarnation string, trees []Tree, tmp string) error {
	left, err := e.pullTrees(ctx, agent, incarnation, trees, tmp, false)
	if err != nil || left > 0 {
		// The pod holds what this side has not: the next push sends all.
		e.pushed.Delete(agent)
	} else {
		e.markClean(agent)
	}
	return err
}

// SalvageTrees copies back, from the workspace of the pod of agent's
// incarnation, what a turn cut short before its pull left there: as
// PullTrees, under the same rules and bounds, but only what is missing
// here or is a regular file here that is older (to the second, a tar
// stream's precision) than the pod's; it replaces nothing of another
// kind (no symlink or directory over a file, nor a file over either)
// and deletes nothing. A tree the pod does not hold is skipped. Call it
// before the PushTrees that replaces the pod's copy, in the pod that
// mounts the volume the lost one did.
func (e *Executor) SalvageTrees(ctx context.Context, agent, incarnation string, trees []Tree, tmp string) error {
	_, err := e.pullTrees(ctx, agent, incarnation, trees, tmp, true)
	return err
}

// staged is a tree unpacked aside, to move in.
type staged struct {
	t     Tree
	dir   string
	names map[string]kind
	keep  []string
}

// pullTrees is PullTrees, or SalvageTrees; it returns how many entries
// of the pod's copy it left out.
func (e *Executor) pullTrees(ctx context.Context, agent, incarnation string, trees []Tree, tmp string, salvage bool) (int64, error) {
	if err := checkTrees(trees); err != nil {
		return 0, err
	}
	var b budget
	var all []staged
	defer func() {
		for _, s := range all {
			os.RemoveAll(s.dir)
		}
	}()
	token := e.pushToken(agent)
	for i, t := range trees {
		if !t.RW {
			continue
		}
		if token != "" && !salvage {
			before := b
			st, err := e.pullChanges(ctx, agent, incarnation, trees, i, tmp, token, &b)
			switch {
			case err == nil:
				all = append(all, st)
				continue
			case errors.Is(err, ErrRefused):
				os.RemoveAll(st.dir)
				return 0, fmt.Errorf("copying the pod's %s back into %s: %w", path.Join(e.opts.MountPath, t.Rel), t.Local, err)
			}
			// Any other failure: a full copy back.
			os.RemoveAll(st.dir)
			b = before
		}
		keep := append(append([]string(nil), t.Keep...), nested(trees, i)...)
		dir, err := os.MkdirTemp(tmp, "substrat-pull-")
		if err != nil {
			return 0, err
		}
		all = append(all, staged{t: t, dir: dir, keep: keep})
		names, err := e.readPod(ctx, agent, incarnation, t.Rel, dir, keep, &b)
		if salvage && errors.Is(err, errNoTree) {
			all[len(all)-1].names = map[string]kind{}
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("copying the pod's %s back into %s: %w", path.Join(e.opts.MountPath, t.Rel), t.Local, err)
		}
		all[len(all)-1].names = names
	}
	for _, s := range all {
		var err error
		if salvage {
			err = salvageInto(s.dir, s.t.Local, s.names, s.keep)
		} else {
			err = mirror(s.dir, s.t.Local, s.names, s.keep)
		}
		if err != nil {
			return 0, err
		}
	}
	return b.skipped, nil
}

// errNoTree: the pod holds no directory where a tree goes.
var errNoTree = errors.New("no such directory in the pod")

// readPod unpacks the tree at rel of the pod's workspace into stage,
// leaving out what keep names (in the pod too, where tar can: GNU tar's
// exact, anchored exclusions).
func (e *Executor) readPod(ctx context.Context, agent, incarnation, rel, stage string, keep []string, b *budget) (map[string]kind, error) {
	argv := []string{"/bin/sh", "-c", pullScript, "substrat-pull", path.Join(e.opts.MountPath, rel)}
	if len(keep) > 0 {
		argv = append(argv, "--anchored", "--no-wildcards")
		for _, k := range keep {
			argv = append(argv, "--exclude=./"+k)
		}
	}
	return e.readStream(ctx, agent, incarnation, argv, stage, keep, b, nil)
}

// readStream runs argv in the pod, whose output is what head reads (if
// not nil) then a tar stream, which it unpacks into stage as readPod
// does. Exit status 3 is errNoTree.
func (e *Executor) readStream(ctx context.Context, agent, incarnation string, argv []string, stage string, keep []string, b *budget,
	head func(*bufio.Reader) error) (map[string]kind, error) {
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	p, err := e.Start(ctx, &executor.Cmd{Agent: agent, Incarnation: incarnation, Argv: argv, Env: []string{copyPath},
		Stdout: pw, Stderr: &limitedBuffer{b: &stderr, n: 4096}})
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		err := p.Wait()
		pw.Close()
		done <- err
	}()
	br := bufio.NewReaderSize(pr, 64<<10)
	var names map[string]kind
	var rerr error
	if head != nil {
		rerr = head(br)
	}
	if rerr == nil {
		names, rerr = readTar(br, stage, keep, b)
	}
	if rerr == nil {
		// What follows the archive's end (tar's padding of its last
		// record), up to a bound.
		if n, _ := io.CopyN(io.Discard, br, 1<<20); n == 1<<20 {
			rerr = fmt.Errorf("%w: more than 1 MiB after the end of its archive", ErrRefused)
		}
	}
	if rerr != nil {
		p.Kill()
	}
	pr.CloseWithError(errors.New("pull ended"))
	werr := <-done
	ee := (*executor.ExitError)(nil)
	if rerr == nil && errors.As(werr, &ee) && ee.Code == 1 {
		// GNU tar's "some files differ": one changed while it was read
		// (a process the agent left in the pod). The archive is whole.
		werr = nil
	}
	switch {
	case werr != nil && ee != nil && ee.Code == 3:
		return nil, fmt.Errorf("%w: %s", errNoTree, strings.TrimSpace(stderr.String()))
	case rerr != nil:
		return nil, rerr
	case werr != nil:
		return nil, fmt.Errorf("%w: %s", werr, strings.TrimSpace(stderr.String()))
	}
	return names, nil
}
