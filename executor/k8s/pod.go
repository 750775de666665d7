package k8s

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/substrat/substrat/fsstore"
)

// Agent is what the executor needs to know of a live agent session: the
// daemon's view of it, which wins over what the cluster holds.
type Agent struct {
	// ID is the agent's id and Incarnation the daemon's current
	// incarnation of it (executor.Cmd's): its pod carries both.
	ID, Incarnation string
	// Busy: a turn of the agent runs or is due, so its pod must exist
	// (Reconcile makes the missing ones of busy agents only).
	Busy bool
	// Limits are the limits in force for the agent (its own over its
	// pool's and the daemon's), applied as the container's resources.
	Limits fsstore.Limits
	// Isolated: the agent's workspace has no network. A NetworkPolicy
	// that denies its pods all ingress and egress is made before its
	// pod (netpol.go); the cluster's network plugin must enforce it
	// (NetworkPolicyEnv).
	Isolated bool
}

// podInit is the command of the pod's container: its PID 1 waits, and
// ends at once on SIGTERM (Reap knows the pod by it).
var podInit = []string{"/bin/sh", "-c", `trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done`}

// The container's name, and the pod's volumes.
const (
	Container    = "agent"
	volWorkspace = "workspace"
	volTmp       = "tmp"
	// UID is the user the container runs as (not root).
	UID = 65532
)

// dnsLabelRE: a DNS-1123 label, what a pod's name had better be (it is
// also its hostname).
var dnsLabelRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// PodPrefix is the prefix of the names of the pods of agent's
// incarnation: readable when it can be (substrat-AGENT-INCARNATION-),
// else a digest of both. The API server adds five characters
// (generateName), so that no pod's name is ever used again: nothing meant
// for a deleted pod (a late delete by name, as kwok does one) reaches the
// one that replaces it, and a new pod never waits for an old one to go.
// The executor finds pods by their labels.
func PodPrefix(agent, incarnation string) string {
	if n := "substrat-" + agent + "-" + incarnation + "-"; len(n) <= 58 && dnsLabelRE.MatchString(n+"x") {
		return n
	}
	sum := sha256.Sum256([]byte(agent + "\x00" + incarnation))
	return "substrat-" + hex.EncodeToString(sum[:12]) + "-"
}

// ClaimName is the name of agent's default workspace claim.
func ClaimName(agent string) string {
	if n := "substrat-ws-" + agent; dnsLabelRE.MatchString(n) {
		return n
	}
	sum := sha256.Sum256([]byte(agent))
	return "substrat-ws-" + hex.EncodeToString(sum[:12])
}

func (e *Executor) checkIDs(agent, incarnation string) error {
	if !tokenRE.MatchString(agent) || !tokenRE.MatchString(incarnation) {
		return fmt.Errorf("%w: agent %q, incarnation %q", ErrID, agent, incarnation)
	}
	return nil
}

// labels are the labels of a's objects.
func (e *Executor) labels(agent, incarnation string) map[string]string {
	l := map[string]string{LabelManagedBy: ManagedBy, LabelHome: e.opts.Home, LabelAgent: agent}
	if incarnation != "" {
		l[LabelIncarnation] = incarnation
	}
	return l
}

// homeSelector selects the pods of the executor's home.
func (e *Executor) homeSelector() string {
	return labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedBy, LabelHome: e.opts.Home}).String()
}

