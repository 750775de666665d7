package daemon

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
	corev1 "k8s.io/api/core/v1"

	"github.com/substrat/substrat/executor/k8s"
	"github.com/substrat/substrat/fsstore"
)

// Whether an agent's workspace volume on a Kubernetes executor holds
// only what came back here after its last turn (kubes): then its next
// turn has nothing to salvage there, and must not (what the user deleted
// here since would come back).
//
// The record is a file of this machine, run/k8s/<agent>.synced
// (fsstore.Layout.KubeSynced), never in the volume nor in the store's
// agents/: the pod's processes, which can write anything in their
// volume, can neither make nor read it. It holds the volume's identity
// (k8s.Executor.VolumeID: the home, the target, the claim's name and
// UID), written atomically after a PullTrees that succeeded, and is
// removed, durably, right before a process starts in the pod (a push,
// whether it fails or not, writes only what is here, and leaves it): a
// turn cut short (a pod deleted, a daemon killed, a pull that failed)
// leaves none, and the next turn salvages. A record of another volume (a
// claim made again, another target, a copy of the home) does not count.
// A record whose write was lost in a crash means a salvage, as before.

// volumeID is the identity of the workspace volume pod mounts, "" if it
// has none or it cannot be had (the next turn then salvages).
func (k *kubes) volumeID(ctx context.Context, e *k8s.Executor, pod *corev1.Pod) string {
	id, err := e.VolumeID(ctx, pod)
	if err != nil {
		k.log.Warn("an agent's workspace volume is not known: its next turn salvages", "pod", pod.Name, "target", e.Target().String(), "err", err)
		return ""
	}
	return id
}

// isSynced reports whether agent's volume vol came back in full after
// its last turn.
func (k *kubes) isSynced(agent, vol string) bool {
	if vol == "" {
		return false
	}
	b, err := os.ReadFile(fsstore.Layout{Home: k.home}.KubeSynced(agent))
	return err == nil && string(b) == vol+"\n"
}

// setSynced records that agent's volume vol came back in full; vol ""
// removes the record, and the removal is durable when it returns.
func (k *kubes) setSynced(agent, vol string) error {
	p := fsstore.Layout{Home: k.home}.KubeSynced(agent)
	if vol == "" {
		err := os.Remove(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		return syncDir(filepath.Dir(p))
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	return renameio.WriteFile(p, []byte(vol+"\n"), 0o600)
}

// syncDir fsyncs the directory dir.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
