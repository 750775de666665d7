package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/executor/k8s"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/workspace"
)

// What a turn in a pod carries besides the workspace root.
//
// A pod has one volume, the workspace's, at its MountPath, where the
// process works; it sees nothing else of this machine. So what a local
// sandbox binds besides the root goes into that volume as copies
// (k8s.Tree), at the place the sandbox shows it relative to /workspace,
// with the SSH executor's rules (remote.go):
//
//   - a git workspace's clone's git directory, read-write, at .git (where
//     git run in the workspace finds it, as in the sandbox), and the
//     repository's .git, which its alternates and origin name by this
//     machine's path, read-only at .git/.substrat-origin, with the two
//     files that name it rewritten in the pod's copy only (k8s.GitTrees);
//     of the git directory, what the sandbox shows read-only (config,
//     hooks, info), the alternates and any commondir or gitdir file never
//     come back;
//   - a read-only link under /workspace, and a view's read-only .git, at
//     their place; never brought back, and their places here neither
//     replaced nor deleted by what comes back.
//
// A read-write link is refused (as on an ssh executor), and so is a
// read-only one outside /workspace: the pod has no such path. A
// read-only root (a read-only view) goes there and never comes back.

// k8sTrees returns the trees of a turn of sess in a pod whose workspace
// is mounted at mountPath: its root first.
func (h *host) k8sTrees(sess *fsstore.Session, target, mountPath string) ([]k8s.Tree, error) {
	spec, w, err := h.core.AgentWorkspace(sess)
	if err != nil {
		return nil, err
	}
	if w == nil {
		return nil, fmt.Errorf("%s runs on %s, which needs a workspace (substrat agent create --workspace)", sess.Name, target)
	}
	gitDir := h.store.Layout().WorkspaceGitDir(w.Scope, w.Name)
	trees := []k8s.Tree{{Local: spec.Root.Host, RW: !spec.RootReadOnly}}
	for _, m := range spec.Mounts {
		switch {
		case w.Git != nil && m.Host == gitDir && m.Target == workspace.GitDirTarget && !m.ReadOnly:
			gt, err := k8s.GitTrees(gitDir, w.Git.CommonDir, mountPath)
			if err != nil {
				return nil, fmt.Errorf("workspace %s: %w", sess.Workspace, err)
			}
			trees = append(trees, gt...)
		case w.Git != nil && m.ReadOnly && (strings.HasPrefix(m.Host, gitDir+"/") || m.Host == w.Git.CommonDir && m.Target == m.Host):
			// The clone's read-only files and its repository: in the
			// git trees.
		case !m.ReadOnly:
			return nil, fmt.Errorf("%s runs on %s, and its workspace %s links %s read-write: not on a Kubernetes executor "+
				"(only read-only links go into a pod, as copies)", sess.Name, target, sess.Workspace, m.Host)
		default:
			rel, ok := strings.CutPrefix(m.Target, bwrap.DefaultWorkdir+"/")
			if !ok {
				return nil, fmt.Errorf("%s runs on %s, and its workspace %s links %s at %s, outside %s: "+
					"a pod has only its workspace volume; link it under %s", sess.Name, target, sess.Workspace, m.Host, m.Target,
					bwrap.DefaultWorkdir, bwrap.DefaultWorkdir)
			}
			trees = append(trees, k8s.Tree{Rel: rel, Local: m.Host})
		}
	}
	return trees, nil
}

// k8sCopyIn readies the pod's workspace for a turn: what a turn cut
// short left in its volume vol is salvaged first, unless the agent's
// last turn came back in full from that volume (kube_synced.go), then
// trees are pushed (k8sStart removes the record of the volume in sync
// before the process starts).
func (h *host) k8sCopyIn(ctx context.Context, e *k8s.Executor, sess *fsstore.Session, inc, vol string, trees []k8s.Tree) error {
	if !h.kubes.isSynced(sess.ID, vol) {
		err := e.SalvageTrees(ctx, sess.ID, inc, trees, "")
		switch {
		case errors.Is(err, k8s.ErrRefused):
			// What is left there is over the bounds: it is never
			// taken, and the push replaces it (else no turn could run).
			h.log.Warn("what a lost turn left in its pod was not salvaged", "agent", sess.ID, "target", e.Target().String(), "err", err)
		case err != nil:
			return fmt.Errorf("bringing back what was left in the pod of %s: %w", sess.Name, err)
		}
	}
	if err := mountPoints(trees); err != nil {
		return fmt.Errorf("workspace %s: %w", sess.Workspace, err)
	}
	return e.PushTrees(ctx, sess.ID, inc, trees)
}

// mountPoints makes here, in a read-write root, the places of the
// read-only trees inside it that are missing (an empty directory, or
// an empty file for a file), as bwrap makes a bind's mount point: the
// daemon's own sandboxes on the workspace (git's, read-only) need them.
func mountPoints(trees []k8s.Tree) error {
	if !trees[0].RW {
		return nil
	}
	var root *os.Root
	for _, t := range trees[1:] {
		if t.RW || t.Rel == ".git" || strings.HasPrefix(t.Rel, ".git/") || t.Rel == k8s.OwnDir || strings.HasPrefix(t.Rel, k8s.OwnDir+"/") {
			continue // not the workspace's: no mount point here
		}
		if root == nil {
			r, err := os.OpenRoot(trees[0].Local)
			if err != nil {
				return err
			}
			defer r.Close()
			root = r
		}
		if _, err := root.Lstat(t.Rel); err == nil {
			continue
		}
		fi, err := os.Stat(t.Local)
		if err != nil {
			return err
		}
		if dir := path.Dir(t.Rel); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		if fi.IsDir() {
			err = root.Mkdir(t.Rel, 0o755)
		} else {
			var f *os.File
			if f, err = root.OpenFile(t.Rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err == nil {
				err = f.Close()
			}
		}
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}