// Pod returns the pod the executor makes for a: its labels, the
// agent's limits as resources, the workspace as a volume, and a
// hardened security context (not root, no privilege escalation, no
// capability, the runtime's seccomp profile, a read-only root with a
// private /tmp, no service account token).
//
// The container only waits: a turn's processes are exec'd into it
// (Start). Limits: MemoryBytes is the memory request and limit;
// CPUWeight w is a request of w millicores (100, an ordinary process's
// weight, is a tenth of a CPU); Pids has no per-pod field in a pod spec
// (the kubelet's podPidsLimit applies), so it is not applied.
func (e *Executor) Pod(a Agent) *corev1.Pod {
	res := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	if m := a.Limits.MemoryBytes; m > 0 {
		q := *resource.NewQuantity(m, resource.BinarySI)
		res.Requests[corev1.ResourceMemory], res.Limits[corev1.ResourceMemory] = q, q
	}
	if w := a.Limits.CPUWeight; w > 0 {
		res.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(w, resource.DecimalSI)
	}
	var ws corev1.VolumeSource
	if e.opts.Workspace != nil {
		ws = e.opts.Workspace(a.ID)
	} else {
		ws = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: ClaimName(a.ID)}}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: PodPrefix(a.ID, a.Incarnation),
			Namespace:    e.target.Namespace,
			Labels:       e.labels(a.ID, a.Incarnation),
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyAlways,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](UID),
				RunAsGroup:     ptr.To[int64](UID),
				FSGroup:        ptr.To[int64](UID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            Container,
				Image:           e.opts.Image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				// PID 1 waits, and ends at once on SIGTERM.
				Command:    podInit,
				WorkingDir: e.opts.MountPath,
				Resources:  res,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Privileged:               ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: volWorkspace, MountPath: e.opts.MountPath},
					{Name: volTmp, MountPath: "/tmp"},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: volWorkspace, VolumeSource: ws},
				{Name: volTmp, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
	if e.opts.RuntimeClass != "" {
		pod.Spec.RuntimeClassName = ptr.To(e.opts.RuntimeClass)
	}
	if e.opts.Customize != nil {
		e.opts.Customize(pod)
	}
	return pod
}

// Ensure makes sure a's pod of its incarnation exists, and returns it
// (it may still be Pending: see WaitRunning). It fences first: a pod of
// the agent of another incarnation is stale, and deleted. A pod of its
// incarnation that failed or was evicted is replaced (one being deleted
// too), and so is one whose resources are not a's limits (they changed);
// one more than one is deleted. With the default workspace,
// it makes the agent's claim if missing.
//
// In SandboxClaims mode (claims.go), the same holds of the agent's
// SandboxClaims, and the pod it returns is nil until the controller has
// made it (WaitRunning waits for it).
func (e *Executor) Ensure(ctx context.Context, a Agent) (*corev1.Pod, error) {
	if err := e.checkIDs(a.ID, a.Incarnation); err != nil {
		return nil, err
	}
	if _, err := e.Fence(ctx, a.ID, a.Incarnation); err != nil {
		return nil, err
	}
	if err := e.isolate(ctx, a); err != nil {
		return nil, err
	}
	if on, err := e.SandboxClaims(ctx); err != nil {
		return nil, err
	} else if on {
		return e.ensureClaims(ctx, a)
	}
	pods, err := e.pods(ctx, a.ID, a.Incarnation)
	if err != nil {
		return nil, err
	}
	var keep *corev1.Pod
	if cur := current(pods); cur != nil {
		if st := Classify(cur, a.Incarnation); !st.Replace() && st.State != StateDeleting && sameResources(cur, e.Pod(a)) {
			keep = cur
		}
	}
	for i := range pods {
		p := &pods[i]
		if p != keep && p.DeletionTimestamp == nil {
			if err := e.deletePod(ctx, p, 0); err != nil {
				return nil, err
			}
		}
	}
	if keep != nil {
		return keep, nil
	}
	if e.opts.Workspace == nil {
		if err := e.ensureClaim(ctx, a.ID); err != nil {
			return nil, err
		}
	}
	return e.create(ctx, a)
}

// sameResources reports whether pod's container has the resources of
// want's.
func sameResources(pod, want *corev1.Pod) bool {
	if len(pod.Spec.Containers) == 0 || len(want.Spec.Containers) == 0 {
		return false
	}
	return apiequality.Semantic.DeepEqual(pod.Spec.Containers[0].Resources, want.Spec.Containers[0].Resources)
}

// create creates a pod for a, isolated first if a is.
func (e *Executor) create(ctx context.Context, a Agent) (*corev1.Pod, error) {
	if err := e.isolate(ctx, a); err != nil {
		return nil, err
	}
	return e.core.Pods(e.target.Namespace).Create(ctx, e.Pod(a), metav1.CreateOptions{})
}

