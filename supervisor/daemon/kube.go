package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/executor"
	"github.com/substrat/substrat/executor/k8s"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor"
)

// kubes run the provider processes of agents whose executor is
// k8s://CONTEXT/NAMESPACE in pods (package executor/k8s), one executor
// per target, with the daemon's incarnation (the remotes'). The pod is
// the sandbox: there is no bwrap in it, and the agent's limits are its
// resources.
//
// At the daemon's start (reconcile), every target that live agents of
// the store use is reconciled with them: their pods of no live agent, of
// a stale incarnation (every pod a previous daemon left), failed or
// evicted are deleted; busy agents get one. The store wins. A target
// that cannot be reached is logged, and the daemon goes on. Turns on a
// target wait for its reconcile.
//
// A turn's process there (k8sStart): the agent's pods of other
// incarnations are deleted (Fence), its pod of this one made if missing
// (Ensure, with the limits in force) and waited for; the workspace root
// and what it binds besides (a git workspace's clone, read-only links:
// kube_trees.go) are copied into the pod's workspace (PushTrees: a
// mirror, no .git but the clone's), the process runs there through an
// exec (Start), and when it has ended, however it ended, the pod's
// workspace comes back into the root, and the clone's git directory into
// its own, under the SSH executor's hostile rules (PullTrees) before
// Wait returns. A pod that goes while the process runs fails the turn
// (k8s.ErrPodGone: cut short, retried as any failed turn); what the
// process wrote there is salvaged by the agent's next turn, before its
// push, as after a daemon killed mid-turn: the files newer there than
// here, nothing deleted (SalvageTrees; the new pod mounts the same
// claim, which outlives pods; a workspace volume that does not outlive
// its pod has nothing left to salvage). A turn whose copy came back in
// full leaves a record of that on this machine (run/k8s/AGENT.synced,
// with the volume's identity: kube_synced.go), removed before the next
// process starts there (a push that fails writes only what is here);
// the next turn, even after a daemon's restart, salvages only
// without a record of its pod's volume, so what the user deleted here
// since a clean turn does not come back from the volume. Turns of a
// workspace's agents on Kubernetes take its root one at a time (each pod
// has a workspace of its own, and the copy back is a mirror). A change made here to the
// root during such a turn is replaced when the copy comes back if the
// pod changed the same entry, or the copy back is a full one (the copy
// back after a push brings only what changed there: k8s's
// increment_pull.go).
//
// A CLI provider's own HOME and MCP config go into the volume too, and
// its tool socket is relayed into the pod over an exec (kube_cli.go).
//
// A workspace without network runs only where the daemon is told that
// the cluster enforces NetworkPolicies (k8s.NetworkPolicyEnv): its pods
// are isolated by one (k8s.Agent.Isolated), made before them; elsewhere,
// and in the host's network, it is refused (k8sIsolation).
//
// Not there yet: a read-write link, a read-only link outside
// /workspace: refused. Limits changed while the pod runs apply to its
// next pod.
type kubes struct {
	log *slog.Logger
	// incarnation is the daemon's (remotes.incarnation).
	incarnation string
	home        string // the store's home directory

	mu         sync.Mutex // guards the fields below
	byTarget   map[string]*k8s.Executor
	roots      map[string]chan struct{} // a workspace root's token (a buffered channel of 1)
	plans      map[string]kubePlan      // by agent: readied by its sandbox hook, for its start hook (kube_cli.go)
	reconciled chan struct{}            // closed when the start's reconcile is done; nil before it starts
}

// Environment of the daemon that configures its Kubernetes executors
// (the kubeconfig is $KUBECONFIG's, else ~/.kube/config).
const (
	// K8sImageEnv names the agents' container image
	// (k8s.DefaultImage when unset).
	K8sImageEnv = "SUBSTRAT_K8S_AGENT_IMAGE"
	// K8sMountPathEnv is where the workspace is mounted in the pods
	// (k8s.DefaultMountPath when unset). On kwok, whose exec runs the
	// command on its own machine, the tests set a directory there.
	K8sMountPathEnv = "SUBSTRAT_K8S_MOUNT_PATH"
	// K8sPodSpecEnv is JSON of the fields of a pod spec that say where
	// the pods run, set on each: nodeName, nodeSelector, affinity,
	// tolerations, priorityClassName, runtimeClassName, imagePullSecrets,
	// hostNetwork. No other field is taken.
	K8sPodSpecEnv = "SUBSTRAT_K8S_POD_SPEC"
)

