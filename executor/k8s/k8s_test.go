package k8s

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/substrat/substrat/executor"
	"github.com/substrat/substrat/executor/executortest"
	"github.com/substrat/substrat/fsstore"
)

func TestParse(t *testing.T) {
	for s, want := range map[string]Target{
		"k8s://kind-dev/agents":                                  {"kind-dev", "agents"},
		"k8s://arn:aws:eks:eu-west-1:1234:cluster/prod/substrat": {"arn:aws:eks:eu-west-1:1234:cluster/prod", "substrat"},
		"k8s://gke_proj_europe-west1_c1/default":                 {"gke_proj_europe-west1_c1", "default"},
		"k8s://admin@local/ns-1":                                 {"admin@local", "ns-1"},
	} {
		got, err := Parse(s)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", s, got, err, want)
		}
		if got.String() != s {
			t.Errorf("%+v.String() = %q, want %q", got, got.String(), s)
		}
	}
	for _, s := range []string{
		"", "k8s://", "k8s://ctx", "k8s:///ns", "k8s://ctx/", "k8s://ctx/NS", "k8s://ctx/-ns", "k8s://-ctx/ns",
		"k8s://c tx/ns", "k8s://ctx;rm/ns", "k8s://ctx/ns.x", "ssh://host", "k8s://ctx/" + strings.Repeat("a", 64),
	} {
		if _, err := Parse(s); !errors.Is(err, ErrTarget) {
			t.Errorf("Parse(%q): %v, want ErrTarget", s, err)
		}
	}
}

func TestPodPrefix(t *testing.T) {
	id := fsstore.NewID()
	if n := PodPrefix(id, "7"); n != "substrat-"+id+"-7-" {
		t.Errorf("PodPrefix = %q", n)
	}
	long := PodPrefix(id, strings.Repeat("9", 40))
	if !dnsLabelRE.MatchString(long+"abcde") || long == PodPrefix(id, strings.Repeat("9", 41)) {
		t.Errorf("PodPrefix of a long incarnation = %q", long)
	}
	if n := PodPrefix("Agent_1", "1"); !dnsLabelRE.MatchString(n + "abcde") {
		t.Errorf("PodPrefix = %q, not a DNS label", n)
	}
}

