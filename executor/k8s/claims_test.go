package k8s

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/substrat/substrat/executor"
	"github.com/substrat/substrat/executor/executortest"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/internal/k8stest"
)

// The tests of SandboxClaims mode run against the real agent-sandbox
// controller, which scripts/k8s-control-plane.sh builds from
// third_party/agent-sandbox and starts with its CRDs.

// claimsExec is newExec in claims mode.
func claimsExec(t testing.TB, opts Options) *Executor {
	t.Helper()
	opts.SandboxClaims = ClaimsOn
	return newExec(t, opts)
}

// claimsOf lists the claims of agent (every incarnation) of e's home.
func claimsOf(t testing.TB, e *Executor, agent string) []sandboxClaim {
	t.Helper()
	cs, err := e.listClaims(context.Background(), labels.SelectorFromSet(e.labels(agent, "")).String())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// noObject waits until e's namespace has no object named name of gvr.
func noObject(t testing.TB, e *Executor, gvr schema.GroupVersionResource, name string) {
	t.Helper()
	waitFor(t, gvr.Resource+" "+name+" to be gone", func() (bool, error) {
		_, err := e.dyn.Resource(gvr).Namespace(e.target.Namespace).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// run runs script in agent's incarnation's pod and returns its output.
func run(t testing.TB, e *Executor, agent, incarnation, script string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	p, err := e.Start(ctxT(t), &executor.Cmd{Agent: agent, Incarnation: incarnation,
		Argv: []string{"/bin/sh", "-c", script}, Stdout: &out, Stderr: &out})
	if err != nil {
		return "", err
	}
	err = p.Wait()
	return out.String(), err
}

// TestClaimMode: the mode is what Options say, and auto finds the CRDs
// of the control plane.
func TestClaimMode(t *testing.T) {
	ctx := ctxT(t)
	for mode, want := range map[string]bool{ClaimsOn: true, ClaimsOff: false, ClaimsAuto: true} {
		e := newExec(t, Options{SandboxClaims: mode})
		if on, err := e.SandboxClaims(ctx); err != nil || on != want {
			t.Errorf("mode %s: %v, %v; want %v", mode, on, err, want)
		}
	}
	if _, err := claimsMode("maybe"); err == nil {
		t.Error("claimsMode(maybe): no error")
	}
	t.Setenv(SandboxClaimsEnv, "on")
	if m, err := claimsMode(""); m != ClaimsOn || err != nil {
		t.Errorf("claimsMode from the environment: %q, %v", m, err)
	}
}

// TestClaimSpec: Ensure makes a claim, with its template and pool; the
// controller makes a Sandbox and a pod of the claim's name, which goes
// Running with the agent's labels, incarnation, resources, workspace
// and hardened spec as the API server admitted them; a command runs in
// it through Start, and the executors' conformance suite passes.
func TestClaimSpec(t *testing.T) {
	e := claimsExec(t, Options{Image: "example.org/agent:1"})
	ctx := ctxT(t)
	a := Agent{ID: fsstore.NewID(), Incarnation: "3", Busy: true,
		Limits: fsstore.Limits{MemoryBytes: 512 << 20, CPUWeight: 200}}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + token()},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: t.TempDir()}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: e.target.Namespace, Name: ClaimName(a.ID)},
		},
	}
	if _, err := e.core.PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.core.PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})

	if st, err := e.Status(ctx, a.ID, a.Incarnation); err != nil || st.State != StateMissing {
		t.Fatalf("Status before Ensure: %v, %v", st, err)
	}
	t0 := time.Now()
	if _, err := e.Ensure(ctx, a); err != nil {
		t.Fatal(err)
	}
	p, err := e.WaitRunning(ctx, a.ID, a.Incarnation)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("claim: Ensure to Running: %v", time.Since(t0).Round(time.Millisecond))

	cs := claimsOf(t, e, a.ID)
	if len(cs) != 1 {
		t.Fatalf("%d claims", len(cs))
	}
	c := cs[0]
	if !strings.HasPrefix(c.Name, PodPrefix(a.ID, "3")) || p.Name != c.Name || c.Spec.WarmPoolRef.Name != c.Name {
		t.Errorf("claim %s (pool %s), pod %s", c.Name, c.Spec.WarmPoolRef.Name, p.Name)
	}
	for _, gvr := range []schema.GroupVersionResource{templatesGVR, poolsGVR} {
		u, err := e.dyn.Resource(gvr).Namespace(e.target.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if refs := u.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != c.UID || refs[0].Kind != "SandboxClaim" {
			t.Errorf("%s owners %+v", gvr.Resource, refs)
		}
	}
	// The pod is the controller's, through the claim's Sandbox.
	if ref := metav1.GetControllerOf(p); ref == nil || ref.Kind != "Sandbox" || ref.Name != c.Name {
		t.Errorf("pod controller %+v", ref)
	}
	if p.Labels[LabelAgent] != a.ID || p.Labels[LabelIncarnation] != "3" ||
		p.Labels[LabelHome] != e.opts.Home || p.Labels[LabelManagedBy] != ManagedBy {
		t.Errorf("labels %v", p.Labels)
	}
	if p.Spec.NodeName == "" {
		t.Error("not scheduled")
	}
	ct := p.Spec.Containers[0]
	if ct.Name != Container || ct.Image != "example.org/agent:1" {
		t.Errorf("container %s, image %s", ct.Name, ct.Image)
	}
	mem := resource.MustParse("512Mi")
	if q := ct.Resources.Limits[corev1.ResourceMemory]; q.Cmp(mem) != 0 {
		t.Errorf("memory limit %v", q.String())
	}
	if q := ct.Resources.Requests[corev1.ResourceCPU]; q.MilliValue() != 200 {
		t.Errorf("cpu request %v", q.String())
	}
	ws := slices.IndexFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == volWorkspace })
	if ws < 0 || p.Spec.Volumes[ws].PersistentVolumeClaim == nil || p.Spec.Volumes[ws].PersistentVolumeClaim.ClaimName != ClaimName(a.ID) {
		t.Errorf("volumes %+v", p.Spec.Volumes)
	}
	sc, csc := p.Spec.SecurityContext, ct.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != UID ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", sc)
	}
	if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
		csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem ||
		csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container security context %+v", csc)
	}
	if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
		t.Error("a service account token is mounted")
	}
	if p.Spec.DNSPolicy == corev1.DNSNone {
		t.Errorf("the controller's DNS override: %+v", p.Spec.DNSConfig)
	}
	if st, err := e.Status(ctx, a.ID, a.Incarnation); err != nil || st.State != StateRunning {
		t.Errorf("Status: %v, %v", st, err)
	}
	// Ensure again keeps it.
	if got, err := e.Ensure(ctx, a); err != nil || got == nil || got.UID != p.UID {
		t.Errorf("Ensure again: %v, %v", got, err)
	}
	if out, err := run(t, e, a.ID, "3", "echo in the pod of the claim"); err != nil || out != "in the pod of the claim\n" {
		t.Fatalf("Start: %q, %v", out, err)
	}
	// New limits: a new claim, and its pod.
	a.Limits.MemoryBytes = 256 << 20
	if _, err := e.Ensure(ctx, a); err != nil {
		t.Fatal(err)
	}
	p2, err := e.WaitRunning(ctx, a.ID, a.Incarnation)
	if err != nil {
		t.Fatal(err)
	}
	if q := p2.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]; p2.Name == p.Name || q.Cmp(resource.MustParse("256Mi")) != 0 {
		t.Errorf("after new limits: pod %s, memory %v", p2.Name, q.String())
	}
	noObject(t, e, claimsGVR, c.Name)
	gone(t, e, p.Name)

	// The suite's commands are agent a's, incarnation 1 (whose
	// workspace has no volume here: an emptyDir).
	e2 := claimsExec(t, Options{Workspace: emptyDir})
	running(t, e2, Agent{ID: "a", Incarnation: "1"})
	executortest.Run(t, e2, func(t *testing.T, cmd ...string) *executor.Cmd {
		return &executor.Cmd{Argv: cmd}
	})
}

