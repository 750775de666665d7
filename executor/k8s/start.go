package k8s

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/substrat/substrat/executor"
	"github.com/substrat/substrat/executor/ssh"
)

// Start runs c in the pod of c.Agent's incarnation c.Incarnation,
// through an exec into its container. The pod must exist and run
// (Ensure, WaitRunning): Start makes none. No pod of that incarnation is
// ErrNoPod (a stale incarnation's was deleted by the fence of the
// current one); one that does not run is ErrNotReady. Start refuses to
// run in a pod whose labels do not carry c's agent and incarnation.
//
// The exec runs the SSH executor's wrapper (ssh.WrapperArgv), and the
// request (argv, environment, directory) then the input travel framed on
// the exec's standard input (ssh.Feed), as they do over ssh: no argument
// is parsed by a shell, and no secret of the environment shows in the
// exec's command line. The wrapper carries the agent and incarnation in
// its arguments. The end of the exec's stream (Kill, ctx, the daemon's
// death, a lost connection) ends the wrapper's input and it kills its
// process group; the pod's deletion kills everything in it.
//
// Wait returns the remote exit status as an *executor.ExitError. Pid is
// 0: no local process stands for the command.
func (e *Executor) Start(ctx context.Context, c *executor.Cmd) (executor.Process, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if len(c.ExtraFiles) > 0 {
		return nil, fmt.Errorf("%w: descriptors cannot be passed into a pod (mount volumes instead)", executor.ErrInvalid)
	}
	if err := e.checkIDs(c.Agent, c.Incarnation); err != nil {
		return nil, err
	}
	if !ssh.ValidID(c.Agent) || !ssh.ValidID(c.Incarnation) {
		return nil, fmt.Errorf("%w: agent %q, incarnation %q", ErrID, c.Agent, c.Incarnation)
	}
	pod, err := e.find(ctx, c.Agent, c.Incarnation)
	if err != nil {
		return nil, err
	}
	if pod == nil {
		return nil, fmt.Errorf("%w: agent %s, incarnation %s", ErrNoPod, c.Agent, c.Incarnation)
	}
	name := pod.Name
	if st := Classify(pod, c.Incarnation); st.State != StateRunning {
		return nil, fmt.Errorf("%w: pod %s: %s", ErrNotReady, name, st)
	}
	b := make([]byte, 8)
	rand.Read(b)
	id := hex.EncodeToString(b)
	ex, err := e.executor(name, ssh.WrapperArgv(c.Agent, c.Incarnation, id))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	p := &process{cancel: cancel, done: make(chan struct{})}
	killer, err := e.executor(name, []string{"/bin/sh", "-c", killScript, "substrat-kill", ssh.Marker, c.Agent, c.Incarnation, id})
	if err != nil {
		cancel()
		return nil, err
	}
	stdout, stderr := c.Stdout, c.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	if same(stdout, stderr) {
		// The streams are copied at once: one writer for both is
		// written by one at a time, as exec.Cmd does.
		w := &lockedWriter{w: stdout}
		stdout, stderr = w, w
	}
	go ssh.Feed(pw, c)
	go func() {
		defer close(p.done)
		err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: pr, Stdout: stdout, Stderr: stderr})
		// The channel is gone: the feed's writes fail from now on, and
		// the client's copying of the input ends quietly.
		pw.CloseWithError(io.EOF)
		if ctx.Err() != nil {
			// Killed (Kill, or ctx): the end of the stream should end
			// the wrapper's input, and so the command; but not every
			// exec server closes a command's input when its client goes
			// (kwok keeps it open while the command's output is open).
			// So the wrapper's process group is killed by another exec.
			kctx, kcancel := context.WithTimeout(context.Background(), killTimeout)
			kerr := killer.StreamWithContext(kctx, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
			kcancel()
			if kerr != nil && !apierrors.IsNotFound(kerr) {
				err = errors.Join(err, fmt.Errorf("killing the command in pod %s: %w", name, kerr))
			}
		}
		if err == nil {
			// A command killed with its container (the pod deleted, the
			// container restarted) ends its stream as one that exited
			// with 0 does: a clean end counts only if the container
			// still runs as it did.
			err = e.stillRunning(pod)
			if errors.Is(err, errDeleted) {
				// Its claim's Sandbox makes it again under the same
				// name: a new claim will do instead.
				e.dropClaimOf(pod)
			}
		}
		cancel()
		p.err = exitStatus(err)
	}()
	return p, nil
}

