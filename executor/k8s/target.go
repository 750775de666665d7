package k8s

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Scheme is the prefix of a Kubernetes executor: k8s://CONTEXT/NAMESPACE.
const Scheme = "k8s://"

// ErrTarget: an executor string that is not k8s://CONTEXT/NAMESPACE.
var ErrTarget = errors.New("k8s executor: invalid target")

// Target is where an agent's pods run: a context of the kubeconfig and
// a namespace of its cluster.
type Target struct {
	Context, Namespace string
}

// String is the executor string, k8s://CONTEXT/NAMESPACE.
func (t Target) String() string { return Scheme + t.Context + "/" + t.Namespace }

// contextRE: what a kubeconfig context's name may look like here: the
// names kubeconfigs are seen to use (kind-x, gke_p_z_c, an EKS ARN with
// '/' and ':', user@cluster), and never a shell word or an option.
var contextRE = regexp.MustCompile(`^[A-Za-z0-9_.@:/-]+$`)

// namespaceRE: a namespace is a DNS-1123 label.
var namespaceRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Parse parses k8s://CONTEXT/NAMESPACE. CONTEXT is the name of a context
// in the kubeconfig (it may hold '/', as an EKS ARN does: the namespace
// is what follows the last '/'); NAMESPACE is a DNS-1123 label.
func Parse(s string) (Target, error) {
	rest, ok := strings.CutPrefix(s, Scheme)
	if !ok {
		return Target{}, fmt.Errorf("%w: %q is not k8s://CONTEXT/NAMESPACE", ErrTarget, s)
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return Target{}, fmt.Errorf("%w: %q names no namespace (k8s://CONTEXT/NAMESPACE)", ErrTarget, s)
	}
	t := Target{Context: rest[:i], Namespace: rest[i+1:]}
	switch {
	case t.Context == "":
		return Target{}, fmt.Errorf("%w: %q names no context (k8s://CONTEXT/NAMESPACE)", ErrTarget, s)
	case len(t.Context) > 253:
		return Target{}, fmt.Errorf("%w: a context is longer than 253 bytes", ErrTarget)
	case strings.HasPrefix(t.Context, "-"):
		return Target{}, fmt.Errorf("%w: %q: a context cannot start with '-'", ErrTarget, s)
	case !contextRE.MatchString(t.Context):
		return Target{}, fmt.Errorf("%w: %q: a context is letters, digits and . _ - @ : / only", ErrTarget, s)
	case !namespaceRE.MatchString(t.Namespace):
		return Target{}, fmt.Errorf("%w: %q: a namespace is lower-case letters, digits and '-', at most 63", ErrTarget, s)
	}
	return t, nil
}
