package k8s

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/substrat/substrat/fsstore"
)

// TestClaimModeSwitch: a target switched from claims to pods: Reconcile
// in pod mode drops the home's claims, with their Sandboxes, templates,
// pools and pods, then makes the busy agents' pods; another home's claim
// is not touched. Switched back, Reconcile in claims mode deletes the
// home's bare pods and makes claims again.
func TestClaimModeSwitch(t *testing.T) {
	on := claimsExec(t, Options{Workspace: emptyDir})
	ctx := ctxT(t)
	busy, idle := fsstore.NewID(), fsstore.NewID()
	busyPod := running(t, on, Agent{ID: busy, Incarnation: "1"})
	idlePod := running(t, on, Agent{ID: idle, Incarnation: "1"})
	other := *on
	other.opts.Home = "other-" + token()
	otherPod := running(t, &other, Agent{ID: fsstore.NewID(), Incarnation: "1"})

	off := *on
	off.opts.SandboxClaims = ClaimsOff
	r, err := off.Reconcile(ctx, []Agent{{ID: busy, Incarnation: "2", Busy: true}, {ID: idle, Incarnation: "2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("in pod mode: %+v", r)
	for _, n := range []string{busyPod.Name, idlePod.Name} {
		if !slices.Contains(r.Deleted, n) {
			t.Errorf("deleted %v: not claim %s", r.Deleted, n)
		}
		gone(t, on, n)
		for _, gvr := range []schema.GroupVersionResource{claimsGVR, sandboxesGVR, templatesGVR, poolsGVR} {
			noObject(t, on, gvr, n)
		}
	}
	if len(r.Created) != 1 {
		t.Fatalf("created %v, want a pod of %s", r.Created, busy)
	}
	bare, err := off.WaitRunning(ctx, busy, "2")
	if err != nil || bare.Name != r.Created[0] {
		t.Fatalf("the pod of %s in pod mode: %v, %v", busy, bare, err)
	}
	if cs := claimsOf(t, &other, otherPod.Labels[LabelAgent]); len(cs) != 1 {
		t.Errorf("the other home's claims: %d", len(cs))
	}

	// Back to claims.
	r, err = on.Reconcile(ctx, []Agent{{ID: busy, Incarnation: "3", Busy: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("in claims mode: %+v", r)
	if !slices.Contains(r.Deleted, bare.Name) || len(r.Created) != 1 {
		t.Fatalf("deleted %v (want %s), created %v", r.Deleted, bare.Name, r.Created)
	}
	gone(t, on, bare.Name)
	if p, err := on.WaitRunning(ctx, busy, "3"); err != nil || p.Name != r.Created[0] {
		t.Fatalf("the claim's pod of %s: %v, %v", busy, p, err)
	}
}

// TestClaimModeAutoAgain: in auto mode, Reconcile asks the API server
// again whether it serves the claims, whatever an earlier call found.
func TestClaimModeAutoAgain(t *testing.T) {
	e := newExec(t, Options{SandboxClaims: ClaimsAuto, Workspace: emptyDir})
	ctx := ctxT(t)
	no := false
	e.mode.on = &no // an earlier finding: no CRDs
	id := fsstore.NewID()
	r, err := e.Reconcile(ctx, []Agent{{ID: id, Incarnation: "1", Busy: true}})
	if err != nil {
		t.Fatal(err)
	}
	if cs := claimsOf(t, e, id); len(cs) != 1 || len(r.Created) != 1 || cs[0].Name != r.Created[0] {
		t.Fatalf("created %v; claims %d", r.Created, len(cs))
	}
	if on, err := e.SandboxClaims(ctx); !on || err != nil {
		t.Errorf("SandboxClaims after Reconcile: %v, %v", on, err)
	}
}