// podPlacement is what K8sPodSpecEnv may set.
type podPlacement struct {
	NodeName          string                        `json:"nodeName,omitempty"`
	NodeSelector      map[string]string             `json:"nodeSelector,omitempty"`
	Affinity          *corev1.Affinity              `json:"affinity,omitempty"`
	Tolerations       []corev1.Toleration           `json:"tolerations,omitempty"`
	PriorityClassName string                        `json:"priorityClassName,omitempty"`
	RuntimeClassName  *string                       `json:"runtimeClassName,omitempty"`
	ImagePullSecrets  []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	HostNetwork       bool                          `json:"hostNetwork,omitempty"`
}

// placement returns the Customize of K8sPodSpecEnv's value v (nil for
// "").
func placement(v string) (func(*corev1.Pod), error) {
	if v == "" {
		return nil, nil
	}
	pl, err := parsePlacement(v)
	if err != nil {
		return nil, err
	}
	return func(p *corev1.Pod) {
		s := &p.Spec
		s.NodeName, s.NodeSelector, s.Affinity, s.Tolerations = pl.NodeName, pl.NodeSelector, pl.Affinity, pl.Tolerations
		s.PriorityClassName, s.ImagePullSecrets, s.HostNetwork = pl.PriorityClassName, pl.ImagePullSecrets, pl.HostNetwork
		if pl.RuntimeClassName != nil {
			s.RuntimeClassName = pl.RuntimeClassName
		}
	}, nil
}

// k8sIsolation says, as an error, whether agent sess may run on target
// with its workspace's network: one without runs only where the
// cluster's network plugin enforces the NetworkPolicy that isolates it
// (k8s.NetworkPolicyEnv), and not in the host's network, which no such
// policy reaches.
func k8sIsolation(sess *fsstore.Session, target string, network bool) error {
	switch {
	case network:
		return nil
	case !k8s.NetworkPoliciesEnforced():
		return fmt.Errorf("%s runs on %s, and its workspace %s has no network: its pod would be isolated by a NetworkPolicy, "+
			"which only the cluster's network plugin can enforce; if it does, set %s=enforced for the daemon, else use a workspace created with --network",
			sess.Name, target, sess.Workspace, k8s.NetworkPolicyEnv)
	case hostNetwork(os.Getenv(K8sPodSpecEnv)):
		return fmt.Errorf("%s runs on %s, and its workspace %s has no network, but %s puts its pod in the host's network, which no NetworkPolicy isolates",
			sess.Name, target, sess.Workspace, K8sPodSpecEnv)
	}
	return nil
}

// parsePlacement parses K8sPodSpecEnv's value v: one JSON object of
// podPlacement's fields, nothing after it.
func parsePlacement(v string) (podPlacement, error) {
	var pl podPlacement
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pl); err != nil {
		return pl, fmt.Errorf("$%s: %w", K8sPodSpecEnv, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return pl, fmt.Errorf("$%s: more than one JSON object", K8sPodSpecEnv)
	}
	return pl, nil
}

// hostNetwork reports whether the pod placement v sets hostNetwork (or
// may: one that does not parse, as placement takes it).
func hostNetwork(v string) bool {
	if v == "" {
		return false
	}
	pl, err := parsePlacement(v)
	return err != nil || pl.HostNetwork
}

// k8sPodTimeout bounds the wait for an agent's pod to run.
const k8sPodTimeout = 5 * time.Minute

func newKubes(log *slog.Logger, incarnation, home string) *kubes {
	return &kubes{log: log, incarnation: incarnation, home: home,
		byTarget: map[string]*k8s.Executor{}, roots: map[string]chan struct{}{}, plans: map[string]kubePlan{}}
}