// BenchmarkEnsureRunning: how long a pod takes from Ensure to Running,
// made directly and through a claim: go test -run '^$' -bench
// EnsureRunning ./executor/k8s.
func BenchmarkEnsureRunning(b *testing.B) {
	for _, mode := range []string{ClaimsOff, ClaimsOn} {
		b.Run("claims-"+mode, func(b *testing.B) {
			e := newExec(b, Options{SandboxClaims: mode, Workspace: emptyDir})
			i := 0
			for b.Loop() {
				running(b, e, Agent{ID: fmt.Sprintf("a%d", i), Incarnation: "1"})
				i++
			}
		})
	}
}

// TestClaimFencing: a new incarnation's Fence deletes the old claim and
// its pod, and the old incarnation's Start is refused, even in a pod
// that carries its labels but that no live claim names.
func TestClaimFencing(t *testing.T) {
	e := claimsExec(t, Options{Workspace: emptyDir})
	ctx := ctxT(t)
	id := fsstore.NewID()
	old := running(t, e, Agent{ID: id, Incarnation: "1"})
	if out, err := run(t, e, id, "1", "echo one"); err != nil || out != "one\n" {
		t.Fatalf("incarnation 1: %q, %v", out, err)
	}
	oldClaim := claimsOf(t, e, id)[0].Name

	fenced, err := e.Fence(ctx, id, "2")
	if err != nil || !slices.Equal(fenced, []string{oldClaim}) {
		t.Fatalf("Fence: %v, %v", fenced, err)
	}
	noObject(t, e, claimsGVR, oldClaim)
	noObject(t, e, sandboxesGVR, oldClaim)
	gone(t, e, old.Name)
	noObject(t, e, templatesGVR, oldClaim) // by the garbage collector
	noObject(t, e, poolsGVR, oldClaim)
	if _, err := e.Start(ctx, &executor.Cmd{Agent: id, Incarnation: "1", Argv: []string{"true"}}); !errors.Is(err, ErrNoPod) {
		t.Fatalf("Start of the stale incarnation: %v, want ErrNoPod", err)
	}

	// A running pod with incarnation 1's labels but no claim (what a
	// Sandbox could make again before it went): refused too.
	stray, err := e.create(ctx, Agent{ID: id, Incarnation: "1"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stray pod to run", func() (bool, error) {
		p, err := e.core.Pods(e.target.Namespace).Get(ctx, stray.Name, metav1.GetOptions{})
		return err == nil && Classify(p, "1").State == StateRunning, err
	})
	if _, err := e.Start(ctx, &executor.Cmd{Agent: id, Incarnation: "1", Argv: []string{"true"}}); !errors.Is(err, ErrNoPod) {
		t.Fatalf("Start in a pod no claim names: %v, want ErrNoPod", err)
	}
	if st, err := e.Status(ctx, id, "1"); err != nil || st.State != StateMissing {
		t.Errorf("Status of the stale incarnation: %v, %v", st, err)
	}

	// Incarnation 2 runs; its Ensure deleted the stray pod (a pod of
	// another incarnation).
	two := running(t, e, Agent{ID: id, Incarnation: "2"})
	gone(t, e, stray.Name)
	if out, err := run(t, e, id, "2", "echo two"); err != nil || out != "two\n" {
		t.Fatalf("incarnation 2: %q, %v", out, err)
	}
	if cs := claimsOf(t, e, id); len(cs) != 1 || cs[0].Labels[LabelIncarnation] != "2" || cs[0].Name != two.Name {
		t.Errorf("claims after fencing: %+v", cs)
	}
}

