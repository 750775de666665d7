package k8s

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"context"
)

// Incremental copies back.
//
// After a push, the copy back of a read-write tree sends the pod's full
// list of names (by kind: directories, regular files, symlinks), and a
// tar stream of only the entries whose status changed after the push's
// end: their ctime is newer than the time of the token file the push
// wrote last (tokenScript). A process can set a file's times, not its
// ctime. This side then mirrors as a full copy back does: what the list
// does not hold (or holds as another kind) is deleted here, and what the
// stream holds moves in, under the same rules and bounds. An entry that
// did not change there is left as it is here, which is what the push
// sent, or what was changed here since (the next push sends it).
//
// The pod must hold the token of the last push (else exit 5: a full
// copy back); it needs GNU tar (--null -T) and a find with -print0 and
// -cnewer; any failure but a refusal falls back to a full copy back.

// pullIncScript: $1 the tree's directory, $2 the token, $3 its file,
// then the find expression of what is left out. It prints the sizes of
// the three lists on a line, the lists (NUL-separated names, "./"
// first), then the tar stream.
const pullIncScript = `d=$1; tok=$2; f=$3; shift 3;` +
	` [ -d "$d" ] && [ ! -h "$d" ] || { echo "no directory at $d" >&2; exit 3; };` +
	` [ -f "$f" ] && [ ! -h "$f" ] && [ "$(head -c 64 -- "$f")" = "$tok" ] || { echo "not the pod of the last push" >&2; exit 5; };` +
	` cd -- "$d" || exit 2; find . \( -type d ! -perm -u=rx -exec chmod u+rwx {} \; \) -o` +
	` \( -type f ! -perm -u=r -exec chmod u+r {} \; \) 2>/dev/null;` +
	` t=$(mktemp -d) || exit 2;` +
	` for k in d f l; do find . \( "$@" \) -prune -o -type $k -print0 >"$t/$k" || exit 2; done;` +
	` echo $(wc -c <"$t/d") $(wc -c <"$t/f") $(wc -c <"$t/l") && cat "$t/d" "$t/f" "$t/l" && rm -rf "$t" &&` +
	` find . \( "$@" \) -prune -o -cnewer "$f" -print0 | tar --null --no-recursion -T - -c -f -`

// maxLists bounds the bytes of the lists of names a copy back reads.
const maxLists = 64 << 20

// pruneArgs is the find expression of what a copy back of a tree leaves
// out: .git and lost+found at any depth (see skipped), and keep.
func pruneArgs(keep []string) []string {
	esc := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`)
	args := []string{"-name", ".git", "-o", "-name", "lost+found"}
	for _, k := range keep {
		args = append(args, "-o", "-path", "./"+esc.Replace(k))
	}
	return args
}

// readLists reads the lists of pullIncScript from br into kinds, at
// most maxFiles names.
func readLists(br *bufio.Reader, kinds map[string]kind, keep []string) error {
	line, err := br.ReadString('\n')
	if err != nil || len(line) > 64 {
		return fmt.Errorf("the pod's lists of names: %q, %v", trimName(line), err)
	}
	f := strings.Fields(line)
	if len(f) != 3 {
		return fmt.Errorf("the pod's lists of names: %q", trimName(line))
	}
	var total int64
	for i, k := range []kind{kindDir, kindFile, kindLink} {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("the pod's lists of names: %q", trimName(line))
		}
		if total += n; total > maxLists {
			return fmt.Errorf("%w: its names take more than %d bytes", ErrRefused, maxLists)
		}
		list := make([]byte, n)
		if _, err := io.ReadFull(br, list); err != nil {
			return fmt.Errorf("the pod's lists of names: %w", err)
		}
		for _, raw := range bytes.Split(list, []byte{0}) {
			name := strings.TrimSuffix(strings.TrimPrefix(path.Clean("/"+string(raw)), "/"), "/")
			if name == "" || !filepath.IsLocal(name) || skipped(name) || kept(name, keep) || kinds[name] != 0 {
				continue
			}
			if int64(len(kinds)) >= maxFiles {
				return fmt.Errorf("%w: it holds more than %d entries", ErrRefused, maxFiles)
			}
			kinds[name] = k
		}
	}
	return nil
}

// pullChanges copies back the read-write tree t (of trees, whose i-th it
// is) as above, after the push whose token is token, into a stage under
// tmp, and mirrors it into t.Local.
func (e *Executor) pullChanges(ctx context.Context, agent, incarnation string, trees []Tree, i int, tmp, token string, b *budget) (staged, error) {
	t := trees[i]
	keep := append(append([]string(nil), t.Keep...), nested(trees, i)...)
	dir, err := os.MkdirTemp(tmp, "substrat-pull-")
	if err != nil {
		return staged{}, err
	}
	st := staged{t: t, dir: dir, keep: keep}
	argv := append([]string{"/bin/sh", "-c", pullIncScript, "substrat-pull", path.Join(e.opts.MountPath, t.Rel), token, tokenFile(agent)},
		pruneArgs(keep)...)
	kinds := map[string]kind{}
	names, err := e.readStream(ctx, agent, incarnation, argv, dir, keep, b, func(br *bufio.Reader) error {
		return readLists(br, kinds, keep)
	})
	if err != nil {
		return st, err
	}
	for name, k := range names {
		kinds[name] = k // what the stream holds, as it holds it
	}
	st.names = kinds
	return st, nil
}

// pushToken is the token of agent's last push, "" if none.
func (e *Executor) pushToken(agent string) string {
	if v, ok := e.pushed.Load(agent); ok {
		return v.(*pushed).token
	}
	return ""
}
