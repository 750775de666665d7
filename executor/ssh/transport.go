package ssh

import (
	"io"

	"github.com/substrat/substrat/executor"
)

// The transport, for another executor whose channel is a remote
// command's three streams (executor/k8s: an exec into a pod): the same
// wrapper on the far side, and the same framing of the request and the
// input on the near side.

// WrapperArgv returns the argv that runs the wrapper under /bin/sh on
// the far side, with the marker, the agent, the incarnation and the
// process id as its arguments, in a session of its own (setsid) so that
// its watchdog's kill of its process group kills nothing but the
// command: an exec does not make its process a group leader as sshd
// does. The caller validates the ids (see ValidID).
func WrapperArgv(agent, incarnation, id string) []string {
	return []string{"setsid", "-w", "/bin/sh", "-c", wrapper, Marker, agent, incarnation, id}
}

// Feed writes c's request (argv, environment, directory), then c.Stdin
// as input frames, then the end of input into w, as Start does over
// ssh. It leaves w open: the end of the channel, not of the input, is
// what makes the far side kill the command (close w when Wait returns).
func Feed(w io.Writer, c *executor.Cmd) { feed(w, request(c), c.Stdin) }

// ValidID reports whether s may be an agent id or an incarnation for
// the wrapper (a plain token of at most 64 bytes).
func ValidID(s string) bool { return idRE.MatchString(s) }
