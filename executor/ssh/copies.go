package ssh

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
)

// Copies lists the keys of what is kept on the host for the executor's
// home (Options.Home): the names under Root/Home that are ids (an
// agent's, a workspace's copy). What is there was made by the executor,
// but the host and the agents on it may have put anything beside: a
// name that is no id is not listed, and one that is names nothing more
// than a directory entry for Remove to remove (a symlink there goes,
// not what it leads to). Without a home it lists nothing: the copies of
// several homes under one root cannot be told apart.
func (e *Executor) Copies(ctx context.Context) ([]string, error) {
	if e.opts.Home == "" {
		return nil, fmt.Errorf("ssh executor: no home: whose copies are under %s cannot be told", e.host)
	}
	root, err := e.Root(ctx)
	if err != nil {
		return nil, err
	}
	// ls -q writes a name's newline, as any non-printable byte, as ?:
	// one name a line.
	out, err := e.run(ctx, `[ -d "$1" ] || exit 0; cd -- "$1" && ls -A -1 -q`, filepath.Join(root, e.opts.Home))
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, l := range strings.Split(string(out), "\n") {
		if idRE.MatchString(l) {
			keys = append(keys, l)
		}
	}
	return keys, nil
}
