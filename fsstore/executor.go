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

// ValidateExecutor checks an executor: "" (this machine) or ssh://HOST,
// where HOST is an ssh destination that does not start with '-' and has
// no spaces, controls or shell characters.
func ValidateExecutor(e string) error {
	if e == "" {
		return nil
	}
	host, ok := strings.CutPrefix(e, ExecutorSSH)
	if !ok {
		return invalidf("executor %q is not ssh://HOST (or empty, for this machine)", e)
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

// ExecutorHost returns the ssh destination of an ssh://HOST executor, or
// "" for any other.
func ExecutorHost(e string) string {
	host, ok := strings.CutPrefix(e, ExecutorSSH)
	if !ok {
		return ""
	}
	return host
}
