package k8s

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/substrat/substrat/executor"
)

// Incremental pushes.
//
// A push after a clean copy back sends only what changed here since the
// last push: the entries whose stamp (kind, size, modification time,
// executable bit, a symlink's target, the bytes of Files) differs, and
// the names gone here, which the pod deletes first. That is what the
// pod's copy holds as this side does: what the process changed there
// came back (PullTrees), and is sent again only where the copy back
// changed it here. A file modified within racyWindow of the last push's
// stamps is sent again whatever its stamp says (its time may not have
// moved: git's "racily clean" entries).
//
// The pod proves it is the one the last push went to by a token, a
// random string that push wrote to a file of its own /tmp (the pod's,
// gone with it): a pod that does not hold it (made again, its /tmp
// lost) gets a full push, and so does any push after one whose copy
// back did not come (a pod gone, a copy back refused, a daemon that
// restarted: the state is this executor's, in memory). So does any
// failure of the incremental one.
//
// What the agent leaves in its copy that the copy back leaves out
// without a word goes at each push, as a full push would delete it: a
// tree's Keep and a read-only tree not kept are sent whole, and every
// .git and lost+found but the trees' places and the volume's own, and
// what lies under OwnDir outside the trees, are deleted (incFind). What
// else does not come back (a symlink out of the tree, a FIFO) makes the
// next push a full one. A change made by a process that outlived its
// turn, after the copy back, stays in the pod until a full push. It is
// the agent's own copy: what comes back is checked as ever, and nothing
// of it reaches this side otherwise.

// racyWindow: a file modified this close to the stamps of a push is
// sent again at the next.
const racyWindow = 2 * time.Second

// pushed is what an agent's pod holds since a push.
type pushed struct {
	token string
	// clean: a copy back came since the push, so the pod holds what
	// this side does.
	clean   bool
	at      time.Time         // when the stamps were taken
	entries map[string]string // the stamps of what went, by name in the pod's workspace
	kept    []string          // the trees the pod kept at that push
}

// newToken is a push's token.
func newToken() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// tokenFile is where, in the agent's pod, its push's token is.
func tokenFile(agent string) string { return "/tmp/substrat-push-" + agent }

// tokenEnv is the environment of a push of agent with token.
func tokenEnv(agent, token string) []string {
	return []string{copyPath, "SUBSTRAT_PUSH_TOKEN=" + token, "SUBSTRAT_PUSH_TOKEN_FILE=" + tokenFile(agent)}
}