// TestClaimReconcile: the store wins over the home's claims: an orphan's
// claim and a stale incarnation's are deleted, with their pods; a busy
// agent whose claim is gone gets one; an idle agent's is kept; a pod no
// claim names is deleted; another home's claim is not touched.
func TestClaimReconcile(t *testing.T) {
	e := claimsExec(t, Options{Workspace: emptyDir})
	ctx := ctxT(t)
	keep, stale, orphan, lost := fsstore.NewID(), fsstore.NewID(), fsstore.NewID(), fsstore.NewID()
	keepPod := running(t, e, Agent{ID: keep, Incarnation: "2"})
	stalePod := running(t, e, Agent{ID: stale, Incarnation: "1"})
	orphanPod := running(t, e, Agent{ID: orphan, Incarnation: "2"})
	lostPod := running(t, e, Agent{ID: lost, Incarnation: "2"})
	// lost's claim goes (and with it its pod) while the daemon is down.
	if err := e.deleteClaims(ctx, lost); err != nil {
		t.Fatal(err)
	}
	gone(t, e, lostPod.Name)
	// A pod-mode pod of keep, left over.
	strayPod, err := e.create(ctx, Agent{ID: keep, Incarnation: "2"})
	if err != nil {
		t.Fatal(err)
	}
	other := *e
	other.opts.Home = "other-" + token()
	otherPod := running(t, &other, Agent{ID: fsstore.NewID(), Incarnation: "1"})

	r, err := e.Reconcile(ctx, []Agent{
		{ID: keep, Incarnation: "2"},
		{ID: stale, Incarnation: "2", Busy: true},
		{ID: lost, Incarnation: "2", Busy: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reconciled: %+v", r)
	if !slices.Equal(r.Kept, []string{keepPod.Name}) {
		t.Errorf("kept %v, want %v", r.Kept, keepPod.Name)
	}
	wantDeleted := []string{stalePod.Name, orphanPod.Name, strayPod.Name}
	slices.Sort(wantDeleted)
	if !slices.Equal(r.Deleted, wantDeleted) {
		t.Errorf("deleted %v, want %v", r.Deleted, wantDeleted)
	}
	if len(r.Created) != 2 {
		t.Errorf("created %v, want claims for %s and %s", r.Created, stale, lost)
	}
	for _, n := range wantDeleted {
		gone(t, e, n)
	}
	noObject(t, e, claimsGVR, orphanPod.Name)
	noObject(t, e, claimsGVR, stalePod.Name)
	for _, id := range []string{stale, lost} {
		p, err := e.WaitRunning(ctx, id, "2")
		if err != nil {
			t.Fatalf("agent %s: %v", id, err)
		}
		if !slices.Contains(r.Created, p.Name) {
			t.Errorf("agent %s runs in %s, not a claim Reconcile made (%v)", id, p.Name, r.Created)
		}
	}
	if _, err := e.core.Pods(e.target.Namespace).Get(ctx, otherPod.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the other home's pod: %v", err)
	}
	if cs := claimsOf(t, &other, otherPod.Labels[LabelAgent]); len(cs) != 1 {
		t.Errorf("the other home's claims: %d", len(cs))
	}
	// Again: nothing to do.
	r, err = e.Reconcile(ctx, []Agent{{ID: keep, Incarnation: "2"}, {ID: stale, Incarnation: "2", Busy: true}, {ID: lost, Incarnation: "2", Busy: true}})
	if err != nil || len(r.Deleted)+len(r.Created) != 0 || len(r.Kept) != 3 {
		t.Errorf("second Reconcile: %+v, %v", r, err)
	}
}

// TestClaimDelete: Delete removes an ended agent's claims, Sandboxes,
// templates, pools and pods.
func TestClaimDelete(t *testing.T) {
	e := claimsExec(t, Options{Workspace: emptyDir})
	ctx := ctxT(t)
	id := fsstore.NewID()
	p := running(t, e, Agent{ID: id, Incarnation: "1"})
	if err := e.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	gone(t, e, p.Name)
	for _, gvr := range []schema.GroupVersionResource{claimsGVR, sandboxesGVR, templatesGVR, poolsGVR} {
		noObject(t, e, gvr, p.Name)
	}
	if st, err := e.Status(ctx, id, "1"); err != nil || st.State != StateMissing {
		t.Errorf("Status after Delete: %v, %v", st, err)
	}
}

// TestClaimPending: a claim whose pod the controller cannot make (its
// pool and template are gone) is pending, with the claim's reason, and
// WaitRunning keeps waiting; Ensure replaces such a claim.
func TestClaimPending(t *testing.T) {
	e := claimsExec(t, Options{Workspace: emptyDir})
	ctx := ctxT(t)
	id := fsstore.NewID()
	if _, err := e.Ensure(ctx, Agent{ID: id, Incarnation: "1"}); err != nil {
		t.Fatal(err)
	}
	c := claimsOf(t, e, id)[0]
	// The pool goes before the controller has made the Sandbox, or after:
	// delete both, so that nothing makes the pod again.
	for _, gvr := range []schema.GroupVersionResource{poolsGVR, templatesGVR, sandboxesGVR} {
		e.dyn.Resource(gvr).Namespace(e.target.Namespace).Delete(ctx, c.Name, metav1.DeleteOptions{})
		noObject(t, e, gvr, c.Name)
	}
	pods, err := e.pods(ctx, id, "1")
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods {
		e.deletePod(ctx, &pods[i], 0)
		gone(t, e, pods[i].Name)
	}
	var st Status
	waitFor(t, "the claim's reason", func() (bool, error) {
		st, err = e.Status(ctx, id, "1")
		return st.Reason != "NoPodYet", err
	})
	if st.State != StatePending || !strings.Contains(st.Reason, "SandboxClaim") {
		t.Errorf("Status of a claim without its pool: %v", st)
	}
	t.Logf("status: %v", st)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := e.WaitRunning(wctx, id, "1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitRunning: %v, want to wait", err)
	}
	if _, err := e.Start(ctx, &executor.Cmd{Agent: id, Incarnation: "1", Argv: []string{"true"}}); !errors.Is(err, ErrNoPod) {
		t.Errorf("Start with no pod: %v, want ErrNoPod", err)
	}
	// Ensure replaces the claim, and the new one's pod comes.
	t0 := time.Now()
	if _, err := e.Ensure(ctx, Agent{ID: id, Incarnation: "1"}); err != nil {
		t.Fatal(err)
	}
	p, err := e.WaitRunning(ctx, id, "1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replaced in %v", time.Since(t0).Round(time.Millisecond))
	noObject(t, e, claimsGVR, c.Name)
	if cs := claimsOf(t, e, id); len(cs) != 1 || p.Name != cs[0].Name || p.Name == c.Name {
		t.Errorf("pod %s, claims %v, the old one %s", p.Name, cs, c.Name)
	}
}

// TestClaimPodGone: a pod deleted under a command fails it (ErrPodGone),
// and its claim is dropped, though its Sandbox would make the pod again
// under the same name: the next Ensure makes a new claim and pod.
func TestClaimPodGone(t *testing.T) {
	e := claimsExec(t, Options{Workspace: emptyDir})
	ctx := ctxT(t)
	id := fsstore.NewID()
	p := running(t, e, Agent{ID: id, Incarnation: "1"})
	// On kwok the command runs on this machine and outlives its pod: its
	// exec ends when it does.
	outR, outW := io.Pipe()
	proc, err := e.Start(ctx, &executor.Cmd{Agent: id, Incarnation: "1",
		Argv: []string{"/bin/sh", "-c", "echo started; exec sleep 2"}, Stdout: outW})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if _, err := io.ReadFull(outR, buf); err != nil || string(buf) != "started\n" {
		t.Fatalf("said %q, %v", buf, err)
	}
	go io.Copy(io.Discard, outR)
	if err := e.deletePod(ctx, p, 0); err != nil {
		t.Fatal(err)
	}
	if err := proc.Wait(); !errors.Is(err, ErrPodGone) {
		t.Fatalf("Wait: %v, want ErrPodGone", err)
	}
	noObject(t, e, claimsGVR, p.Name)
	p2 := running(t, e, Agent{ID: id, Incarnation: "1"})
	if p2.Name == p.Name {
		t.Errorf("the new pod has the old one's name %s", p.Name)
	}
}

// TestDecodeClaim: a claim whose status is garbage is read by its
// metadata, with no panic and no error; a good one in full.
func TestDecodeClaim(t *testing.T) {
	good := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "c", "uid": "u1", "labels": map[string]any{LabelAgent: "a"}},
		"spec":     map[string]any{"warmPoolRef": map[string]any{"name": "c"}},
		"status": map[string]any{"sandbox": map[string]any{"name": "s"},
			"conditions": []any{map[string]any{"type": "Ready", "status": "False", "reason": "R", "message": "m"}}},
	}}
	c := decodeClaim(good)
	if c.Name != "c" || c.podName() != "s" || c.ready() == nil || c.ready().Reason != "R" || c.Labels[LabelAgent] != "a" {
		t.Errorf("good claim: %+v", c)
	}
	for _, status := range []any{"garbage", 7, map[string]any{"sandbox": 3}, map[string]any{"conditions": "x"},
		map[string]any{"conditions": []any{7}}, map[string]any{"sandbox": map[string]any{"name": []any{1}}}} {
		bad := good.DeepCopy()
		bad.Object["status"] = status
		c := decodeClaim(bad)
		if c.Name != "c" || c.UID != "u1" || c.podName() != "c" || c.ready() != nil || c.Labels[LabelAgent] != "a" {
			t.Errorf("status %v: %+v", status, c)
		}
	}
	if st := claimStatus([]sandboxClaim{decodeClaim(good)}, "1"); st.State != StatePending || st.Reason != "SandboxClaim R" {
		t.Errorf("claimStatus: %v", st)
	}
}