// killScript kills the process group of the wrapper whose arguments are
// $1 to $4 (marker, agent, incarnation, process id): /proc shows a
// command line NUL-separated, the wrapper's being /bin/sh, -c, the
// script (one line), then those four. Only a process that leads its
// group is taken (setsid made the wrapper one).
const killScript = `m=$1; a=$2; i=$3; id=$4;` +
	` for f in $(grep -l -a -s -F "$id" /proc/[0-9]*/cmdline); do` +
	` p=${f#/proc/}; p=${p%/cmdline};` +
	` ok=$(tr '\0' '\n' <"$f" 2>/dev/null | { read -r _; read -r _; read -r _; read -r m2; read -r a2; read -r i2; read -r id2;` +
	` [ "$m2" = "$m" ] && [ "$a2" = "$a" ] && [ "$i2" = "$i" ] && [ "$id2" = "$id" ] && echo y; });` +
	` [ "$ok" = y ] || continue;` +
	` s=$(cat "/proc/$p/stat" 2>/dev/null) || continue; s=${s##*) }; set -- $s;` +
	` [ "$3" = "$p" ] || continue;` +
	` kill -9 "-$p" 2>/dev/null;` +
	` done; exit 0`

// killTimeout bounds the exec that kills a killed command's group.
const killTimeout = 30 * time.Second

// ErrPodGone: the command's pod was deleted, or its container
// restarted, while the command ran: it was killed.
var ErrPodGone = errors.New("k8s executor: the pod went while the command ran")

// errDeleted: the pod of an ErrPodGone was deleted (not restarted).
var errDeleted = errors.New("deleted")

// stillRunning checks that was's container still runs, as it did when a
// command started in it.
func (e *Executor) stillRunning(was *corev1.Pod) error {
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	now, err := e.core.Pods(was.Namespace).Get(ctx, was.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: pod %s %w", ErrPodGone, was.Name, errDeleted)
	case err != nil:
		return fmt.Errorf("%w: pod %s: %v", ErrPodGone, was.Name, err)
	case now.UID != was.UID || now.DeletionTimestamp != nil:
		return fmt.Errorf("%w: pod %s %w", ErrPodGone, was.Name, errDeleted)
	}
	a, b := containerStatus(was), containerStatus(now)
	if a != nil && (b == nil || b.RestartCount != a.RestartCount || b.State.Running == nil) {
		return fmt.Errorf("%w: pod %s: its container restarted or ended", ErrPodGone, was.Name)
	}
	return nil
}

// executor returns a remote command executor of argv in pod: over
// WebSocket, falling back to SPDY when the server takes no WebSocket,
// as kubectl does.
func (e *Executor) executor(pod string, argv []string) (remotecommand.Executor, error) {
	req := e.core.RESTClient().Post().Resource("pods").Namespace(e.target.Namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: Container, Command: argv, Stdin: true, Stdout: true, Stderr: true,
		}, scheme.ParameterCodec)
	spdy, err := remotecommand.NewSPDYExecutor(e.rest, "POST", req.URL())
	if err != nil {
		return nil, err
	}
	ws, err := remotecommand.NewWebSocketExecutor(e.rest, "GET", req.URL().String())
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// exitRE: how an exec server that loses the status's type (kwok's)
// still says it.
var exitRE = regexp.MustCompile(`exit status (\d+)$`)

// exitStatus turns the stream's error into Process.Wait's.
func exitStatus(err error) error {
	if err == nil {
		return nil
	}
	var ce utilexec.ExitError
	if errors.As(err, &ce) && ce.Exited() {
		return &executor.ExitError{Code: ce.ExitStatus()}
	}
	if m := exitRE.FindStringSubmatch(err.Error()); m != nil {
		if n, perr := strconv.Atoi(m[1]); perr == nil {
			return &executor.ExitError{Code: n}
		}
	}
	return err
}

// same reports whether a and b are the same writer (false when they
// cannot be compared).
func same(a, b io.Writer) (eq bool) {
	defer func() {
		if recover() != nil {
			eq = false
		}
	}()
	return a == b
}

// lockedWriter serializes the writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

type process struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	once   sync.Once
}

func (p *process) Pid() int { return 0 }

func (p *process) Wait() error {
	<-p.done
	return p.err
}

// Kill ends the exec's stream, which ends the wrapper's input, and it
// kills its process group; and, since not every exec server ends a
// command's input when its client goes, another exec kills that group
// (see Start). Wait returns when it has.
func (p *process) Kill() error {
	p.once.Do(p.cancel)
	return nil
}