// TestPodSpec: the pod as the API server admits and stores it: labels,
// the agent's limits as resources, the workspace claim as a volume
// (bound to a volume, so that the pod is scheduled), the hardened
// security context; and its life: Pending, Running (kwok), deleted.
func TestPodSpec(t *testing.T) {
	e := newExec(t, Options{Image: "example.org/agent:1", RuntimeClass: ""})
	ctx := ctxT(t)
	a := Agent{ID: fsstore.NewID(), Incarnation: "3", Busy: true,
		Limits: fsstore.Limits{MemoryBytes: 512 << 20, CPUWeight: 200, Pids: 256}}
	// A volume for the agent's claim (there is no provisioner here).
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

	t0 := time.Now()
	if _, err := e.Ensure(ctx, a); err != nil {
		t.Fatal(err)
	}
	p, err := e.WaitRunning(ctx, a.ID, a.Incarnation)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Ensure to Running (claim bound first): %v", time.Since(t0).Round(time.Millisecond))

	if !strings.HasPrefix(p.Name, PodPrefix(a.ID, "3")) || p.Labels[LabelAgent] != a.ID || p.Labels[LabelIncarnation] != "3" ||
		p.Labels[LabelHome] != e.opts.Home || p.Labels[LabelManagedBy] != ManagedBy {
		t.Errorf("name %s, labels %v", p.Name, p.Labels)
	}
	if p.Spec.NodeName == "" {
		t.Error("not scheduled")
	}
	c := p.Spec.Containers[0]
	if c.Name != Container || c.Image != "example.org/agent:1" {
		t.Errorf("container %s, image %s", c.Name, c.Image)
	}
	mem := resource.MustParse("512Mi")
	if q := c.Resources.Limits[corev1.ResourceMemory]; q.Cmp(mem) != 0 {
		t.Errorf("memory limit %v", q.String())
	}
	if q := c.Resources.Requests[corev1.ResourceMemory]; q.Cmp(mem) != 0 {
		t.Errorf("memory request %v", q.String())
	}
	if q := c.Resources.Requests[corev1.ResourceCPU]; q.MilliValue() != 200 {
		t.Errorf("cpu request %v", q.String())
	}
	if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		t.Error("a cpu limit: a weight is a share, not a cap")
	}
	if p.Status.QOSClass != corev1.PodQOSBurstable {
		t.Errorf("QoS class %s", p.Status.QOSClass)
	}
	var ws *corev1.Volume
	for i := range p.Spec.Volumes {
		if p.Spec.Volumes[i].Name == volWorkspace {
			ws = &p.Spec.Volumes[i]
		}
	}
	if ws == nil || ws.PersistentVolumeClaim == nil || ws.PersistentVolumeClaim.ClaimName != ClaimName(a.ID) {
		t.Fatalf("workspace volume %+v", ws)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == volWorkspace && m.MountPath == DefaultMountPath
	}) {
		t.Errorf("mounts %+v", c.VolumeMounts)
	}
	pvc, err := e.core.PersistentVolumeClaims(e.target.Namespace).Get(ctx, ClaimName(a.ID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Labels[LabelAgent] != a.ID {
		t.Errorf("claim %s, labels %v", pvc.Status.Phase, pvc.Labels)
	}
	sc, psc := c.SecurityContext, p.Spec.SecurityContext
	switch {
	case psc == nil || !ptr.Deref(psc.RunAsNonRoot, false) || ptr.Deref(psc.RunAsUser, 0) != UID:
		t.Errorf("pod security context %+v", psc)
	case psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("seccomp %+v", psc.SeccompProfile)
	case sc == nil || ptr.Deref(sc.AllowPrivilegeEscalation, true) || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
		t.Errorf("container security context %+v", sc)
	case ptr.Deref(p.Spec.AutomountServiceAccountToken, true):
		t.Error("the service account token is mounted")
	}
	// The restricted Pod Security Standard admits it: enforce it on the
	// namespace and make another pod.
	ns, err := e.core.Namespaces().Get(ctx, e.target.Namespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	if _, err := e.core.Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	b := Agent{ID: fsstore.NewID(), Incarnation: "1"}
	e.opts.Workspace = emptyDir
	if _, err := e.Ensure(ctx, b); err != nil {
		t.Fatalf("the restricted standard refuses the pod: %v", err)
	}

	// Ensure again: the same pod.
	again, err := e.Ensure(ctx, a)
	if err != nil || again.UID != p.UID {
		t.Fatalf("Ensure again: %v, uid %s, was %s", err, again.UID, p.UID)
	}
	// Delete: gone, the claim kept.
	if err := e.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	gone(t, e, p.Name)
	if st, err := e.Status(ctx, a.ID, "3"); err != nil || st.State != StateMissing {
		t.Fatalf("status after Delete: %v, %v", st, err)
	}
	if _, err := e.core.PersistentVolumeClaims(e.target.Namespace).Get(ctx, ClaimName(a.ID), metav1.GetOptions{}); err != nil {
		t.Fatalf("the claim went with the pod: %v", err)
	}
	if err := e.DeleteWorkspace(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
}

// TestStatus: what the daemon makes of each state of a pod, as the
// cluster reports it: missing, pending (unschedulable: its claim has no
// volume), running, evicted and failed (as a kubelet reports them; the
// test writes the status as the kubelet would), broken, and Ensure's
// replacing of a failed pod.
func TestStatus(t *testing.T) {
	e := newExec(t, Options{})
	ctx := ctxT(t)
	pods := e.core.Pods(e.target.Namespace)

	a := Agent{ID: fsstore.NewID(), Incarnation: "1"}
	if st, err := e.Status(ctx, a.ID, "1"); err != nil || st.State != StateMissing {
		t.Fatalf("no pod: %v, %v", st, err)
	}
	// The default workspace: a claim that no volume binds here.
	if _, err := e.Ensure(ctx, a); err != nil {
		t.Fatal(err)
	}
	var st Status
	waitFor(t, "the scheduler to give up on the pod", func() (bool, error) {
		var err error
		st, err = e.Status(ctx, a.ID, "1")
		return err != nil || st.Reason == corev1.PodReasonUnschedulable, err
	})
	if st.State != StatePending || !strings.Contains(st.Message, "PersistentVolumeClaim") {
		t.Errorf("unschedulable: %v", st)
	}
	t.Logf("shown: %s", st)

	e.opts.Workspace = emptyDir
	b := Agent{ID: fsstore.NewID(), Incarnation: "1"}
	p := running(t, e, b)
	if st, _ := e.Status(ctx, b.ID, "1"); st.State != StateRunning || st.Node == "" {
		t.Fatalf("running: %v", st)
	}
	if st := Classify(p, "2"); st.State != StateStale {
		t.Fatalf("another incarnation's: %v", st)
	}

	// Evicted, as a kubelet under memory pressure reports it.
	ev := setStatus(t, e, p.Name, func(p *corev1.Pod) {
		p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: "TerminationByKubelet", Message: "memory pressure", LastTransitionTime: metav1.Now()})
	})
	if st := Classify(ev, "1"); st.State != StateEvicted || st.Reason != "Evicted" || !st.Replace() {
		t.Fatalf("evicted: %v", st)
	}
	st, _ = e.Status(ctx, b.ID, "1")
	t.Logf("shown: %s", st)
	// Ensure replaces it.
	q, err := e.Ensure(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if q.UID == p.UID {
		t.Fatal("Ensure kept the evicted pod")
	}
	if _, err := e.WaitRunning(ctx, b.ID, "1"); err != nil {
		t.Fatal(err)
	}

	// Failed: the container ended with an error.
	q = setStatus(t, e, q.Name, func(q *corev1.Pod) {
		q.Status.Phase = corev1.PodFailed
		q.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}
	})
	if st := Classify(q, "1"); st.State != StateFailed || st.Reason != "OOMKilled" {
		t.Fatalf("failed: %v", st)
	}
	// WaitRunning does not wait for a failed pod.
	if _, err := e.WaitRunning(ctx, b.ID, "1"); !errors.Is(err, ErrNotReady) {
		t.Fatalf("WaitRunning of a failed pod: %v", err)
	}

	// Broken: the image cannot be pulled.
	c := Agent{ID: fsstore.NewID(), Incarnation: "1"}
	r := running(t, e, c)
	// (Its Ready condition stays True, so that kwok leaves it alone.)
	r = setStatus(t, e, r.Name, func(r *corev1.Pod) {
		r.Status.Phase = corev1.PodPending
		r.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}}
		r.Status.ContainerStatuses[0].Ready = false
	})
	if st := Classify(r, "1"); st.State != StateBroken || st.Replace() {
		t.Fatalf("broken: %v", st)
	}
	if _, err := e.Start(ctx, &executor.Cmd{Agent: c.ID, Incarnation: "1", Argv: []string{"true"}}); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Start in a broken pod: %v", err)
	}

	// Deleting: a pod with a finalizer stays, being deleted.
	d := Agent{ID: fsstore.NewID(), Incarnation: "1"}
	dp := running(t, e, d)
	update(t, e, dp.Name, func(p *corev1.Pod) { p.Finalizers = append(p.Finalizers, "substrat.dev/test") })
	if err := pods.Delete(ctx, dp.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deletion", func() (bool, error) {
		st, err := e.Status(ctx, d.ID, "1")
		return st.State == StateDeleting, err
	})
	update(t, e, dp.Name, func(p *corev1.Pod) { p.Finalizers = nil })
	gone(t, e, dp.Name)
}

