package k8s

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
)

// Git workspaces in a pod.
//
// A git workspace's clone (package workspace) has its git directory
// beside its root on this machine, which a local sandbox binds at
// /workspace/.git, with its config, hooks/ and info/ read-only over it,
// and the repository's .git (the common directory) read-only at its own
// path, which the clone's objects/info/alternates and remote origin
// name. A pod has one volume, at MountPath, and no other path of this
// machine. So in the pod the git directory is a copy at .git in the
// workspace (where git run there finds it, as in the sandbox), and the
// repository's .git a copy inside it, at .git/.substrat-origin (no
// branch, tag or ref can be called so: git refuses a name part that
// begins with a dot; git ignores what it does not know in a git
// directory; and the work tree's status does not show it). The paths
// that name the repository are this machine's, and absolute, so two
// files differ in the pod's copy, and only there: objects/info/alternates
// names the copy's objects, and the clone's config gets a section more,
// url.<copy>.insteadOf <the repository's path>, so that origin is the
// copy (fetch, ls-remote). Neither comes back (nor do config, hooks/
// and info/, which the sandbox shows read-only, nor a commondir or
// gitdir file, which would send git elsewhere): what the agent wrote
// in them there stays there. What else comes back of the git directory
// (objects, refs, the index, logs) is data, under Pull's rules; the
// daemon's git reads the clone only inside a read-only sandbox, as an
// agent could. Anything the agent pushes to origin in the pod lands in
// the copy and is lost with it, where the sandbox would have refused
// it (the repository is read-only there).

// OriginRel is where, in the pod's workspace, the copy of a git
// workspace's repository goes (its .git, the common directory).
const OriginRel = ".git/.substrat-origin"

// GitKeep are the names of a clone's git directory that never come back
// from a pod: what the sandbox shows read-only (config, hooks, info),
// the alternates the pod's copy rewrites, and the files that would send
// git elsewhere (commondir, gitdir).
var GitKeep = []string{"config", "hooks", "info", "objects/info/alternates", "commondir", "gitdir", path.Base(OriginRel)}

// maxConfig bounds the clone's config read to rewrite it.
const maxConfig = 1 << 20

// GitTrees returns the trees of a git workspace's clone in a pod whose
// workspace is at mountPath: its git directory gitDir (read-write, at
// .git) and its repository's common directory commonDir (read-only, at
// OriginRel), with the two files that name the repository rewritten in
// the pod's copy (see above).
func GitTrees(gitDir, commonDir, mountPath string) ([]Tree, error) {
	config, err := readSmall(path.Join(gitDir, "config"))
	if err != nil {
		return nil, fmt.Errorf("the clone's config: %w", err)
	}
	exclude, err := readSmall(path.Join(gitDir, "info", "exclude"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("the clone's info/exclude: %w", err)
	}
	if len(exclude) > 0 && exclude[len(exclude)-1] != '\n' {
		exclude = append(exclude, '\n')
	}
	exclude = append(exclude, "# Added in the pod by the Substrat daemon: the agent's own files.\n/"+OwnDir+"/\n"...)
	origin := path.Join(mountPath, OriginRel)
	if len(config) > 0 && config[len(config)-1] != '\n' {
		config = append(config, '\n')
	}
	config = append(config, "# Added in the pod by the Substrat daemon: origin is the repository's copy here.\n"+
		"[url "+quote(origin)+"]\n\tinsteadOf = "+quote(commonDir)+"\n"...)
	return []Tree{
		{Rel: ".git", Local: gitDir, RW: true, Keep: GitKeep, Files: map[string][]byte{
			"config":                  config,
			"objects/info/alternates": []byte(path.Join(origin, "objects") + "\n"),
			"info/exclude":            exclude,
		}},
		{Rel: OriginRel, Local: commonDir},
	}, nil
}

// readSmall reads the regular file name, not through a symlink, of at
// most maxConfig bytes.
func readSmall(name string) ([]byte, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", name)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxConfig+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxConfig {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, maxConfig)
	}
	return b, nil
}

// quote renders s as a git config value.
func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`)
	return `"` + r.Replace(s) + `"`
}