// executor returns the executor of target, made on first use.
func (k *kubes) executor(target string) (*k8s.Executor, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if e := k.byTarget[target]; e != nil {
		return e, nil
	}
	t, err := k8s.Parse(target)
	if err != nil {
		return nil, err
	}
	id, err := fsstore.HomeID(k.home)
	if err != nil {
		return nil, err
	}
	if id == "" {
		return nil, fmt.Errorf("the home %s has no id yet", k.home)
	}
	custom, err := placement(os.Getenv(K8sPodSpecEnv))
	if err != nil {
		return nil, err
	}
	e, err := k8s.New(t, k8s.Options{Home: id, Image: os.Getenv(K8sImageEnv), MountPath: os.Getenv(K8sMountPathEnv), Customize: custom,
		NetworkPolicies: k8s.NetworkPoliciesEnforced()})
	if err != nil {
		return nil, err
	}
	k.byTarget[target] = e
	return e, nil
}

// reconcile reconciles, in the background, every target that live agents
// of core use with them; turns on them wait for it.
func (k *kubes) reconcile(core *supervisor.Core) {
	done := make(chan struct{})
	k.mu.Lock()
	k.reconciled = done
	k.mu.Unlock()
	// All of it in the background: the start does not list the tree for
	// it (most homes have no agent on Kubernetes).
	go func() {
		defer close(done)
		byTarget := map[string][]k8s.Agent{}
		for _, a := range core.List() {
			target := fsstore.ExecutorKubernetes(a.Executor)
			if target == "" || a.AgentState == fsstore.AgentTerminated {
				continue
			}
			res, err := core.Inspect(a.ID)
			if err != nil {
				k.log.Warn("k8s reconcile: an agent was not looked at", "agent", a.ID, "err", err)
				continue
			}
			spec, err := core.AgentSpec(&fsstore.Session{ID: a.ID, Name: a.Name, Workspace: a.Workspace})
			byTarget[target] = append(byTarget[target], k8s.Agent{ID: a.ID, Incarnation: k.incarnation,
				Busy: a.AgentState == fsstore.AgentBusy || res.Pending > 0, Limits: res.LimitsInForce,
				// Unreadable: isolated, if it can be, until its turn says.
				Isolated: (err != nil || !spec.Network) && k8s.NetworkPoliciesEnforced()})
		}
		var wg sync.WaitGroup
		for target, agents := range byTarget {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k.reconcileTarget(target, agents)
			}()
		}
		wg.Wait()
	}()
}

// reconcileTarget reconciles target with agents, and logs what it did.
func (k *kubes) reconcileTarget(target string, agents []k8s.Agent) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	e, err := k.executor(target)
	if err != nil {
		k.log.Warn("k8s reconcile: the target cannot be used", "target", target, "agents", len(agents), "err", err)
		return
	}
	r, err := e.Reconcile(ctx, agents)
	lvl := slog.LevelInfo
	if err != nil {
		lvl = slog.LevelWarn
	}
	k.log.Log(ctx, lvl, "k8s reconcile", "target", target, "agents", len(agents), "deleted", r.Deleted, "created", r.Created,
		"kept", r.Kept, "ms", time.Since(t0).Milliseconds(), "err", err)
}

// waitReconciled waits for the start's reconcile.
func (k *kubes) waitReconciled(ctx context.Context) error {
	k.mu.Lock()
	done := k.reconciled
	k.mu.Unlock()
	return waitClosed(ctx, done)
}

// waitClosed waits until done is closed (nil: at once) or ctx ends.
func waitClosed(ctx context.Context, done <-chan struct{}) error {
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// inUse says, as an error, whether a process in a pod holds pl's
// workspace root now: its copy comes back over the root when it ends.
func (k *kubes) inUse(pl supervisor.Workplace) error {
	if pl.Sandbox == nil {
		return nil
	}
	k.mu.Lock()
	tok := k.roots[pl.Sandbox.Root.Host]
	k.mu.Unlock()
	if len(tok) > 0 {
		return fmt.Errorf("your workspace is in use in a pod by a process that runs there now, and its copy will come back over what is here: " +
			"try again when it has ended")
	}
	return nil
}

// take takes the token of the workspace root root, until release.
func (k *kubes) take(ctx context.Context, root string) (release func(), err error) {
	k.mu.Lock()
	tok := k.roots[root]
	if tok == nil {
		tok = make(chan struct{}, 1)
		k.roots[root] = tok
	}
	k.mu.Unlock()
	select {
	case tok <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-tok }) }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// forget deletes agent's pods on every target in use (it runs nothing