// update changes the pod named name with f, again while kwok changes it
// too.
func update(t *testing.T, e *Executor, name string, f func(*corev1.Pod)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := e.core.Pods(e.target.Namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		f(p)
		_, err = e.core.Pods(e.target.Namespace).Update(context.Background(), p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// setStatus changes the status of the pod named name with f, as a
// kubelet would, again while kwok changes it too, and returns the pod.
func setStatus(t *testing.T, e *Executor, name string, f func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	var out *corev1.Pod
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := e.core.Pods(e.target.Namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		f(p)
		out, err = e.core.Pods(e.target.Namespace).UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFencing: a daemon restarts with a new incarnation of its agent.
// The old incarnation's pod is deleted, and its commands are refused;
// the new one's run. (That a command still running in a deleted pod dies
// with it is the kubelet's doing, which kwok does not do: not tested.)
func TestFencing(t *testing.T) {
	e := newExec(t, Options{Workspace: emptyDir})
	ctx := ctxT(t)
	id := fsstore.NewID()
	old := running(t, e, Agent{ID: id, Incarnation: "1"})

	// A command of incarnation 1 runs in its pod.
	var out bytes.Buffer
	p, err := e.Start(ctx, &executor.Cmd{Agent: id, Incarnation: "1", Argv: []string{"/bin/sh", "-c", "echo one"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil || out.String() != "one\n" {
		t.Fatalf("incarnation 1: %v, %q", err, out.String())
	}

	// The daemon restarts: incarnation 2.
	fenced, err := e.Fence(ctx, id, "2")
	if err != nil || !slices.Equal(fenced, []string{old.Name}) {
		t.Fatalf("Fence: %v, %v", fenced, err)
	}
	gone(t, e, old.Name)
	if _, err := e.Start(ctx, &executor.Cmd{Agent: id, Incarnation: "1", Argv: []string{"true"}}); !errors.Is(err, ErrNoPod) {
		t.Fatalf("Start of the stale incarnation: %v, want ErrNoPod", err)
	}
	if _, err := e.Start(ctx, &executor.Cmd{Agent: id, Incarnation: "2", Argv: []string{"true"}}); !errors.Is(err, ErrNoPod) {
		t.Fatalf("Start before Ensure: %v, want ErrNoPod", err)
	}
	running(t, e, Agent{ID: id, Incarnation: "2"})
	out.Reset()
	p, err = e.Start(ctx, &executor.Cmd{Agent: id, Incarnation: "2", Argv: []string{"/bin/sh", "-c", "echo two"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil || out.String() != "two\n" {
		t.Fatalf("incarnation 2: %v, %q", err, out.String())
	}
	// Incarnation 1 comes back (a daemon that should be dead): Ensure
	// fences incarnation 2's pod, as the store's current incarnation is
	// the caller's. (The home's lock keeps two daemons from doing so.)
	two, err := e.find(ctx, id, "2")
	if err != nil || two == nil {
		t.Fatalf("incarnation 2's pod: %v", err)
	}
	if _, err := e.Ensure(ctx, Agent{ID: id, Incarnation: "3"}); err != nil {
		t.Fatal(err)
	}
	gone(t, e, two.Name)
	list, err := e.core.Pods(e.target.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Labels[LabelIncarnation] != "3" {
		t.Fatalf("pods after fencing: %d", len(list.Items))
	}
}

// TestConformance: the executor passes the suite of every executor, its
// commands exec'd into a pod through the API server. kwok serves the
// exec on this machine, so the suite finds the command in /proc.
func TestConformance(t *testing.T) {
	e := newExec(t, Options{Workspace: emptyDir})
	running(t, e, Agent{ID: "a", Incarnation: "1"})
	executortest.Run(t, e, func(t *testing.T, cmd ...string) *executor.Cmd {
		return &executor.Cmd{Argv: cmd}
	})
}

// TestStartRefuses: what Start refuses before it execs.
func TestStartRefuses(t *testing.T) {
	e := newExec(t, Options{Workspace: emptyDir})
	ctx := ctxT(t)
	for _, c := range []*executor.Cmd{
		{Agent: "a", Incarnation: "1"},
		{Agent: "a b", Incarnation: "1", Argv: []string{"true"}},
		{Agent: "a", Incarnation: "-1", Argv: []string{"true"}},
	} {
		if _, err := e.Start(ctx, c); !errors.Is(err, executor.ErrInvalid) && !errors.Is(err, ErrID) {
			t.Errorf("Start(%+v): %v", c, err)
		}
	}
	// A pending pod.
	e.opts.Workspace = nil
	if _, err := e.Ensure(ctx, Agent{ID: "b", Incarnation: "1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Start(ctx, &executor.Cmd{Agent: "b", Incarnation: "1", Argv: []string{"true"}}); !errors.Is(err, ErrNotReady) {
		t.Errorf("Start in a pending pod: %v", err)
	}
	// A pod of the agent's name in another home.
	other := *e
	other.opts.Home = "other-" + token()
	other.opts.Workspace = emptyDir
	running(t, &other, Agent{ID: "c", Incarnation: "1"})
	if _, err := e.Start(ctx, &executor.Cmd{Agent: "c", Incarnation: "1", Argv: []string{"true"}}); !errors.Is(err, ErrNoPod) {
		t.Errorf("Start in another home's pod: %v", err)
	}
}

// TestKillMidStream: Kill while the command reads its input; Wait
// returns, and the pod still runs other commands.
func TestKillMidStream(t *testing.T) {
	e := newExec(t, Options{Workspace: emptyDir})
	ctx := ctxT(t)
	running(t, e, Agent{ID: "a", Incarnation: "1"})
	in, inw := io.Pipe()
	p, err := e.Start(ctx, &executor.Cmd{Agent: "a", Incarnation: "1", Argv: []string{"cat"}, Stdin: in})
	if err != nil {
		t.Fatal(err)
	}
	inw.Write([]byte("x"))
	p.Kill()
	if err := p.Wait(); err == nil {
		t.Fatal("Wait of a killed command returned nil")
	}
	inw.Close()
	var out bytes.Buffer
	p, err = e.Start(ctx, &executor.Cmd{Agent: "a", Incarnation: "1", Argv: []string{"echo", "ok"}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil || out.String() != "ok\n" {
		t.Fatalf("after a kill: %v, %q", err, out.String())
	}
}