// stampTrees returns the stamps of the entries of send (of all) that a
// push would write.
func stampTrees(send, all []Tree) (map[string]string, error) {
	out := map[string]string{}
	for _, t := range send {
		i := slices.IndexFunc(all, func(u Tree) bool { return u.Rel == t.Rel })
		err := eachEntry(t, nested(all, i), func(en entry) error {
			if s := stamp(en); s != "" {
				out[en.name] = s
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// stamp is what stands for en's state ("" for what writeEntry leaves
// out): its kind first (a letter).
func stamp(en entry) string {
	switch fi := en.fi; {
	case fi == nil:
		sum := sha256.Sum256(en.data)
		return "b " + hex.EncodeToString(sum[:16])
	case fi.IsDir():
		return "d"
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(en.p)
		if err != nil || !safeLink(en.inTree, target) {
			return ""
		}
		return "l " + target
	case fi.Mode().IsRegular():
		return fmt.Sprintf("f %d %d %t", fi.Size(), fi.ModTime().UnixNano(), fi.Mode()&0o100 != 0)
	}
	return ""
}

// racy reports whether the file stamp s was modified within racyWindow
// of at, or after it.
func racy(s string, at time.Time) bool {
	f := strings.Fields(s)
	if len(f) != 4 || f[0] != "f" {
		return false
	}
	ns, err := strconv.ParseInt(f[2], 10, 64)
	return err != nil || !time.Unix(0, ns).Before(at.Add(-racyWindow))
}

// changes returns what goes from prev to now, of trees: the names to
// delete in the pod first (the topmost only), and those to send. What
// the pod's copy may hold that no copy back brought here is replaced
// whole: a read-only tree (but one kept: the pod's, left alone), and a
// read-write tree's Keep (a clone's config, hooks, info; a planted
// commondir). So is a tree kept at prev's push and sent now.
func changes(prev *pushed, now map[string]string, trees []Tree, keep []string) (dels []string, send map[string]bool) {
	send = map[string]bool{}
	var whole []string
	for _, t := range trees {
		switch {
		case slices.Contains(keep, t.Rel):
		case !t.RW:
			whole = append(whole, t.Rel)
		default:
			for _, k := range t.Keep {
				if name := path.Join(t.Rel, k); !slices.Contains(keep, name) {
					whole = append(whole, name)
				}
			}
		}
	}
	dels = append(dels, whole...)
	for name, s := range now {
		old, ok := prev.entries[name]
		if !ok || old != s || racy(s, prev.at) || slices.ContainsFunc(whole, func(w string) bool { return under(name, w) }) {
			send[name] = true
		}
	}
	for name, old := range prev.entries {
		if kept(name, keep) {
			continue
		}
		if s, ok := now[name]; !ok || s[0] != old[0] {
			dels = append(dels, name)
		}
	}
	for _, rel := range prev.kept {
		if !slices.Contains(keep, rel) {
			dels = append(dels, rel)
		}
	}
	sort.Strings(dels)
	var top []string
	for _, d := range dels {
		if len(top) == 0 || !under(d, top[len(top)-1]) {
			top = append(top, d)
		}
	}
	return top, send
}

// incScript checks that the pod holds the token of the last push ($2,
// in the file $3; else exit 5), deletes, under the workspace $1, the
// NUL-separated names of the first $4 bytes of its input, and every
// .git and lost+found but the trees' places and the volume's own
// lost+found (no push puts one there: a copy back leaves them out; the
// find arguments after $4, incFind), and unpacks the tar stream of the
// rest there. A name that cannot be deleted (a directory the agent
// locked) fails it: a full push unlocks.
const incScript = `umask 022; d=$1; tok=$2; f=$3; n=$4; shift 4;` +
	` [ -d "$d" ] || { echo "no workspace at $d" >&2; exit 2; };` +
	` [ -f "$f" ] && [ ! -h "$f" ] && [ "$(head -c 64 -- "$f")" = "$tok" ] || { echo "not the pod of the last push" >&2; exit 5; };` +
	` cd -- "$d" || exit 2;` +
	` head -c "$n" | xargs -0 -r rm -rf -- || exit 6;` +
	` find . -mindepth 1 "$@" -prune -exec rm -rf {} + || exit 6;` +
	` tar -x -o -f -` + tokenScript

// incFind is the find expression of incScript that picks, in the pod's
// workspace, every .git and lost+found but the places of trees and the
// volume's own lost+found; and what lies under OwnDir that is neither a
// tree, in one, nor a directory that holds one (the root's copy back
// leaves OwnDir out whole, and a tree's holds only the tree).
func incFind(trees []Tree) []string {
	esc := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`)
	argv := []string{"(", "(", "(", "-name", ".git", "-o", "-name", "lost+found", ")", "!", "-path", "./lost+found"}
	for _, t := range trees {
		if t.Rel != "" {
			argv = append(argv, "!", "-path", esc.Replace("./"+t.Rel))
		}
	}
	argv = append(argv, ")")
	if slices.ContainsFunc(trees, func(t Tree) bool { return t.Rel == OwnDir }) {
		return append(argv, ")")
	}
	argv = append(argv, "-o", "(", "-path", esc.Replace("./"+OwnDir)+"/*")
	var parents []string
	for _, t := range trees {
		if t.Rel == "" || !under(t.Rel, OwnDir) {
			continue
		}
		argv = append(argv, "!", "-path", esc.Replace("./"+t.Rel), "!", "-path", esc.Replace("./"+t.Rel)+"/*")
		for p := path.Dir(t.Rel); p != OwnDir && p != "."; p = path.Dir(p) {
			if !slices.Contains(parents, p) {
				parents = append(parents, p)
				argv = append(argv, "!", "-path", esc.Replace("./"+p))
			}
		}
	}
	return append(argv, ")", ")")
}

// tokenScript, after a push, writes the token of $SUBSTRAT_PUSH_TOKEN
// into the file $SUBSTRAT_PUSH_TOKEN_FILE (if set), replacing whatever is
// there (a FIFO, a symlink) by a rename: a new file, whose time is the
// push's end, which the next copy back compares the pod's files with
// (pullChanges).
const tokenScript = ` && { [ -z "${SUBSTRAT_PUSH_TOKEN_FILE:-}" ] || { t=$(mktemp /tmp/substrat-push.XXXXXX) &&` +
	` printf %s "$SUBSTRAT_PUSH_TOKEN" >"$t" && mv -f -- "$t" "$SUBSTRAT_PUSH_TOKEN_FILE"; }; }`

// pushChanges sends what changed since prev (see above).
func (e *Executor) pushChanges(ctx context.Context, agent, incarnation string, trees []Tree, keep []string, prev *pushed, now map[string]string) error {
	dels, only := changes(prev, now, trees, keep)
	var list bytes.Buffer
	for _, d := range dels {
		list.WriteString("./" + d + "\x00")
	}
	var send []Tree
	for _, t := range trees {
		if !slices.Contains(keep, t.Rel) {
			send = append(send, t)
		}
	}
	pr, pw := io.Pipe()
	go func() {
		if _, err := pw.Write(list.Bytes()); err != nil {
			pw.CloseWithError(err)
			return
		}
		pw.CloseWithError(writeTrees(pw, send, trees, only))
	}()
	defer pr.CloseWithError(errors.New("push ended"))
	var stderr bytes.Buffer
	p, err := e.Start(ctx, &executor.Cmd{Agent: agent, Incarnation: incarnation,
		Argv: append([]string{"/bin/sh", "-c", incScript, "substrat-push", e.opts.MountPath, prev.token, tokenFile(agent), strconv.Itoa(list.Len())}, incFind(trees)...),
		Env:  tokenEnv(agent, prev.token), Stdin: pr, Stderr: &limitedBuffer{b: &stderr, n: 4096}})
	if err != nil {
		return err
	}
	if err := p.Wait(); err != nil {
		return fmt.Errorf("copying what changed in %s into the pod: %w: %s", trees[0].Local, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// markClean notes that agent's copy back came: the pod holds what this
// side does.
func (e *Executor) markClean(agent string) {
	if v, ok := e.pushed.Load(agent); ok {
		p := *v.(*pushed)
		p.clean = true
		e.pushed.Store(agent, &p)
	}
}

// lastPush is agent's state since its last push, if the pod may be
// sent only what changed (nil: a full push).
func (e *Executor) lastPush(agent string) *pushed {
	if v, ok := e.pushed.Load(agent); ok && v.(*pushed).clean {
		return v.(*pushed)
	}
	return nil
}
