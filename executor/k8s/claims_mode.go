package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The mode, and a switch between modes: a target's mode may change
// between daemons (the environment, or the CRDs installed or removed
// meanwhile), and what the other mode left is Reconcile's to drop. In
// claims mode, the home's pods that no kept claim names are strays
// (pod mode's among them), and deleted; in pod mode, where the API
// server serves the claims, the home's claims are dropped, with their
// Sandboxes, templates, pools and pods, and then any template or pool
// of the home left without its claim.

// claimsMode resolves Options.SandboxClaims: "" is $SUBSTRAT_K8S_SANDBOX_CLAIMS,
// else auto.
func claimsMode(s string) (string, error) {
	if s == "" {
		s = os.Getenv(SandboxClaimsEnv)
	}
	switch s {
	case "":
		return ClaimsAuto, nil
	case ClaimsAuto, ClaimsOn, ClaimsOff:
		return s, nil
	}
	return "", fmt.Errorf("k8s executor: sandbox claims %q is not on, off or auto", s)
}

// SandboxClaims reports whether the executor makes SandboxClaims rather
// than pods: Options.SandboxClaims on or off says so; auto asks the API
// server whether it serves sandboxclaims, sandboxtemplates and
// sandboxwarmpools of extensions.agents.x-k8s.io/v1beta1, once, and
// again at each Reconcile (an error is not remembered: the next call
// asks again).
func (e *Executor) SandboxClaims(ctx context.Context) (bool, error) {
	switch e.opts.SandboxClaims {
	case ClaimsOn:
		return true, nil
	case ClaimsOff:
		return false, nil
	}
	e.mode.mu.Lock()
	defer e.mode.mu.Unlock()
	if e.mode.on != nil {
		return *e.mode.on, nil
	}
	on, err := e.claimsServed(ctx)
	if err != nil {
		return false, err
	}
	e.mode.on = &on
	return on, nil
}

// claimsNow is what Reconcile goes by: whether the executor is in claims
// mode (on), asked again of the API server in auto mode (and
// remembered), and whether the API server serves the claims (served; in
// off mode, false when it cannot say).
func (e *Executor) claimsNow(ctx context.Context) (on, served bool, err error) {
	if e.opts.SandboxClaims == ClaimsOn {
		return true, true, nil
	}
	served, err = e.claimsServed(ctx)
	if e.opts.SandboxClaims == ClaimsOff {
		return false, served && err == nil, nil
	}
	if err != nil {
		return false, false, err
	}
	e.mode.mu.Lock()
	e.mode.on = &served
	e.mode.mu.Unlock()
	return served, served, nil
}

// claimsServed asks the API server whether it serves sandboxclaims,
// sandboxtemplates and sandboxwarmpools (one request).
func (e *Executor) claimsServed(ctx context.Context) (bool, error) {
	body, err := e.core.RESTClient().Get().AbsPath("/apis/" + claimsGV.String()).Do(ctx).Raw()
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("%s: is agent-sandbox installed: %w", e.target, err)
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(body, &list); err != nil {
		return false, fmt.Errorf("%w: the API server's resources of %s: %v", ErrClaims, claimsGV, err)
	}
	var names []string
	for _, r := range list.APIResources {
		names = append(names, r.Name)
	}
	return slices.Contains(names, claimsGVR.Resource) && slices.Contains(names, templatesGVR.Resource) &&
		slices.Contains(names, poolsGVR.Resource), nil
}

// dropHomeClaims is pod mode's Reconcile of what claims mode left: it
// drops every claim of the home (noted as deleted), with its Sandbox,
// template, pool and pod, then deletes the home's templates and pools
// left. Claims it may not list (RBAC for pod mode only) are taken to be
// none of the home's: it could not have made them either.
func (e *Executor) dropHomeClaims(ctx context.Context, r *Reconciled, t *tally) {
	claims, err := e.listClaims(ctx, e.homeSelector())
	if apierrors.IsForbidden(err) {
		return
	}
	if err != nil {
		t.note(nil, "", err)
		return
	}
	pods, err := e.listHome(ctx)
	if err != nil {
		t.note(nil, "", err)
		return
	}
	podList := podValues(pods)
	e.parallel(len(claims), func(i int) {
		t.note(&r.Deleted, claims[i].Name, e.dropClaim(ctx, &claims[i], podList))
	})
	for _, gvr := range []schema.GroupVersionResource{templatesGVR, poolsGVR} {
		err := e.dyn.Resource(gvr).Namespace(e.target.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: e.homeSelector()})
		if err != nil && !apierrors.IsNotFound(err) {
			t.note(nil, "", fmt.Errorf("deleting the home's %s: %w", gvr.Resource, err))
		}
	}
}

// podValues is pods, as values.
func podValues(pods []*corev1.Pod) []corev1.Pod {
	out := make([]corev1.Pod, len(pods))
	for i, p := range pods {
		out[i] = *p
	}
	return out
}