// pods lists the pods of agent's incarnation (of the executor's home).
func (e *Executor) pods(ctx context.Context, agent, incarnation string) ([]corev1.Pod, error) {
	sel := labels.SelectorFromSet(e.labels(agent, incarnation)).String()
	list, err := e.core.Pods(e.target.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// current is the pod that stands for an agent's incarnation among pods:
// the newest that is not being deleted, else the newest; nil for none.
func current(pods []corev1.Pod) *corev1.Pod {
	var cur *corev1.Pod
	for i := range pods {
		p := &pods[i]
		switch {
		case cur == nil:
			cur = p
		case (p.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil):
			if p.DeletionTimestamp == nil {
				cur = p
			}
		case cur.CreationTimestamp.Before(&p.CreationTimestamp),
			cur.CreationTimestamp.Equal(&p.CreationTimestamp) && p.Name > cur.Name:
			cur = p
		}
	}
	return cur
}

// find returns the current pod of agent's incarnation, or nil. In
// SandboxClaims mode, only a pod that a live claim names counts.
func (e *Executor) find(ctx context.Context, agent, incarnation string) (*corev1.Pod, error) {
	if on, err := e.SandboxClaims(ctx); err != nil {
		return nil, err
	} else if on {
		pods, _, err := e.claimPods(ctx, agent, incarnation)
		if err != nil {
			return nil, err
		}
		return current(pods), nil
	}
	pods, err := e.pods(ctx, agent, incarnation)
	if err != nil {
		return nil, err
	}
	return current(pods), nil
}

// ensureClaim makes agent's default workspace claim, if missing.
func (e *Executor) ensureClaim(ctx context.Context, agent string) error {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: ClaimName(agent), Namespace: e.target.Namespace, Labels: e.labels(agent, "")},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: e.opts.WorkspaceSize}},
		},
	}
	if e.opts.StorageClass != "" {
		pvc.Spec.StorageClassName = ptr.To(e.opts.StorageClass)
	}
	_, err := e.core.PersistentVolumeClaims(e.target.Namespace).Create(ctx, pvc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// Fence deletes every pod of agent (of the executor's home) whose
// incarnation is not incarnation: what a daemon that died left. Their
// processes die with them. It returns the names of the pods deleted. In
// SandboxClaims mode, it first deletes the agent's claims of other
// incarnations, with their Sandboxes and pods (their names are the
// pods').
func (e *Executor) Fence(ctx context.Context, agent, incarnation string) ([]string, error) {
	if err := e.checkIDs(agent, incarnation); err != nil {
		return nil, err
	}
	var fenced []string
	if on, err := e.SandboxClaims(ctx); err != nil {
		return nil, err
	} else if on {
		if fenced, err = e.fenceClaims(ctx, agent, incarnation); err != nil {
			return fenced, fmt.Errorf("fence %s: %w", agent, err)
		}
	}
	sel := labels.SelectorFromSet(e.labels(agent, "")).String()
	list, err := e.core.Pods(e.target.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return fenced, fmt.Errorf("fence %s: %w", agent, err)
	}
	for i := range list.Items {
		p := &list.Items[i]
		if p.Labels[LabelIncarnation] == incarnation || p.DeletionTimestamp != nil && slices.Contains(fenced, p.Name) {
			continue
		}
		if err := e.deletePod(ctx, p, 0); err != nil {
			return fenced, fmt.Errorf("fence %s: %w", agent, err)
		}
		if !slices.Contains(fenced, p.Name) {
			fenced = append(fenced, p.Name)
		}
	}
	return fenced, nil
}

// Delete deletes every pod of agent (its session ended), and in
// SandboxClaims mode every SandboxClaim of it first. Its workspace
// claim is kept: DeleteWorkspace deletes it.
func (e *Executor) Delete(ctx context.Context, agent string) error {
	if !tokenRE.MatchString(agent) {
		return fmt.Errorf("%w: agent %q", ErrID, agent)
	}
	if on, err := e.SandboxClaims(ctx); err != nil {
		return err
	} else if on {
		if err := e.deleteClaims(ctx, agent); err != nil {
			return err
		}
	}
	// Its NetworkPolicy stays: the pods' containers may run a while yet,
	// and it selects nothing once they are gone. The start's Reconcile
	// deletes it.
	sel := labels.SelectorFromSet(e.labels(agent, "")).String()
	return e.core.Pods(e.target.Namespace).DeleteCollection(ctx,
		metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{LabelSelector: sel})
}

// DeleteWorkspace deletes agent's default workspace claim, and with it
// (as its reclaim policy says) the workspace.
func (e *Executor) DeleteWorkspace(ctx context.Context, agent string) error {
	err := e.core.PersistentVolumeClaims(e.target.Namespace).Delete(ctx, ClaimName(agent), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// deletePod deletes p, and only p (not a pod of the same name made
// since), at once: its grace is grace seconds.
func (e *Executor) deletePod(ctx context.Context, p *corev1.Pod, grace int64) error {
	err := e.core.Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To(grace),
		Preconditions:      &metav1.Preconditions{UID: ptr.To(p.UID)},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone already, or another pod by now
	}
	return err
}

// Status returns the state of the pod of agent's incarnation.
func (e *Executor) Status(ctx context.Context, agent, incarnation string) (Status, error) {
	if err := e.checkIDs(agent, incarnation); err != nil {
		return Status{}, err
	}
	if on, err := e.SandboxClaims(ctx); err != nil {
		return Status{}, err
	} else if on {
		pods, claims, err := e.claimPods(ctx, agent, incarnation)
		if err != nil {
			return Status{}, err
		}
		if p := current(pods); p != nil {
			return Classify(p, incarnation), nil
		}
		return claimStatus(claims, incarnation), nil
	}
	p, err := e.find(ctx, agent, incarnation)
	if err != nil {
		return Status{}, err
	}
	if p == nil {
		return Status{State: StateMissing, Incarnation: incarnation}, nil
	}
	return Classify(p, incarnation), nil
}

// WaitRunning waits until the pod of agent's incarnation runs, and
// returns it; or until it cannot (failed, evicted, being deleted, an
// error that waiting does not cure), which it returns as ErrNotReady
// with the Status, or there is none (ErrNoPod); or until ctx ends.
func (e *Executor) WaitRunning(ctx context.Context, agent, incarnation string) (*corev1.Pod, error) {
	if err := e.checkIDs(agent, incarnation); err != nil {
		return nil, err
	}
	claimsOn, err := e.SandboxClaims(ctx)
	if err != nil {
		return nil, err
	}
	timeout := int64(60)
	if claimsOn {
		timeout = 10 // the claims are looked at again at least this often
	}
	var got *corev1.Pod
	err = e.watchPods(ctx, labels.SelectorFromSet(e.labels(agent, incarnation)).String(), timeout, func(pods []corev1.Pod) (bool, error) {
		if claimsOn {
			// Only a pod that a live claim names; none yet, while a
			// claim is there, is a pod its controller has yet to make.
			claims, err := e.liveClaims(ctx, agent, incarnation)
			if err != nil {
				return true, err
			}
			if pods = claimed(pods, claims); len(pods) == 0 && len(claims) > 0 {
				if st := claimStatus(claims, incarnation); st.State == StateBroken {
					return true, fmt.Errorf("%w: sandbox claim: %s", ErrNotReady, st)
				}
				if why := unanswered(claims, time.Now()); why != "" {
					return true, fmt.Errorf("%w: %s", ErrNotReady, why)
				}
				return false, nil
			}
		}
		cur := current(pods)
		if cur == nil {
			return true, fmt.Errorf("%w: agent %s, incarnation %s", ErrNoPod, agent, incarnation)
		}
		switch st := Classify(cur, incarnation); st.State {
		case StateRunning:
			got = cur.DeepCopy()
			return true, nil
		case StatePending:
			return false, nil
		default:
			return true, fmt.Errorf("%w: pod %s: %s", ErrNotReady, cur.Name, st)
		}
	})
	return got, err
}

// watchPods calls done with the pods that sel selects, as they are now
// and at each change, until done says so or ctx ends.
func (e *Executor) watchPods(ctx context.Context, sel string, timeout int64, done func([]corev1.Pod) (bool, error)) error {
	pods := e.core.Pods(e.target.Namespace)
	for {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return err
		}
		byUID := map[string]corev1.Pod{}
		for _, p := range list.Items {
			byUID[string(p.UID)] = p
		}
		all := func() []corev1.Pod {
			out := make([]corev1.Pod, 0, len(byUID))
			for _, p := range byUID {
				out = append(out, p)
			}
			return out
		}
		if ok, err := done(all()); ok || err != nil {
			return err
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion, TimeoutSeconds: ptr.To(timeout)})
		if err != nil {
			return err
		}
		ok, err := func() (bool, error) {
			defer w.Stop()
			for ev := range w.ResultChan() {
				p, isPod := ev.Object.(*corev1.Pod)
				switch {
				case ev.Type == watch.Error:
					return false, nil // list again
				case !isPod:
					continue
				case ev.Type == watch.Deleted:
					delete(byUID, string(p.UID))
				default:
					byUID[string(p.UID)] = *p
				}
				if ok, err := done(all()); ok || err != nil {
					return true, err
				}
			}
			return false, ctx.Err()
		}()
		if ok || err != nil {
			return err
		}
	}
}
