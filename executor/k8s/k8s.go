package k8s

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/dynamic"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	networkingclient "k8s.io/client-go/kubernetes/typed/networking/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Errors. Test for them with errors.Is.
var (
	// ErrID: an agent id, incarnation or home id that cannot be a label
	// value (a plain token of at most 63 bytes).
	ErrID = errors.New("k8s executor: invalid id")
	// ErrNoPod: no pod of the command's agent and incarnation. Either
	// Ensure has not made it yet, or the incarnation is stale: a newer
	// daemon fenced it, deleting its pod.
	ErrNoPod = errors.New("k8s executor: no pod for this agent's incarnation")
	// ErrNotReady: the pod is there but cannot run a command (Pending,
	// failed, evicted, being deleted); see its Status.
	ErrNotReady = errors.New("k8s executor: pod not ready")
)

// Labels and annotations of the executor's objects.
const (
	LabelManagedBy   = "app.kubernetes.io/managed-by"
	ManagedBy        = "substrat"
	LabelAgent       = "substrat.dev/agent"
	LabelIncarnation = "substrat.dev/incarnation"
	LabelHome        = "substrat.dev/home"
)

// Defaults of Options.
const (
	DefaultImage     = "substrat-agent:latest"
	DefaultMountPath = "/workspace"
	DefaultQPS       = 100
	DefaultBurst     = 200
	DefaultWorkers   = 16
)

// DefaultWorkspaceSize is the size asked of a workspace's claim.
var DefaultWorkspaceSize = resource.MustParse("1Gi")

// Options configure an Executor.
type Options struct {
	// Kubeconfig is the kubeconfig file; "" is $KUBECONFIG, else
	// ~/.kube/config, as kubectl reads them.
	Kubeconfig string
	// Home is the id of the daemon's home (fsstore.HomeID). Every object
	// carries it, and Reconcile looks at no other home's pods: two homes
	// may share a namespace.
	Home string
	// Image is the agent's container image: it must have /bin/sh,
	// setsid (util-linux), GNU head, mkfifo, mktemp, and what the agent's
	// argv runs (its provider's CLI). DefaultImage when empty.
	Image string
	// RuntimeClass is the pod's runtimeClassName (gVisor, Kata), if any.
	RuntimeClass string
	// MountPath is where the workspace is mounted in the container
	// (DefaultMountPath when empty).
	MountPath string
	// Workspace returns the volume of an agent's workspace. nil is a
	// PersistentVolumeClaim per agent, substrat-ws-AGENT, that Ensure
	// makes (StorageClass, WorkspaceSize) and nothing here deletes: the
	// workspace outlives the agent's pods.
	Workspace func(agent string) corev1.VolumeSource
	// StorageClass is the class of the default claim; "" is the
	// cluster's default class.
	StorageClass string
	// WorkspaceSize is the size of the default claim
	// (DefaultWorkspaceSize when zero).
	WorkspaceSize resource.Quantity
	// Customize, if set, adjusts each pod the executor makes, after it
	// has filled it in (a node selector, tolerations, a priority class,
	// a pull secret). It must keep the name, labels and container name.
	Customize func(*corev1.Pod)
	// QPS and Burst bound the client's requests (DefaultQPS and
	// DefaultBurst when zero); Workers bounds Reconcile's concurrent
	// requests (DefaultWorkers).
	QPS     float32
	Burst   int
	Workers int
	// SandboxClaims is on, off or auto: whether the agents' pods are
	// made through SandboxClaims of agent-sandbox (see claims.go) rather
	// than directly. Auto (the default) makes claims where the API server
	// serves their kinds. "" is $SUBSTRAT_K8S_SANDBOX_CLAIMS, else auto.
	SandboxClaims string
	// NetworkPolicies: the cluster's network plugin enforces
	// NetworkPolicies (the daemon's NetworkPolicyEnv), so an isolated
	// agent (Agent.Isolated) can run, behind one the executor makes.
	// Without it, an isolated agent's Ensure fails, and the executor
	// reads no NetworkPolicy.
	NetworkPolicies bool
}

// Executor runs agents' processes in pods of one namespace: one pod per
// live agent session and incarnation (see the package doc).
type Executor struct {
	target Target
	opts   Options
	rest   *rest.Config
	// Only the typed clients of the groups used: the whole clientset
	// would add another 11 MB to the daemon's binary.
	core  corev1client.CoreV1Interface
	authz authzclient.AuthorizationV1Interface
	net   networkingclient.NetworkingV1Interface
	dyn   dynamic.Interface

	// mode is auto's finding (SandboxClaims), once made.
	mode *modeState
	// held is, by agent, what its pods' workspace holds of read-only
	// trees since a push (trees.go: keepable).
	held *sync.Map
	// pushed is, by agent, what its pod holds since its last push
	// (*pushed, increment.go).
	pushed *sync.Map
}

type modeState struct {
	mu sync.Mutex
	on *bool
}

