package k8s

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// SandboxClaims mode: where the agent-sandbox CRDs
// (kubernetes-sigs/agent-sandbox) are installed, an agent's pod is made
// by its controller from a SandboxClaim, instead of by the executor.
// Per claim, all named alike (PodPrefix and five random characters,
// never used again): the SandboxClaim, with the agent's labels; a
// SandboxTemplate, whose pod template is the pod the executor would
// make (Pod: its labels, resources, workspace and hardened spec), with
// no network policy of the controller's (Unmanaged: the pod is what
// it is in pod mode); and a SandboxWarmPool of no replica, which the
// claim must name (v1beta1) and which names the template. The template
// and pool are owned by the claim, so its deletion takes them along;
// the controller makes a Sandbox of the claim's name, owned by it, and
// the Sandbox a pod of that name with the template's labels, which the
// executor's look-ups by label find as they find its own.
//
// The claim stands for the pod: a pod of agent's incarnation counts only
// if a live claim (not being deleted) of the same agent, incarnation and
// home names it; so Start refuses a pod left behind by a deleted claim,
// even one its Sandbox made again before it went. A pod is never
// replaced alone (its Sandbox would make it again under the same name):
// its claim is, and the claim, its Sandbox and its pod are deleted
// together.

// SandboxClaimsEnv is the environment variable of Options.SandboxClaims'
// default: on, off or auto.
const SandboxClaimsEnv = "SUBSTRAT_K8S_SANDBOX_CLAIMS"

// The modes of Options.SandboxClaims.
const (
	ClaimsAuto = "auto"
	ClaimsOn   = "on"
	ClaimsOff  = "off"
)

// ErrClaims: the cluster's answer about SandboxClaims that the executor
// cannot make sense of.
var ErrClaims = errors.New("k8s executor: sandbox claims")

var (
	claimsGV     = schema.GroupVersion{Group: "extensions.agents.x-k8s.io", Version: "v1beta1"}
	claimsGVR    = claimsGV.WithResource("sandboxclaims")
	templatesGVR = claimsGV.WithResource("sandboxtemplates")
	poolsGVR     = claimsGV.WithResource("sandboxwarmpools")
	sandboxesGVR = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}
)

// sandboxClaim is what the executor reads of a SandboxClaim.
type sandboxClaim struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		WarmPoolRef struct {
			Name string `json:"name"`
		} `json:"warmPoolRef"`
	} `json:"spec"`
	Status struct {
		Conditions []metav1.Condition `json:"conditions"`
		Sandbox    struct {
			Name string `json:"name"`
		} `json:"sandbox"`
	} `json:"status"`
}

// podName is the name of the claim's Sandbox and pod.
func (c *sandboxClaim) podName() string {
	if n := c.Status.Sandbox.Name; n != "" {
		return n
	}
	return c.Name
}

// ready is the claim's Ready condition, if any.
func (c *sandboxClaim) ready() *metav1.Condition {
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Type == "Ready" {
			return &c.Status.Conditions[i]
		}
	}
	return nil
}

// decodeClaim reads u. A claim whose spec or status is not what it
// should be (another version of agent-sandbox, or garbage) is read by
// its metadata only, which the API server vouches for: it names the pod
// of its own name, and has no condition.
func decodeClaim(u *unstructured.Unstructured) sandboxClaim {
	var c sandboxClaim
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &c); err == nil {
		return c
	}
	c = sandboxClaim{}
	c.Name, c.Namespace, c.UID, c.Labels = u.GetName(), u.GetNamespace(), u.GetUID(), u.GetLabels()
	c.CreationTimestamp, c.DeletionTimestamp = u.GetCreationTimestamp(), u.GetDeletionTimestamp()
	return c
}

// listClaims lists the SandboxClaims that sel selects, page by page.
func (e *Executor) listClaims(ctx context.Context, sel string) ([]sandboxClaim, error) {
	var out []sandboxClaim
	opts := metav1.ListOptions{LabelSelector: sel, Limit: 500}
	for {
		list, err := e.dyn.Resource(claimsGVR).Namespace(e.target.Namespace).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing sandbox claims: %w", err)
		}
		for i := range list.Items {
			out = append(out, decodeClaim(&list.Items[i]))
		}
		if list.GetContinue() == "" {
			return out, nil
		}
		opts.Continue = list.GetContinue()
	}
}

// liveClaims lists the claims of agent's incarnation that are not being
// deleted and whose labels do say so (a selector is the server's word).
func (e *Executor) liveClaims(ctx context.Context, agent, incarnation string) ([]sandboxClaim, error) {
	want := e.labels(agent, incarnation)
	all, err := e.listClaims(ctx, labels.SelectorFromSet(want).String())
	if err != nil {
		return nil, err
	}
	var live []sandboxClaim
	for _, c := range all {
		if c.DeletionTimestamp == nil && labels.SelectorFromSet(want).Matches(labels.Set(c.Labels)) {
			live = append(live, c)
		}
	}
	return live, nil
}

