package fsstore

import (
	"regexp"
	"strings"
)

// EvExecutor changes where an agent's processes run. Data: ExecutorChange.
const EvExecutor = "executor"

// ExecutorChange is the data of an executor event: the agent's executor
// from then on ("" local).
type ExecutorChange struct {
	Executor string `json:"executor"`
	Reason   string `json:"reason,omitempty"`
}

func (ExecutorChange) EventType() string { return EvExecutor }

func (d ExecutorChange) applyTo(n *Session) error {
	if err := ValidateExecutor(d.Executor); err != nil {
		return err
	}
	n.Executor = d.Executor
	return nil
}

// ExecutorSSH is the scheme of an executor that runs an agent's
// processes on another host over ssh: "ssh://HOST".
const ExecutorSSH = "ssh://"

// executorHostRE is what an ssh destination may look like (as package
// executor/ssh takes it): a name from the ssh_config, user@host, an IPv6
// address in brackets. Never an option, never a shell word.
var executorHostRE = regexp.MustCompile(`^[A-Za-z0-9_.@:\[\]%-]+$`)

// ExecutorK8s is the scheme of an executor that runs an agent's
// processes in a Kubernetes pod: "k8s://CONTEXT/NAMESPACE", CONTEXT a
// context of the kubeconfig (package executor/k8s).
const ExecutorK8s = "k8s://"

// k8sContextRE and k8sNamespaceRE are what executor/k8s.Parse takes: a
// context as kubeconfigs name them (an EKS ARN has '/' and ':'), never an
// option or a shell word; a namespace is a DNS-1123 label.
var (
	k8sContextRE   = regexp.MustCompile(`^[A-Za-z0-9_.@:/-]+$`)
	k8sNamespaceRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

// ValidateExecutor checks an executor: "" (this machine), ssh://HOST,
// where HOST is an ssh destination that does not start with '-' and has
// no spaces, controls or shell characters, or k8s://CONTEXT/NAMESPACE.
func ValidateExecutor(e string) error {
	if e == "" {
		return nil
	}
	if rest, ok := strings.CutPrefix(e, ExecutorK8s); ok {
		return validateK8s(e, rest)
	}
	host, ok := strings.CutPrefix(e, ExecutorSSH)
	if !ok {
		return invalidf("executor %q is not ssh://HOST (or empty, for this machine), nor k8s://CONTEXT/NAMESPACE", e)
	}
	switch {
	case host == "":
		return invalidf("executor %q names no host", e)
	case len(host) > 255:
		return invalidf("executor's host is longer than 255 bytes")
	case strings.HasPrefix(host, "-"):
		return invalidf("executor %q: a host cannot start with '-'", e)
	case !executorHostRE.MatchString(host):
		return invalidf("executor %q: a host is letters, digits and . _ - @ : [ ] %% only", e)
	}
	return nil
}

// validateK8s checks k8s://CONTEXT/NAMESPACE (rest is what follows the
// scheme): the namespace is what follows the last '/'.
func validateK8s(e, rest string) error {
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return invalidf("executor %q names no namespace (k8s://CONTEXT/NAMESPACE)", e)
	}
	ctx, ns := rest[:i], rest[i+1:]
	switch {
	case ctx == "":
		return invalidf("executor %q names no context (k8s://CONTEXT/NAMESPACE)", e)
	case len(ctx) > 253:
		return invalidf("executor's context is longer than 253 bytes")
	case strings.HasPrefix(ctx, "-"):
		return invalidf("executor %q: a context cannot start with '-'", e)
	case !k8sContextRE.MatchString(ctx):
		return invalidf("executor %q: a context is letters, digits and . _ - @ : / only", e)
	case !k8sNamespaceRE.MatchString(ns):
		return invalidf("executor %q: a namespace is lower-case letters, digits and '-' (at most 63)", e)
	}
	return nil
}

// ExecutorKubernetes returns the k8s://CONTEXT/NAMESPACE of an executor
// that is one, or "".
func ExecutorKubernetes(e string) string {
	if strings.HasPrefix(e, ExecutorK8s) {
		return e
	}
	return ""
}

// ExecutorHost returns the ssh destination of an ssh://HOST executor, or
// "" for any other.
func ExecutorHost(e string) string {
	host, ok := strings.CutPrefix(e, ExecutorSSH)
	if !ok {
		return ""
	}
	return host
}
