package k8s

import (
	"context"
	"errors"
	"fmt"
	"os"

	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
)

// NetworkPolicyEnv says whether the cluster's network plugin enforces
// NetworkPolicies ("enforced"), which the daemon cannot tell: only then
// does an agent whose workspace has no network run on the executor,
// isolated by one (Agent.Isolated). Anything else leaves such agents
// refused.
const NetworkPolicyEnv = "SUBSTRAT_K8S_NETWORK_POLICY"

// NetworkPoliciesEnforced says what NetworkPolicyEnv says.
func NetworkPoliciesEnforced() bool { return os.Getenv(NetworkPolicyEnv) == "enforced" }

// NetworkPolicyName is the name of the NetworkPolicy that isolates
// agent's pods.
func NetworkPolicyName(agent string) string { return "substrat-isolate-" + agent }

// networkPolicy is the NetworkPolicy that denies every pod of agent (of
// the executor's home, any incarnation) all ingress and all egress: it
// selects them, names both policy types, and allows nothing.
func (e *Executor) networkPolicy(agent string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: NetworkPolicyName(agent), Namespace: e.target.Namespace, Labels: e.labels(agent, "")},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelHome: e.opts.Home, LabelAgent: agent}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

// isolate makes the cluster hold what a says of its network, before a
// pod of it is made or used (where the executor makes NetworkPolicies,
// Options.NetworkPolicies; elsewhere an isolated agent is an error): the NetworkPolicy that isolates its pods
// if a.Isolated (made, or put back as it should be), none if not (one
// of this home's deleted). A policy of that name that is not this
// home's is an error, and so is an isolated agent whose pod the policy
// would not reach (in the host's network, or not selected).
func (e *Executor) isolate(ctx context.Context, a Agent) error {
	if a.Isolated {
		pod := e.Pod(a)
		if pod.Spec.HostNetwork {
			return fmt.Errorf("agent %s has no network, and its pod would be in the host's network, which no NetworkPolicy isolates", a.ID)
		}
		if sel, err := metav1.LabelSelectorAsSelector(&e.networkPolicy(a.ID).Spec.PodSelector); err != nil || !sel.Matches(labels.Set(pod.Labels)) {
			return fmt.Errorf("agent %s has no network, and its NetworkPolicy would not select its pod (its labels %v)", a.ID, pod.Labels)
		}
	}
	if !e.opts.NetworkPolicies {
		if a.Isolated {
			return fmt.Errorf("agent %s has no network, and the executor makes no NetworkPolicy (%s)", a.ID, NetworkPolicyEnv)
		}
		return nil // none made, none to look at (the context may not read them)
	}
	nps := e.net.NetworkPolicies(e.target.Namespace)
	want := e.networkPolicy(a.ID)
	np, err := nps.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if !a.Isolated {
			return nil
		}
		_, err = nps.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return e.isolate(ctx, a) // made meanwhile: check it
		}
	case err != nil:
	case np.Labels[LabelHome] != e.opts.Home || np.Labels[LabelManagedBy] != ManagedBy:
		err = fmt.Errorf("the NetworkPolicy %s/%s is not this home's", np.Namespace, np.Name)
	case !a.Isolated:
		err = nps.Delete(ctx, np.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(np.UID)}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			err = nil
		}
	case !apiequality.Semantic.DeepEqual(np.Spec, want.Spec):
		np.Spec = want.Spec
		_, err = nps.Update(ctx, np, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("the network isolation of agent %s: %w", a.ID, err)
	}
	return nil
}

// reconcilePolicies deletes the home's NetworkPolicies of agents that
// are not among live, or not isolated there, and returns their names.
func (e *Executor) reconcilePolicies(ctx context.Context, live []Agent) ([]string, error) {
	isolated := map[string]bool{}
	for _, a := range live {
		isolated[a.ID] = a.Isolated
	}
	nps := e.net.NetworkPolicies(e.target.Namespace)
	list, err := nps.List(ctx, metav1.ListOptions{LabelSelector: e.homeSelector()})
	if err != nil {
		return nil, fmt.Errorf("listing the home's NetworkPolicies: %w", err)
	}
	var deleted []string
	var errs []error
	for _, np := range list.Items {
		if isolated[np.Labels[LabelAgent]] {
			continue
		}
		err := nps.Delete(ctx, np.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(np.UID)}})
		switch {
		case err == nil:
			deleted = append(deleted, np.Name)
		case !apierrors.IsNotFound(err) && !apierrors.IsConflict(err):
			errs = append(errs, err)
		}
	}
	return deleted, errors.Join(errs...)
}