// claimed keeps of pods those that a claim of claims names.
func claimed(pods []corev1.Pod, claims []sandboxClaim) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if slices.ContainsFunc(claims, func(c sandboxClaim) bool { return c.podName() == p.Name }) {
			out = append(out, p)
		}
	}
	return out
}

// claimPods lists the pods of agent's incarnation that a live claim
// names, and the live claims.
func (e *Executor) claimPods(ctx context.Context, agent, incarnation string) ([]corev1.Pod, []sandboxClaim, error) {
	claims, err := e.liveClaims(ctx, agent, incarnation)
	if err != nil {
		return nil, nil, err
	}
	pods, err := e.pods(ctx, agent, incarnation)
	if err != nil {
		return nil, nil, err
	}
	return claimed(pods, claims), claims, nil
}

// nameChars are the characters of a name's random end, as the API
// server's generateName draws them.
const nameChars = "bcdfghjklmnpqrstvwxz2456789"

func randomName(prefix string) string {
	b := make([]byte, 5)
	rand.Read(b)
	for i := range b {
		b[i] = nameChars[int(b[i])%len(nameChars)]
	}
	return prefix + string(b)
}

// toUnstructured turns obj into an object of gvr's kind.
func toUnstructured(obj any) (*unstructured.Unstructured, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		return nil, err
	}
	return u, nil
}

// createClaim makes a's claim, then its template and pool, and returns
// its name.
func (e *Executor) createClaim(ctx context.Context, a Agent) (string, error) {
	if err := e.isolate(ctx, a); err != nil {
		return "", err
	}
	for range 5 {
		name := randomName(PodPrefix(a.ID, a.Incarnation))
		u, err := toUnstructured(map[string]any{
			"apiVersion": claimsGV.String(), "kind": "SandboxClaim",
			"metadata": metav1.ObjectMeta{Name: name, Namespace: e.target.Namespace, Labels: e.labels(a.ID, a.Incarnation)},
			"spec":     map[string]any{"warmPoolRef": map[string]string{"name": name}},
		})
		if err != nil {
			return "", err
		}
		got, err := e.dyn.Resource(claimsGVR).Namespace(e.target.Namespace).Create(ctx, u, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("creating sandbox claim %s: %w", name, err)
		}
		c := sandboxClaim{}
		c.ObjectMeta = metav1.ObjectMeta{Name: got.GetName(), UID: got.GetUID()}
		return name, e.ensureParts(ctx, &c, a)
	}
	return "", fmt.Errorf("%w: no free name for a claim of agent %s", ErrClaims, a.ID)
}

// ensureParts makes c's template and warm pool if missing, owned by c.
func (e *Executor) ensureParts(ctx context.Context, c *sandboxClaim, a Agent) error {
	pod := e.Pod(a)
	meta := metav1.ObjectMeta{Name: c.Name, Namespace: e.target.Namespace, Labels: e.labels(a.ID, a.Incarnation),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: claimsGV.String(), Kind: "SandboxClaim", Name: c.Name, UID: c.UID}}}
	template := map[string]any{
		"apiVersion": claimsGV.String(), "kind": "SandboxTemplate", "metadata": meta,
		"spec": map[string]any{
			"networkPolicyManagement": "Unmanaged",
			"podTemplate": map[string]any{
				"metadata": map[string]any{"labels": pod.Labels, "annotations": pod.Annotations},
				"spec":     pod.Spec,
			},
		},
	}
	pool := map[string]any{
		"apiVersion": claimsGV.String(), "kind": "SandboxWarmPool", "metadata": meta,
		"spec": map[string]any{"replicas": 0, "sandboxTemplateRef": map[string]string{"name": c.Name}},
	}
	// The template first: the pool names it, and the claim's controller
	// looks again when the pool appears.
	for _, o := range []struct {
		gvr schema.GroupVersionResource
		obj map[string]any
	}{{templatesGVR, template}, {poolsGVR, pool}} {
		u, err := toUnstructured(o.obj)
		if err != nil {
			return err
		}
		_, err = e.dyn.Resource(o.gvr).Namespace(e.target.Namespace).Create(ctx, u, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the %s of sandbox claim %s: %w", o.gvr.Resource, c.Name, err)
		}
	}
	return nil
}

// hasParts reports whether c's template and pool are there, made for it.
func (e *Executor) hasParts(ctx context.Context, c *sandboxClaim) (bool, error) {
	for _, gvr := range []schema.GroupVersionResource{templatesGVR, poolsGVR} {
		u, err := e.dyn.Resource(gvr).Namespace(e.target.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("the %s of sandbox claim %s: %w", gvr.Resource, c.Name, err)
		}
		if !ownedBy(u.GetOwnerReferences(), c.UID, false) {
			return false, nil
		}
	}
	return true, nil
}

