package k8s

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reconciled is what Reconcile did: the names of the pods it deleted
// (orphans: no live agent, or a stale incarnation, or failed), made
// (busy agents that had none), and kept.
type Reconciled struct {
	Deleted, Created, Kept []string
}

// Reconcile makes the pods of the executor's home agree with the store,
// at the daemon's start: live is every live agent of the store whose
// executor is this one. The store wins:
//   - a pod of no live agent is an orphan, and deleted;
//   - a pod of another incarnation than its agent's is stale, and
//     deleted (fencing);
//   - a failed or evicted pod is deleted;
//   - a busy agent without a pod (so also one whose pod was deleted
//     above) gets one; an idle agent's is made by its next turn.
//
// Pods of other homes, and objects that are not the executor's, are not
// looked at. It does what it can and returns every error together.
//
// In SandboxClaims mode, the same holds of the home's claims (a claim
// stands for its pod, and the names are the claims'); a pod of the home
// that no kept claim names (pod mode's, left by a daemon in that mode)
// is deleted too. In pod mode, where the API server serves the claims,
// the home's claims are all dropped first, with their Sandboxes,
// templates, pools and pods (what a daemon in claims mode left), and
// the claims' names are among those deleted. In auto mode, it asks the
// API server again whether it serves the claims (claims_mode.go).
//
// Where the executor makes NetworkPolicies, the home's policies of an
// agent that is not live, or not isolated, are deleted too (their names
// among those deleted).
func (e *Executor) Reconcile(ctx context.Context, live []Agent) (Reconciled, error) {
	r, err := e.reconcile(ctx, live)
	if e.opts.NetworkPolicies && !errors.Is(err, ErrID) {
		deleted, perr := e.reconcilePolicies(ctx, live)
		r.Deleted = append(r.Deleted, deleted...)
		err = errors.Join(err, perr)
	}
	return r, err
}

// reconcile is Reconcile but for the policies.
func (e *Executor) reconcile(ctx context.Context, live []Agent) (Reconciled, error) {
	agents := make(map[string]Agent, len(live))
	for _, a := range live {
		if err := e.checkIDs(a.ID, a.Incarnation); err != nil {
			return Reconciled{}, err
		}
		agents[a.ID] = a
	}
	on, served, err := e.claimsNow(ctx)
	if err != nil {
		return Reconciled{}, err
	}
	if on {
		return e.reconcileClaims(ctx, live, agents)
	}
	var (
		r Reconciled
		t tally
	)
	if served {
		e.dropHomeClaims(ctx, &r, &t)
	}
	return e.reconcilePods(ctx, live, agents, r, &t)
}

// reconcilePods is Reconcile in pod mode, after r and t.
func (e *Executor) reconcilePods(ctx context.Context, live []Agent, agents map[string]Agent, r Reconciled, t *tally) (Reconciled, error) {
	pods, err := e.listHome(ctx)
	if err != nil {
		t.note(nil, "", err)
		return r, t.err()
	}
	var (
		doomed   []*corev1.Pod
		creating []Agent
		has      = map[string]bool{} // agents whose pod is kept
	)
	for _, p := range pods {
		a, ok := agents[p.Labels[LabelAgent]]
		if !ok {
			doomed = append(doomed, p) // orphan
			continue
		}
		st := Classify(p, a.Incarnation)
		if st.State == StateDeleting {
			continue // going: neither kept nor to delete
		}
		if st.Replace() || has[a.ID] {
			doomed = append(doomed, p) // stale, failed, evicted, or one too many
			continue
		}
		// Pending, running, broken (shown, not replaced).
		has[a.ID] = true
		r.Kept = append(r.Kept, p.Name)
	}
	for _, a := range live {
		if a.Busy && !has[a.ID] {
			creating = append(creating, a)
		}
	}
	note := t.note
	e.parallel(len(doomed), func(i int) {
		err := e.deletePod(ctx, doomed[i], 0)
		note(&r.Deleted, doomed[i].Name, err)
	})
	e.parallel(len(creating), func(i int) {
		a := creating[i]
		var err error
		if e.opts.Workspace == nil {
			err = e.ensureClaim(ctx, a.ID)
		}
		var p *corev1.Pod
		if err == nil {
			p, err = e.create(ctx, a)
		}
		if err != nil {
			note(nil, "", fmt.Errorf("agent %s: %w", a.ID, err))
			return
		}
		note(&r.Created, p.Name, nil)
	})
	sort.Strings(r.Deleted)
	sort.Strings(r.Created)
	sort.Strings(r.Kept)
	return r, t.err()
}