// TestClaimRealKubelet: a claim's pod on the node with a real kubelet
// (skipped where there is none): the command runs in a real container,
// as the pod's user, under its memory limit, on a read-only root; the
// conformance suite passes; and a fence kills what runs there.
func TestClaimRealKubelet(t *testing.T) {
	node, image := k8stest.Kubelet(t)
	e := claimsExec(t, Options{Image: image, Workspace: emptyDir, Customize: func(p *corev1.Pod) {
		p.Spec.NodeName = node
		p.Spec.HostNetwork = true
		p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	}})
	ctx := ctxT(t)
	a := Agent{ID: "a", Incarnation: "1", Limits: fsstore.Limits{MemoryBytes: 64 << 20, CPUWeight: 100}}
	t0 := time.Now()
	pod := running(t, e, a)
	t.Logf("claim: Ensure to Running on a real kubelet: %v", time.Since(t0).Round(time.Millisecond))
	if ref := metav1.GetControllerOf(pod); ref == nil || ref.Kind != "Sandbox" {
		t.Fatalf("not the controller's pod: %+v", ref)
	}
	out, err := run(t, e, "a", "1", `PATH=/usr/bin:/bin; id -u; cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max; `+
		`if (: > /rootfile) 2>/dev/null; then echo root-writable; else echo root-read-only; fi; pwd`)
	if want := "65532\n67108864\nroot-read-only\n/workspace\n"; err != nil || out != want {
		t.Errorf("in the container: %q, %v; want %q", out, err, want)
	}
	executortest.Run(t, e, func(t *testing.T, cmd ...string) *executor.Cmd {
		return &executor.Cmd{Argv: cmd, Env: []string{"PATH=/usr/bin:/bin"}}
	})
	outR, outW := io.Pipe()
	p, err := e.Start(ctx, &executor.Cmd{Agent: "a", Incarnation: "1", Env: []string{"PATH=/usr/bin:/bin"},
		Argv: []string{"/bin/sh", "-c", `echo started; sleep 1000`}, Stdout: outW})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if _, err := io.ReadFull(outR, buf); err != nil || string(buf) != "started\n" {
		t.Fatalf("said %q, %v", buf, err)
	}
	go io.Copy(io.Discard, outR)
	if _, err := e.Fence(ctx, "a", "2"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a fenced command's Wait returned nil")
		}
	case <-ctx.Done():
		t.Fatal("a fenced command still runs")
	}
	gone(t, e, pod.Name)
	if _, err := e.Start(ctx, &executor.Cmd{Agent: "a", Incarnation: "1", Argv: []string{"true"}}); !errors.Is(err, ErrNoPod) {
		t.Errorf("Start of the fenced incarnation: %v", err)
	}
}