// dropClaim deletes c, then its Sandbox, template and pool (those it
// owns), then its pod among pods (at once): in that order, so that
// nothing makes the pod again.
func (e *Executor) dropClaim(ctx context.Context, c *sandboxClaim, pods []corev1.Pod) error {
	err := e.dyn.Resource(claimsGVR).Namespace(e.target.Namespace).Delete(ctx, c.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: ptr.To(c.UID)}, PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting sandbox claim %s: %w", c.Name, err)
	}
	// Its Sandbox, template and pool: the garbage collector would, but
	// only once it watches their kinds (it finds new kinds late).
	for _, o := range []struct {
		gvr  schema.GroupVersionResource
		name string
	}{{sandboxesGVR, c.podName()}, {templatesGVR, c.Name}, {poolsGVR, c.Name}} {
		u, err := e.dyn.Resource(o.gvr).Namespace(e.target.Namespace).Get(ctx, o.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("the %s of claim %s: %w", o.gvr.Resource, c.Name, err)
		case ownedBy(u.GetOwnerReferences(), c.UID, o.gvr == sandboxesGVR):
			err := e.dyn.Resource(o.gvr).Namespace(e.target.Namespace).Delete(ctx, o.name, metav1.DeleteOptions{
				Preconditions: &metav1.Preconditions{UID: ptr.To(u.GetUID())}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return fmt.Errorf("deleting the %s of claim %s: %w", o.gvr.Resource, c.Name, err)
			}
		}
	}
	for i := range pods {
		// Only the pod of the claim's own agent and incarnation: a
		// claim's status is not trusted to name it.
		p := &pods[i]
		if p.Name == c.podName() && p.DeletionTimestamp == nil &&
			p.Labels[LabelAgent] == c.Labels[LabelAgent] && p.Labels[LabelIncarnation] == c.Labels[LabelIncarnation] {
			if err := e.deletePod(ctx, p, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// ownedBy reports whether refs name uid as an owner (the controller,
// if controller).
func ownedBy(refs []metav1.OwnerReference, uid types.UID, controller bool) bool {
	for _, r := range refs {
		if r.UID == uid && (!controller || r.Controller != nil && *r.Controller) {
			return true
		}
	}
	return false
}

// currentClaim is the newest of claims, nil for none.
func currentClaim(claims []sandboxClaim) *sandboxClaim {
	var cur *sandboxClaim
	for i := range claims {
		c := &claims[i]
		if cur == nil || cur.CreationTimestamp.Before(&c.CreationTimestamp) ||
			cur.CreationTimestamp.Equal(&c.CreationTimestamp) && c.Name > cur.Name {
			cur = c
		}
	}
	return cur
}

// podNamed is the pod named name among pods, or nil.
func podNamed(pods []corev1.Pod, name string) *corev1.Pod {
	for i := range pods {
		if pods[i].Name == name {
			return &pods[i]
		}
	}
	return nil
}

// ensureClaims is Ensure in claims mode: it keeps the newest live claim
// of a's incarnation unless its pod is to be replaced (failed, evicted,
// deleted, other resources) or, with no pod yet, it lacks its template
// or pool; drops the others and their pods; and makes a claim if none
// is kept (with the agent's workspace claim, if missing). It returns the
// claim's pod, nil while its controller has not made it.
func (e *Executor) ensureClaims(ctx context.Context, a Agent) (*corev1.Pod, error) {
	claims, err := e.liveClaims(ctx, a.ID, a.Incarnation)
	if err != nil {
		return nil, err
	}
	pods, err := e.pods(ctx, a.ID, a.Incarnation)
	if err != nil {
		return nil, err
	}
	keep := currentClaim(claims)
	var pod *corev1.Pod
	if keep != nil {
		if pod = podNamed(pods, keep.podName()); pod != nil {
			if st := Classify(pod, a.Incarnation); st.Replace() || st.State == StateDeleting || !sameResources(pod, e.Pod(a)) {
				keep, pod = nil, nil
			}
		} else if ok, err := e.hasParts(ctx, keep); err != nil {
			return nil, err
		} else if !ok {
			// No pod, and no template or pool to make it from (a daemon
			// that died between them, or someone deleted them): a new
			// claim, since the controller would not look at this one
			// again soon.
			keep = nil
		}
	}
	for i := range claims {
		if c := &claims[i]; c != keep {
			if err := e.dropClaim(ctx, c, pods); err != nil {
				return nil, err
			}
		}
	}
	// Pods of this incarnation that no kept claim names (pod mode's, or
	// left behind) are deleted.
	for i := range pods {
		p := &pods[i]
		if (keep == nil || p.Name != keep.podName()) && p.DeletionTimestamp == nil {
			if err := e.deletePod(ctx, p, 0); err != nil {
				return nil, err
			}
		}
	}
	if keep != nil {
		return pod, nil
	}
	if e.opts.Workspace == nil {
		if err := e.ensureClaim(ctx, a.ID); err != nil {
			return nil, err
		}
	}
	_, err = e.createClaim(ctx, a)
	return nil, err
}

// dropClaimOf drops, in claims mode, the live claim that names pod,
// which was deleted under a command: its Sandbox would make it again
// under the same name, which pods never reuse in pod mode; the next
// Ensure makes a new claim instead. What fails here is left to it.
func (e *Executor) dropClaimOf(pod *corev1.Pod) {
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	if on, err := e.SandboxClaims(ctx); err != nil || !on {
		return
	}
	agent, incarnation := pod.Labels[LabelAgent], pod.Labels[LabelIncarnation]
	claims, err := e.liveClaims(ctx, agent, incarnation)
	if err != nil {
		return
	}
	for i := range claims {
		if claims[i].podName() == pod.Name {
			pods, err := e.pods(ctx, agent, incarnation)
			if err == nil {
				e.dropClaim(ctx, &claims[i], pods)
			}
		}
	}
}

// fenceClaims drops the claims of agent of any other incarnation than
// incarnation, with their pods, and returns their names.
func (e *Executor) fenceClaims(ctx context.Context, agent, incarnation string) ([]string, error) {
	claims, err := e.listClaims(ctx, labels.SelectorFromSet(e.labels(agent, "")).String())
	if err != nil {
		return nil, err
	}
	var fenced []string
	for i := range claims {
		c := &claims[i]
		if c.Labels[LabelIncarnation] == incarnation {
			continue
		}
		pods, err := e.pods(ctx, agent, c.Labels[LabelIncarnation])
		if err != nil {
			return fenced, err
		}
		if err := e.dropClaim(ctx, c, pods); err != nil {
			return fenced, err
		}
		fenced = append(fenced, c.Name)
	}
	return fenced, nil
}

// deleteClaims drops every claim of agent, with its pod.
func (e *Executor) deleteClaims(ctx context.Context, agent string) error {
	claims, err := e.listClaims(ctx, labels.SelectorFromSet(e.labels(agent, "")).String())
	if err != nil {
		return err
	}
	pods, err := e.pods(ctx, agent, "")
	if err != nil {
		return err
	}
	for i := range claims {
		if err := e.dropClaim(ctx, &claims[i], pods); err != nil {
			return err
		}
	}
	return nil
}

// claimStatus is the Status of a's incarnation that has no pod a live
// claim names: missing without a claim, else pending with what the
// claim's Ready condition says (broken for brokenClaimReasons).
func claimStatus(claims []sandboxClaim, incarnation string) Status {
	c := currentClaim(claims)
	if c == nil {
		return Status{State: StateMissing, Incarnation: incarnation}
	}
	s := Status{State: StatePending, Incarnation: incarnation, Reason: "NoPodYet",
		Message: "sandbox claim " + c.Name + " has no pod yet (does the agent-sandbox controller run?)"}
	if r := c.ready(); r != nil && r.Status != metav1.ConditionTrue {
		s.Reason, s.Message = "SandboxClaim "+r.Reason, r.Message
		if brokenClaimReasons[r.Reason] {
			s.State = StateBroken
		}
	}
	return s
}

// UnansweredClaim is how long a claim may go with no status at all
// before WaitRunning gives up on it: agent-sandbox's controller sets its
// conditions within a second or so, so none after this long means that
// no controller runs (the CRDs installed, the controller not).
const UnansweredClaim = time.Minute

// unanswered says why the current of claims has had no answer from the
// controller, as of now, or "".
func unanswered(claims []sandboxClaim, now time.Time) string {
	c := currentClaim(claims)
	if c == nil || len(c.Status.Conditions) > 0 || c.Status.Sandbox.Name != "" || c.CreationTimestamp.IsZero() {
		return ""
	}
	if age := now.Sub(c.CreationTimestamp.Time); age > UnansweredClaim {
		return fmt.Sprintf("sandbox claim %s has had no status for %s: no agent-sandbox controller seems to run "+
			"(%s=off makes pods directly)", c.Name, age.Round(time.Second), SandboxClaimsEnv)
	}
	return ""
}

// brokenClaimReasons are the reasons of a claim's Ready condition for
// which waiting is not likely to cure (a pod the API server refuses, a
// template the controller rejects): the claim is broken, as a pod whose
// image cannot be pulled is (kept, and the turn failed).
var brokenClaimReasons = map[string]bool{
	"ReconcilerError":           true,
	"InvalidMetadata":           true,
	"EnvVarsInjectionRejected":  true,
	"VolumeClaimTemplatesError": true,
}