// more); its workspace claim stays. Nothing waits for it.
func (k *kubes) forget(agent string) {
	if err := k.setSynced(agent, ""); err != nil {
		k.log.Warn("an agent's record of its volume in sync was not removed", "agent", agent, "err", err)
	}
	k.mu.Lock()
	all := make([]*k8s.Executor, 0, len(k.byTarget))
	for _, e := range k.byTarget {
		all = append(all, e)
	}
	k.mu.Unlock()
	for _, e := range all {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := e.Delete(ctx, agent); err != nil {
				k.log.Warn("an agent's pods were not deleted", "agent", agent, "target", e.Target().String(), "err", err)
			}
		}()
	}
}

// k8sSandbox is the Sandbox hook of an agent on target: the process as
// it runs in the pod, in the workspace's mount, with no bwrap (the pod
// is the sandbox).
func (h *host) k8sSandbox(sess *fsstore.Session, target string) provider.SandboxFunc {
	return func(ctx context.Context, p provider.Process, needs provider.SandboxNeeds) (provider.Process, error) {
		spec, err := h.core.AgentSpec(sess)
		if err != nil {
			return provider.Process{}, err
		}
		// A work tool's shell keeps its state in the pod, whose /tmp is
		// its own: not the home's directory, which the pod has not.
		shellState := h.store.Layout().ShellState(sess.ID)
		if len(needs.ReadWrite) == 1 && needs.ReadWrite[0] == shellState {
			needs.ReadWrite = nil
			p.Env = append(slices.DeleteFunc(slices.Clone(p.Env), func(kv string) bool {
				return strings.HasPrefix(kv, bwrap.ShellStateEnv+"=")
			}), bwrap.ShellStateEnv+"=/tmp/substrat-shell-"+sess.ID)
		}
		if err := k8sIsolation(sess, target, spec.Network); err != nil {
			return provider.Process{}, err
		}
		e, err := h.kubes.executor(target)
		if err != nil {
			return provider.Process{}, err
		}
		if _, err := h.k8sTrees(sess, target, e.MountPath()); err != nil {
			return provider.Process{}, err // early, with what to do
		}
		out, plan, err := h.k8sOwn(sess, target, e.MountPath(), p, needs)
		if err != nil {
			return provider.Process{}, err
		}
		h.kubes.setPlan(sess.ID, plan)
		return out, nil
	}
}

