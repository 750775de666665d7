package k8s

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/substrat/substrat/fsstore"
)

// TestVolumeID: a pod's workspace claim is named by its UID, the same
// for the agent's pods of any incarnation and another for a claim made
// again under its name; an emptyDir by its pod.
func TestVolumeID(t *testing.T) {
	e := newExec(t, Options{})
	ctx := ctxT(t)
	id := fsstore.NewID()
	if err := e.ensureClaim(ctx, id); err != nil {
		t.Fatal(err)
	}
	p1, p2 := e.Pod(Agent{ID: id, Incarnation: "1"}), e.Pod(Agent{ID: id, Incarnation: "2"})
	p1.Namespace, p2.Namespace = e.target.Namespace, e.target.Namespace
	v1, err := e.VolumeID(ctx, p1)
	if err != nil || !strings.Contains(v1, "claim="+ClaimName(id)+" uid=") || !strings.Contains(v1, "home="+e.opts.Home) {
		t.Fatalf("VolumeID: %q, %v", v1, err)
	}
	if v2, err := e.VolumeID(ctx, p2); v2 != v1 || err != nil {
		t.Errorf("the next pod's volume: %q, %v; want %q", v2, err, v1)
	}
	// The claim made again: another volume.
	if err := e.DeleteWorkspace(ctx, id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claim's deletion", func() (bool, error) {
		_, err := e.core.PersistentVolumeClaims(e.target.Namespace).Get(ctx, ClaimName(id), metav1.GetOptions{})
		return err != nil, nil
	})
	if err := e.ensureClaim(ctx, id); err != nil {
		t.Fatal(err)
	}
	if v3, err := e.VolumeID(ctx, p2); v3 == v1 || v3 == "" || err != nil {
		t.Errorf("a claim made again: %q, %v (was %q)", v3, err, v1)
	}
	if err := e.DeleteWorkspace(ctx, id); err != nil {
		t.Fatal(err)
	}
	ed := newExec(t, Options{Workspace: emptyDir})
	p4 := running(t, ed, Agent{ID: id, Incarnation: "1"})
	if v4, err := ed.VolumeID(ctx, p4); !strings.Contains(v4, "pod="+p4.Name+" uid="+string(p4.UID)) || err != nil {
		t.Errorf("an emptyDir: %q, %v", v4, err)
	}
}