// listHome lists the pods of the executor's home, page by page.
func (e *Executor) listHome(ctx context.Context) ([]*corev1.Pod, error) {
	var pods []*corev1.Pod
	opts := metav1.ListOptions{LabelSelector: e.homeSelector(), Limit: 500}
	for {
		list, err := e.core.Pods(e.target.Namespace).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			pods = append(pods, &list.Items[i])
		}
		if list.Continue == "" {
			return pods, nil
		}
		opts.Continue = list.Continue
	}
}

// parallel runs f(0..n-1) on at most Options.Workers goroutines.
func (e *Executor) parallel(n int, f func(int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < min(n, e.opts.Workers); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

// reconcileClaims is Reconcile in SandboxClaims mode.
func (e *Executor) reconcileClaims(ctx context.Context, live []Agent, agents map[string]Agent) (Reconciled, error) {
	claims, err := e.listClaims(ctx, e.homeSelector())
	if err != nil {
		return Reconciled{}, err
	}
	pods, err := e.listHome(ctx)
	if err != nil {
		return Reconciled{}, err
	}
	podList := podValues(pods)
	var (
		r        Reconciled
		doomed   []*sandboxClaim
		creating []Agent
		kept     = map[string]*sandboxClaim{} // by agent
	)
	// The newest first, so that an agent's newest claim is the one kept.
	sort.SliceStable(claims, func(i, j int) bool { return claims[j].CreationTimestamp.Before(&claims[i].CreationTimestamp) })
	for i := range claims {
		c := &claims[i]
		if c.DeletionTimestamp != nil {
			continue // going: neither kept nor to delete
		}
		a, ok := agents[c.Labels[LabelAgent]]
		switch {
		case !ok, c.Labels[LabelIncarnation] != a.Incarnation, c.Labels[LabelHome] != e.opts.Home, kept[a.ID] != nil:
			doomed = append(doomed, c) // orphan, stale, or one too many
			continue
		}
		if p := podNamed(podList, c.podName()); p != nil {
			if st := Classify(p, a.Incarnation); st.Replace() || st.State == StateDeleting {
				doomed = append(doomed, c)
				continue
			}
		}
		kept[a.ID] = c
		r.Kept = append(r.Kept, c.Name)
	}
	var strays []*corev1.Pod // pods no kept claim names
	for _, p := range pods {
		if c := kept[p.Labels[LabelAgent]]; (c == nil || c.podName() != p.Name) && p.DeletionTimestamp == nil &&
			!slices.ContainsFunc(doomed, func(d *sandboxClaim) bool { return d.podName() == p.Name }) {
			strays = append(strays, p)
		}
	}
	for _, a := range live {
		if a.Busy && kept[a.ID] == nil {
			creating = append(creating, a)
		}
	}
	var t tally
	note := t.note
	e.parallel(len(doomed), func(i int) {
		note(&r.Deleted, doomed[i].Name, e.dropClaim(ctx, doomed[i], podList))
	})
	e.parallel(len(strays), func(i int) {
		note(&r.Deleted, strays[i].Name, e.deletePod(ctx, strays[i], 0))
	})
	e.parallel(len(creating), func(i int) {
		a := creating[i]
		var err error
		if e.opts.Workspace == nil {
			err = e.ensureClaim(ctx, a.ID)
		}
		var name string
		if err == nil {
			name, err = e.createClaim(ctx, a)
		}
		if err != nil {
			note(nil, "", fmt.Errorf("agent %s: %w", a.ID, err))
			return
		}
		note(&r.Created, name, nil)
	})
	sort.Strings(r.Deleted)
	sort.Strings(r.Created)
	sort.Strings(r.Kept)
	return r, t.err()
}

// tally gathers what parallel work of a reconcile did, and its errors.
type tally struct {
	mu   sync.Mutex
	errs []error
}

// note adds name to list, or err to the errors.
func (t *tally) note(list *[]string, name string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.errs = append(t.errs, err)
		return
	}
	*list = append(*list, name)
}

// err is the errors noted, joined.
func (t *tally) err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return errors.Join(t.errs...)
}