// k8sStart is the Start hook of an agent on target: see kubes.
func (h *host) k8sStart(sess *fsstore.Session, l fsstore.Limits, target string) provider.StartFunc {
	return func(ctx context.Context, p provider.Process, stdio provider.Stdio) (provider.Running, error) {
		if sess.Workspace == "" {
			return nil, fmt.Errorf("%s runs on %s, which needs a workspace (substrat agent create --workspace)", sess.Name, target)
		}
		e, err := h.kubes.executor(target)
		if err != nil {
			return nil, err
		}
		if err := h.kubes.waitReconciled(ctx); err != nil {
			return nil, err
		}
		plan := h.kubes.takePlan(sess.ID)
		spec, err := h.core.AgentSpec(sess)
		if err != nil {
			return nil, err
		}
		if err := k8sIsolation(sess, target, spec.Network); err != nil {
			return nil, err
		}
		trees, err := h.k8sTrees(sess, target, e.MountPath())
		if err != nil {
			return nil, err
		}
		trees = append(trees, plan.own...)
		local := trees[0].Local
		release, err := h.kubes.take(ctx, local)
		if err != nil {
			return nil, err
		}
		// The caller closes its files once the hook returns; the
		// exec's streams are copied after, from copies of their own.
		var files []*os.File
		for _, w := range []*io.Writer{&stdio.Stdout, &stdio.Stderr} {
			if f, ok := (*w).(*os.File); ok {
				fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
				if err != nil {
					closeAll(files)
					release()
					return nil, err
				}
				dup := os.NewFile(uintptr(fd), f.Name())
				files = append(files, dup)
				*w = dup
			}
		}
		inc := h.kubes.incarnation
		var kr *kubeRelay
		var vol string // the pod's workspace volume (kube_synced.go)
		run, err := func() (executor.Process, error) {
			if fenced, err := e.Fence(ctx, sess.ID, inc); err != nil {
				return nil, err
			} else if len(fenced) > 0 {
				h.log.Warn("deleted pods of an earlier incarnation", "agent", sess.ID, "target", target, "pods", fenced)
			}
			if _, err := e.Ensure(ctx, k8s.Agent{ID: sess.ID, Incarnation: inc, Busy: true, Limits: l, Isolated: !spec.Network}); err != nil {
				return nil, err
			}
			wctx, cancel := context.WithTimeout(ctx, k8sPodTimeout)
			defer cancel()
			pod, err := e.WaitRunning(wctx, sess.ID, inc)
			if err != nil {
				return nil, fmt.Errorf("the pod of %s on %s: %w", sess.Name, target, err)
			}
			vol = h.kubes.volumeID(ctx, e, pod)
			if err := h.k8sCopyIn(ctx, e, sess, inc, vol, trees); err != nil {
				return nil, err
			}
			if plan.sock != "" {
				if kr, err = h.k8sRelay(ctx, e, sess, inc, plan.sock); err != nil {
					return nil, err
				}
			}
			// Until the pull: the process may write the volume. A push
			// that failed wrote only what is here, and leaves it.
			if err := h.kubes.setSynced(sess.ID, ""); err != nil {
				return nil, fmt.Errorf("the record of %s's volume in sync: %w", sess.Name, err)
			}
			return e.Start(ctx, &executor.Cmd{Agent: sess.ID, Incarnation: inc,
				Argv: append([]string{p.Path}, p.Args[1:]...), Env: p.Env, Dir: p.Dir,
				Stdin: stdio.Stdin, Stdout: stdio.Stdout, Stderr: stdio.Stderr})
		}()
		if err != nil {
			kr.stop(h, sess.ID)
			closeAll(files)
			release()
			return nil, err
		}
		go func() {
			// The streams end with the exec's (Wait may be called more
			// than once on it).
			run.Wait()
			closeAll(files)
		}()
		return &kubeProcess{Process: run, e: e, k: h.kubes, h: h, relay: kr, agent: sess.ID, incarnation: inc, vol: vol, trees: trees, release: release}, nil
	}
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// kubeProcess is a process in a pod whose Wait brings the pod's
// workspace back.
type kubeProcess struct {
	executor.Process
	e                  *k8s.Executor
	k                  *kubes
	h                  *host
	relay              *kubeRelay // of its tool socket, or nil
	agent, incarnation string
	vol                string     // the pod's workspace volume (kube_synced.go)
	trees              []k8s.Tree // what went into the pod (k8sTrees)
	release            func()
}

// Wait waits for the process, then copies the pod's workspace back
// (unless the pod went); a workspace that does not come back fails a
// process that succeeded with provider.ErrNotBack.
func (p *kubeProcess) Wait() error {
	defer p.release()
	err := p.Process.Wait()
	p.relay.stop(p.h, p.agent)
	target := p.e.Target().String()
	if errors.Is(err, k8s.ErrPodGone) {
		return fmt.Errorf("%w (on %s: the turn was cut short)", err, target)
	}
	ctx, cancel := context.WithTimeout(context.Background(), pullTimeout)
	defer cancel()
	// What the process left running there (out of its group, by
	// setsid) would change the copy, or stall it.
	if rerr := p.e.Reap(ctx, p.agent, p.incarnation); rerr != nil {
		p.h.log.Warn("what an agent's process left in its pod was not killed", "agent", p.agent, "target", target, "err", rerr)
	}
	perr := p.e.PullTrees(ctx, p.agent, p.incarnation, p.trees, "")
	if perr == nil && p.vol != "" {
		if err := p.k.setSynced(p.agent, p.vol); err != nil {
			p.h.log.Warn("an agent's volume in sync was not recorded: its next turn salvages", "agent", p.agent, "err", err)
		}
	}
	if perr != nil {
		p.h.log.Warn("an agent's files did not come back from its pod", "agent", p.agent, "target", target, "err", perr)
		if err == nil {
			err = fmt.Errorf("%w: from %s: %w", provider.ErrNotBack, target, perr)
		}
	}
	return err
}
