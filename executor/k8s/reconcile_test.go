package k8s

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/substrat/substrat/fsstore"
)

// TestReconcile: the store wins. The cluster holds, for one home:
//   - keep: a busy agent's pod of its incarnation (kept);
//   - stale: a busy agent's pod of an older incarnation (deleted, and a
//     pod of the current one made);
//   - idleStale: an idle agent's stale pod (deleted, none made);
//   - orphan: a pod of an agent the store no longer has (deleted);
//   - failed: a busy agent's failed pod (deleted, made again);
//   - missing: a busy agent without a pod (made);
//   - idle: an idle agent without a pod (none made);
//   - another home's pod, of an agent this one does not know (untouched).
func TestReconcile(t *testing.T) {
	e := newExec(t, Options{Workspace: emptyDir})
	ctx := ctxT(t)
	keep, stale, idleStale, orphan, failed, missing, idle := fsstore.NewID(), fsstore.NewID(), fsstore.NewID(),
		fsstore.NewID(), fsstore.NewID(), fsstore.NewID(), fsstore.NewID()

	kept := running(t, e, Agent{ID: keep, Incarnation: "2"})
	staleOld := running(t, e, Agent{ID: stale, Incarnation: "1"})
	idleOld := running(t, e, Agent{ID: idleStale, Incarnation: "1"})
	orphanPod := running(t, e, Agent{ID: orphan, Incarnation: "2"})
	failedPod := running(t, e, Agent{ID: failed, Incarnation: "2"})
	setStatus(t, e, failedPod.Name, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })
	other := *e
	other.opts.Home = "other-" + token()
	otherPod := running(t, &other, Agent{ID: fsstore.NewID(), Incarnation: "1"})

	live := []Agent{
		{ID: keep, Incarnation: "2", Busy: true},
		{ID: stale, Incarnation: "2", Busy: true},
		{ID: idleStale, Incarnation: "2"},
		{ID: failed, Incarnation: "2", Busy: true},
		{ID: missing, Incarnation: "2", Busy: true},
		{ID: idle, Incarnation: "2"},
	}
	r, err := e.Reconcile(ctx, live)
	if err != nil {
		t.Fatal(err)
	}
	sorted := func(s ...string) []string { slices.Sort(s); return s }
	if want := sorted(staleOld.Name, idleOld.Name, orphanPod.Name, failedPod.Name); !slices.Equal(r.Deleted, want) {
		t.Errorf("deleted %v, want %v", r.Deleted, want)
	}
	var created []string
	for _, n := range r.Created {
		for _, a := range []string{stale, failed, missing} {
			if strings.HasPrefix(n, PodPrefix(a, "2")) {
				created = append(created, a)
			}
		}
	}
	if want := sorted(stale, failed, missing); !slices.Equal(sorted(created...), want) || len(r.Created) != 3 {
		t.Errorf("created %v, want pods of %v", r.Created, want)
	}
	if !slices.Equal(r.Kept, []string{kept.Name}) {
		t.Errorf("kept %v", r.Kept)
	}
	for _, n := range r.Deleted {
		gone(t, e, n)
	}
	for _, a := range []string{stale, failed, missing} {
		if _, err := e.WaitRunning(ctx, a, "2"); err != nil {
			t.Fatal(err)
		}
	}
	if p, err := e.core.Pods(e.target.Namespace).Get(ctx, kept.Name, metav1.GetOptions{}); err != nil || p.UID != kept.UID {
		t.Errorf("the kept pod: %v", err)
	}
	if p, err := e.core.Pods(e.target.Namespace).Get(ctx, otherPod.Name, metav1.GetOptions{}); err != nil || p.UID != otherPod.UID {
		t.Errorf("another home's pod: %v", err)
	}
	// Again: nothing to do.
	r, err = e.Reconcile(ctx, live)
	if err != nil || len(r.Deleted) != 0 || len(r.Created) != 0 || len(r.Kept) != 4 {
		t.Errorf("second reconcile: %+v, %v", r, err)
	}
	// An empty store: every pod of the home goes, the other home's stays.
	if r, err = e.Reconcile(ctx, nil); err != nil || len(r.Deleted) != 4 {
		t.Errorf("empty store: %+v, %v", r, err)
	}
	waitFor(t, "the home's pods to go", func() (bool, error) {
		pods, err := e.listHome(ctx)
		return len(pods) == 0, err
	})
	if _, err := e.core.Pods(e.target.Namespace).Get(ctx, otherPod.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("another home's pod: %v", err)
	}
}

var reconcilePods = flag.Int("k8s.pods", 1000, "pods for TestReconcileAtScale")

// TestReconcileAtScale measures Reconcile at the daemon's start with
// -k8s.pods pods (1,000 by default) against the control plane. It logs
// the figures and asserts none of them: this machine is shared and
// slow. Three starts:
//   - after a clean stop: every pod is its agent's, and kept;
//   - after a restart: every incarnation is new, so every pod is stale,
//     deleted, and made again for the busy half of the agents;
//   - the store lost its agents: every pod is an orphan.
func TestReconcileAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	n := *reconcilePods
	defer func(d time.Duration) { waitLimit = d }(waitLimit)
	waitLimit = 15 * time.Minute
	e := newExec(t, Options{Workspace: emptyDir}) // the daemon's defaults: QPS, Burst, Workers
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	live := make([]Agent, n)
	for i := range live {
		live[i] = Agent{ID: fmt.Sprintf("agent-%05d", i), Incarnation: "1", Busy: true}
	}
	t0 := time.Now()
	r, err := e.Reconcile(ctx, live)
	if err != nil || len(r.Created) != n {
		t.Fatalf("making %d pods: %d made, %v", n, len(r.Created), err)
	}
	made := time.Since(t0)
	waitRunning(t, e, n)
	t.Logf("%d pods: created in %v, all Running after %v", n, made.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))

	t0 = time.Now()
	r, err = e.Reconcile(ctx, live)
	if err != nil || len(r.Kept) != n {
		t.Fatalf("clean start: %d kept, %v", len(r.Kept), err)
	}
	t.Logf("reconcile of %d pods at a clean start (all kept): %v", n, time.Since(t0).Round(time.Millisecond))

	for i := range live {
		live[i].Incarnation, live[i].Busy = "2", i%2 == 0
	}
	t0 = time.Now()
	r, err = e.Reconcile(ctx, live)
	if err != nil || len(r.Deleted) != n || len(r.Created) != n/2+n%2 {
		t.Fatalf("restart: %d deleted, %d made, %v", len(r.Deleted), len(r.Created), err)
	}
	took := time.Since(t0)
	waitFor(t, "the stale pods to go", func() (bool, error) {
		pods, err := e.listHome(ctx)
		return len(pods) == len(r.Created), err
	})
	waitRunning(t, e, len(r.Created))
	t.Logf("reconcile of %d pods after a restart (%d stale deleted, %d made): %v; all made Running, all stale gone after %v",
		n, len(r.Deleted), len(r.Created), took.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))

	t0 = time.Now()
	r, err = e.Reconcile(ctx, nil)
	if err != nil || len(r.Deleted) != len(live)/2+len(live)%2 {
		t.Fatalf("empty store: %d deleted, %v", len(r.Deleted), err)
	}
	t.Logf("reconcile of %d orphan pods: %v", len(r.Deleted), time.Since(t0).Round(time.Millisecond))
}

// waitRunning waits until n pods of e's home run.
func waitRunning(t *testing.T, e *Executor, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d pods Running", n), func() (bool, error) {
		pods, err := e.listHome(context.Background())
		c := 0
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				c++
			}
		}
		return c == n, err
	})
}