// TestClaimRefused: a pod that the API server refuses (here a memory
// request over its limit) leaves its claim broken, with the API's reason;
// WaitRunning says so instead of waiting.
func TestClaimRefused(t *testing.T) {
	e := claimsExec(t, Options{Workspace: emptyDir, Customize: func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
	}})
	ctx := ctxT(t)
	if _, err := e.Ensure(ctx, Agent{ID: "a", Incarnation: "1"}); err != nil {
		t.Fatal(err)
	}
	var st Status
	waitFor(t, "the claim to be broken", func() (bool, error) {
		var err error
		st, err = e.Status(ctx, "a", "1")
		return st.State == StateBroken, err
	})
	if !strings.Contains(st.Message, "must be less than or equal to memory limit") {
		t.Errorf("Status: %v", st)
	}
	t.Logf("status: %v", st)
	if _, err := e.WaitRunning(ctx, "a", "1"); !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "memory limit") {
		t.Errorf("WaitRunning: %v, want ErrNotReady", err)
	}
}

// TestUnansweredClaim: a claim with no status at all, past
// UnansweredClaim, is one no controller answers; a younger one, or one
// with a condition or a Sandbox, is not.
func TestUnansweredClaim(t *testing.T) {
	now := time.Now()
	claim := func(age time.Duration, cond bool) []sandboxClaim {
		var c sandboxClaim
		c.Name = "substrat-x"
		c.CreationTimestamp = metav1.NewTime(now.Add(-age))
		if cond {
			c.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse}}
		}
		return []sandboxClaim{c}
	}
	if why := unanswered(claim(2*UnansweredClaim, false), now); !strings.Contains(why, "no agent-sandbox controller seems to run") {
		t.Errorf("an old claim with no status: %q", why)
	}
	for name, cs := range map[string][]sandboxClaim{
		"young":    claim(UnansweredClaim/2, false),
		"answered": claim(2*UnansweredClaim, true),
		"none":     nil,
	} {
		if why := unanswered(cs, now); why != "" {
			t.Errorf("%s: %q", name, why)
		}
	}
}
