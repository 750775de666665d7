package k8s

import (
	"context"
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/substrat/substrat/fsstore"
)

// TestIsolation: an isolated agent's pod, made directly or by
// agent-sandbox from a claim, is selected by a NetworkPolicy that allows
// it nothing, made before it; a policy changed by hand is put back at
// the next Ensure; one not isolated any more loses it, and so does an
// agent deleted. Another agent's pods, and another home's, are not
// selected. (That a network plugin enforces it, no test here shows: the
// control plane has none.)
func TestIsolation(t *testing.T) {
	for _, mode := range []string{ClaimsOff, ClaimsOn} {
		t.Run("claims-"+mode, func(t *testing.T) {
			e := newExec(t, Options{Workspace: emptyDir, SandboxClaims: mode, NetworkPolicies: true})
			ctx := ctxT(t)
			a := Agent{ID: fsstore.NewID(), Incarnation: "1", Busy: true, Isolated: true}
			pod := running(t, e, a)
			nps := e.net.NetworkPolicies(e.target.Namespace)
			np, err := nps.Get(ctx, NetworkPolicyName(a.ID), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			if err != nil {
				t.Fatal(err)
			}
			if !sel.Matches(labels.Set(pod.Labels)) {
				t.Errorf("the policy %v does not select the pod %v", np.Spec.PodSelector, pod.Labels)
			}
			if len(np.Spec.Ingress) > 0 || len(np.Spec.Egress) > 0 || len(np.Spec.PolicyTypes) != 2 {
				t.Errorf("the policy allows something: %+v", np.Spec)
			}
			if np.CreationTimestamp.After(pod.CreationTimestamp.Time) {
				t.Errorf("the policy (%v) came after the pod (%v)", np.CreationTimestamp, pod.CreationTimestamp)
			}
			other := e.labels(fsstore.NewID(), "1")
			otherHome := e.labels(a.ID, "1")
			otherHome[LabelHome] = "another-home"
			if sel.Matches(labels.Set(other)) || sel.Matches(labels.Set(otherHome)) {
				t.Error("the policy selects another agent's pods or another home's")
			}

			// Opened by hand: put back.
			np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{}}
			if _, err := nps.Update(ctx, np, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Ensure(ctx, a); err != nil {
				t.Fatal(err)
			}
			if np, err = nps.Get(ctx, np.Name, metav1.GetOptions{}); err != nil || len(np.Spec.Egress) > 0 {
				t.Errorf("the policy opened by hand after Ensure: %+v, %v", np, err)
			}

			// Not isolated any more: no policy.
			a.Isolated = false
			if _, err := e.Ensure(ctx, a); err != nil {
				t.Fatal(err)
			}
			if _, err := nps.Get(ctx, np.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the policy of an agent not isolated: %v", err)
			}
			// Isolated again, then deleted: the policy stays while its
			// containers may still run, and the start's reconcile
			// deletes it.
			a.Isolated = true
			if _, err := e.Ensure(ctx, a); err != nil {
				t.Fatal(err)
			}
			if err := e.Delete(ctx, a.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := nps.Get(context.Background(), np.Name, metav1.GetOptions{}); err != nil {
				t.Errorf("the policy of an agent just deleted: %v", err)
			}
			if _, err := e.Reconcile(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := nps.Get(context.Background(), np.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the policy of a deleted agent after the reconcile: %v", err)
			}
		})
	}
}

// TestIsolationNotOurs: a NetworkPolicy of the name that is not this
// home's is left alone, and Ensure of an isolated agent fails.
func TestIsolationNotOurs(t *testing.T) {
	e := newExec(t, Options{Workspace: emptyDir, NetworkPolicies: true})
	ctx := ctxT(t)
	a := Agent{ID: fsstore.NewID(), Incarnation: "1", Busy: true, Isolated: true}
	theirs := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: NetworkPolicyName(a.ID), Namespace: e.target.Namespace},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}}}}
	if _, err := e.net.NetworkPolicies(e.target.Namespace).Create(ctx, theirs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Ensure(ctx, a); err == nil {
		t.Error("Ensure made a pod with another's policy in the way")
	}
	if p, _ := e.find(ctx, a.ID, a.Incarnation); p != nil {
		t.Errorf("a pod was made: %s", p.Name)
	}
	np, err := e.net.NetworkPolicies(e.target.Namespace).Get(ctx, theirs.Name, metav1.GetOptions{})
	if err != nil || np.Spec.PodSelector.MatchLabels["x"] != "y" {
		t.Errorf("their policy: %+v, %v", np, err)
	}
	// An executor that makes no NetworkPolicy runs no isolated agent.
	off := newExec(t, Options{Workspace: emptyDir})
	if _, err := off.Ensure(ctx, a); err == nil {
		t.Error("Ensure of an isolated agent where no NetworkPolicy is made")
	}
}

// TestIsolationReconcile: the start's reconcile deletes the home's
// NetworkPolicies of agents that are not live or not isolated, and
// keeps those of isolated live agents and another home's.
func TestIsolationReconcile(t *testing.T) {
	e := newExec(t, Options{Workspace: emptyDir, NetworkPolicies: true})
	other := newExec(t, Options{Workspace: emptyDir, NetworkPolicies: true})
	other.target = e.target // another home, the same namespace
	ctx := ctxT(t)
	keep, open, gone := fsstore.NewID(), fsstore.NewID(), fsstore.NewID()
	for _, id := range []string{keep, open, gone} {
		if err := e.isolate(ctx, Agent{ID: id, Isolated: true}); err != nil {
			t.Fatal(err)
		}
	}
	theirs := fsstore.NewID()
	if err := other.isolate(ctx, Agent{ID: theirs, Isolated: true}); err != nil {
		t.Fatal(err)
	}
	r, err := e.Reconcile(ctx, []Agent{{ID: keep, Incarnation: "2", Isolated: true}, {ID: open, Incarnation: "2"}})
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{keep: true, open: false, gone: false, theirs: true} {
		_, err := e.net.NetworkPolicies(e.target.Namespace).Get(ctx, NetworkPolicyName(id), metav1.GetOptions{})
		if got := err == nil; got != want {
			t.Errorf("the policy of %s: there %v, want %v (%v)", id, got, want, err)
		}
	}
	if !slices.Contains(r.Deleted, NetworkPolicyName(gone)) || !slices.Contains(r.Deleted, NetworkPolicyName(open)) {
		t.Errorf("Reconcile says it deleted %v", r.Deleted)
	}
}