// tokenRE: what may be a label value here (agent ids, incarnations,
// home ids).
var tokenRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$`)

// New returns an executor for t, with the kubeconfig's context t.Context.
// It connects to nothing yet.
func New(t Target, opts Options) (*Executor, error) {
	if _, err := Parse(t.String()); err != nil {
		return nil, err
	}
	if !tokenRE.MatchString(opts.Home) {
		return nil, fmt.Errorf("%w: home %q", ErrID, opts.Home)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if opts.Kubeconfig != "" {
		rules.ExplicitPath = opts.Kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: t.Context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("k8s executor %s: %w", t, err)
	}
	return newFromConfig(t, cfg, opts)
}

func newFromConfig(t Target, cfg *rest.Config, opts Options) (*Executor, error) {
	if opts.Image == "" {
		opts.Image = DefaultImage
	}
	if opts.MountPath == "" {
		opts.MountPath = DefaultMountPath
	}
	if opts.WorkspaceSize.IsZero() {
		opts.WorkspaceSize = DefaultWorkspaceSize
	}
	if opts.QPS <= 0 {
		opts.QPS = DefaultQPS
	}
	if opts.Burst <= 0 {
		opts.Burst = DefaultBurst
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	mode, err := claimsMode(opts.SandboxClaims)
	if err != nil {
		return nil, err
	}
	opts.SandboxClaims = mode
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = opts.QPS, opts.Burst
	cfg.UserAgent = "substrat"
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("k8s executor %s: %w", t, err)
	}
	authz, err := authzclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("k8s executor %s: %w", t, err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("k8s executor %s: %w", t, err)
	}
	net, err := networkingclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("k8s executor %s: %w", t, err)
	}
	return &Executor{target: t, opts: opts, rest: cfg, core: core, authz: authz, net: net, dyn: dyn, mode: &modeState{}, held: &sync.Map{}, pushed: &sync.Map{}}, nil
}

// Target is where the executor runs pods.
func (e *Executor) Target() Target { return e.target }

// Check tells whether the executor can run agents: the API server is
// reachable with the context's credentials, and they may create, list,
// delete pods and exec into them in the namespace (and in SandboxClaims
// mode make and delete claims, templates and pools, and delete
// Sandboxes; where NetworkPolicies are enforced, make, read, update and
// delete them). It returns nil when they can, or an error that says what
// is missing.
func (e *Executor) Check(ctx context.Context) error {
	if _, err := e.ServerVersion(ctx); err != nil {
		return fmt.Errorf("%s is not reachable: %w", e.target, err)
	}
	attrs := []authzv1.ResourceAttributes{
		{Verb: "create", Resource: "pods"},
		{Verb: "list", Resource: "pods"},
		{Verb: "delete", Resource: "pods"},
		{Verb: "create", Resource: "pods", Subresource: "exec"},
		{Verb: "create", Resource: "persistentvolumeclaims"},
	}
	on, err := e.SandboxClaims(ctx)
	if err != nil {
		return err
	}
	if on {
		for _, r := range []schema.GroupVersionResource{claimsGVR, templatesGVR, poolsGVR, sandboxesGVR} {
			for _, v := range []string{"create", "get", "list", "delete"} {
				if r != sandboxesGVR || v == "get" || v == "delete" {
					attrs = append(attrs, authzv1.ResourceAttributes{Verb: v, Group: r.Group, Resource: r.Resource})
				}
			}
		}
	}
	if e.opts.NetworkPolicies {
		for _, v := range []string{"create", "get", "update", "delete"} {
			attrs = append(attrs, authzv1.ResourceAttributes{Verb: v, Group: "networking.k8s.io", Resource: "networkpolicies"})
		}
	}
	var missing []string
	for _, a := range attrs {
		a.Namespace = e.target.Namespace
		r, err := e.authz.SelfSubjectAccessReviews().Create(ctx,
			&authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &a}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("%s: cannot review access: %w", e.target, err)
		}
		if !r.Status.Allowed {
			what := a.Verb + " " + a.Resource
			if a.Group != "" {
				what += "." + a.Group
			}
			if a.Subresource != "" {
				what += "/" + a.Subresource
			}
			missing = append(missing, what)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: the context may not %s in namespace %s", e.target, strings.Join(missing, ", "), e.target.Namespace)
	}
	return nil
}

// Mode says how the executor makes pods, for what doctor shows: through
// SandboxClaims or directly, and the setting (on, off or auto) that
// chose it.
func (e *Executor) Mode(ctx context.Context) (string, error) {
	on, err := e.SandboxClaims(ctx)
	if err != nil {
		return "", err
	}
	how := "pods made by the daemon"
	if on {
		how = "SandboxClaims (agent-sandbox makes the pods)"
	}
	np := "agents without network refused (" + NetworkPolicyEnv + " is not enforced)"
	if e.opts.NetworkPolicies {
		np = "agents without network isolated by NetworkPolicies (" + NetworkPolicyEnv + "=enforced)"
	}
	return how + ", " + SandboxClaimsEnv + "=" + e.opts.SandboxClaims + "; " + np, nil
}

// ServerVersion is the API server's version, for what doctor shows.
func (e *Executor) ServerVersion(ctx context.Context) (string, error) {
	var v version.Info
	body, err := e.core.RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "", fmt.Errorf("the API server's version: %w", err)
	}
	return v.GitVersion, nil
}
