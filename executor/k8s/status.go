package k8s

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// State is what the daemon makes of an agent's pod.
type State string

// States, and what the daemon does in each.
const (
	// StateMissing: no pod. Ensure makes one (Reconcile, at start, for
	// the busy agents only: an idle agent's pod is made by its next
	// turn).
	StateMissing State = "missing"
	// StatePending: the pod waits to be scheduled, for its volume, or
	// for its container to start. A turn waits (WaitRunning).
	StatePending State = "pending"
	// StateRunning: its container runs: a turn execs into it.
	StateRunning State = "running"
	// StateFailed: the pod failed, or its container ended (phase Failed
	// or Succeeded). Ensure replaces it; the turn that ran in it failed
	// and is retried as after a crash.
	StateFailed State = "failed"
	// StateEvicted: the node evicted the pod (memory or disk pressure,
	// preemption, a drain's disruption). Ensure replaces it, as a
	// failed one, and the daemon shows the reason.
	StateEvicted State = "evicted"
	// StateBroken: the container cannot start and retrying as it is
	// will not cure it (an image that cannot be pulled, a bad config,
	// a crash loop). The daemon fails the turn with the reason and does
	// not replace the pod: that would only do the same again.
	StateBroken State = "broken"
	// StateDeleting: the pod is being deleted. Ensure waits for it to
	// go, then makes a new one.
	StateDeleting State = "deleting"
	// StateStale: the pod is of another incarnation: a daemon that died
	// left it. It is fenced: deleted, and refused any command.
	StateStale State = "stale"
)

// Status is the state of an agent's pod, with what the daemon shows.
type Status struct {
	State State
	// Reason and Message are the cluster's words for it (the pod's or
	// its container's reason, the scheduler's message), if any.
	Reason, Message string
	// Node is the node the pod is bound to, if any; Incarnation the
	// incarnation its labels carry.
	Node, Incarnation string
}

// String is what the daemon shows: "pending: Unschedulable: 0/3 nodes
// are available...".
func (s Status) String() string {
	b := string(s.State)
	if s.Reason != "" {
		b += ": " + s.Reason
	}
	if s.Message != "" {
		b += ": " + strings.Join(strings.Fields(s.Message), " ")
	}
	return b
}

// Replace reports whether Ensure replaces a pod in this state (failed,
// evicted, stale).
func (s Status) Replace() bool {
	return s.State == StateFailed || s.State == StateEvicted || s.State == StateStale
}

// brokenReasons are the waiting reasons of a container that waiting or
// a new pod does not cure.
var brokenReasons = map[string]bool{
	"CrashLoopBackOff":           true,
	"ImagePullBackOff":           true,
	"ErrImagePull":               true,
	"ErrImageNeverPull":          true,
	"InvalidImageName":           true,
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
	"RunContainerError":          true,
}

// Classify maps a pod of the current incarnation incarnation onto a
// State.
func Classify(p *corev1.Pod, incarnation string) Status {
	s := Status{Node: p.Spec.NodeName, Incarnation: p.Labels[LabelIncarnation]}
	if s.Incarnation != incarnation {
		s.State, s.Reason = StateStale, "incarnation "+s.Incarnation+" is not "+incarnation
		return s
	}
	if p.DeletionTimestamp != nil {
		s.State = StateDeleting
		return s
	}
	cs := containerStatus(p)
	switch p.Status.Phase {
	case corev1.PodFailed:
		s.State, s.Reason, s.Message = StateFailed, p.Status.Reason, p.Status.Message
		if p.Status.Reason == "Evicted" || p.Status.Reason == "Preempting" || condition(p, corev1.DisruptionTarget) == corev1.ConditionTrue {
			s.State = StateEvicted
			if s.Reason == "" {
				s.Reason, s.Message = conditionReason(p, corev1.DisruptionTarget)
			}
		}
		if s.Reason == "" && cs != nil && cs.State.Terminated != nil {
			s.Reason, s.Message = cs.State.Terminated.Reason, cs.State.Terminated.Message
		}
		return s
	case corev1.PodSucceeded:
		s.State, s.Reason = StateFailed, "Completed"
		return s
	case corev1.PodUnknown:
		s.State, s.Reason, s.Message = StatePending, "Unknown", "the pod's node does not report"
		return s
	}
	if cs != nil && cs.State.Waiting != nil && brokenReasons[cs.State.Waiting.Reason] {
		s.State, s.Reason, s.Message = StateBroken, cs.State.Waiting.Reason, cs.State.Waiting.Message
		return s
	}
	if p.Status.Phase == corev1.PodRunning && cs != nil && cs.State.Running != nil {
		s.State = StateRunning
		return s
	}
	s.State = StatePending
	switch {
	case condition(p, corev1.PodScheduled) == corev1.ConditionFalse:
		s.Reason, s.Message = conditionReason(p, corev1.PodScheduled)
	case cs != nil && cs.State.Waiting != nil:
		s.Reason, s.Message = cs.State.Waiting.Reason, cs.State.Waiting.Message
	case cs != nil && cs.State.Terminated != nil:
		s.Reason, s.Message = cs.State.Terminated.Reason, cs.State.Terminated.Message
	case p.Spec.NodeName == "":
		s.Reason = "Unscheduled"
	}
	return s
}

func containerStatus(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == Container {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func condition(p *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func conditionReason(p *corev1.Pod, t corev1.PodConditionType) (string, string) {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Reason, c.Message
		}
	}
	return "", ""
}
