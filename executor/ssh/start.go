package ssh

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/substrat/substrat/executor"
)

// Marker is $0 of every remote wrapper: with the agent, the incarnation
// and the process's own id after it, it is how Fence finds them.
const Marker = "substrat-exec"

// wrapper is the shell program that runs a command on the host (see the
// package doc). Its arguments are the agent, the incarnation and the
// process id; the request (argv, environment, working directory) and
// then the command's standard input come on its standard input, framed:
//
//	a<n>\n<n bytes>  an argument     e<n>\n<n bytes>  NAME=value
//	A<arg>\n  E<NAME=value>\n  C<dir>\n    the same, without a newline
//	c<n>\n<n bytes>  the directory   s\n              start
//	d<n>\n<n bytes>  input           x\n              end of input
//
// Its standard output and error are the command's. It is one line, as
// syntax.Quote quotes only a newline-free word for a POSIX shell (csh,
// for one, takes no newline in quotes).
var wrapper = strings.Join([]string{
	`umask 077;`,
	`exec 3<&0 </dev/null;`,
	`ne=0; h=; set --;`,
	`while IFS= read -r h <&3; do case $h in`,
	` A*) set -- "$@" "${h#A}";;`,
	` C*) cd "${h#C}" || exit 125;;`,
	` E*) ne=$((ne+1)); v=${h#E}; eval "e$ne=\${v}";;`,
	` a[0-9]*) v=$(head -c "${h#a}" <&3; echo .); set -- "$@" "${v%.}";;`,
	` e[0-9]*) ne=$((ne+1)); v=$(head -c "${h#e}" <&3; echo .); eval "e$ne=\${v%.}";;`,
	` c[0-9]*) v=$(head -c "${h#c}" <&3; echo .); cd "${v%.}" || exit 125;;`,
	` *) break;;`,
	`esac; done;`,
	`if [ "$h" != s ] || [ $# = 0 ]; then echo "substrat-exec: bad request" >&2; exit 125; fi;`,
	`t=$(mktemp -d) && mkfifo "$t/in" || exit 125;`,
	// The command, with its environment and nothing else's, reading
	// the input relayed through the FIFO.
	`( exec 3<&-; i=1; while [ "$i" -le "$ne" ]; do eval "export \"\$e$i\""; i=$((i+1)); done; exec "$@" ) <"$t/in" &`,
	`p=$!;`,
	// The relay and watchdog: input until x, then wait for the end of
	// the channel; the channel's end, whenever it comes, kills the
	// whole process group (sshd made this shell its leader), bwrap
	// included, and bwrap's death (--die-with-parent) its sandbox.
	`( exec 4>"$t/in"; while IFS= read -r h; do case $h in`,
	` d[0-9]*) head -c "${h#d}" >&4 || break;;`,
	` x) exec 4>&-; break;;`,
	` *) break;;`,
	`esac; done;`,
	`while IFS= read -r h; do :; done; rm -rf "$t"; kill -KILL 0 ) <&3 >/dev/null 2>&1 &`,
	`w=$!;`,
	`wait "$p"; s=$?;`,
	`kill -KILL "$w" 2>/dev/null; rm -rf "$t"; exit "$s"`,
}, " ")

// Start runs c on the host, in the login of the ssh destination: c.Argv
// is run as it is (the daemon gives a bwrap command line whose paths are
// the host's, see Place), with c.Env as its whole environment. The
// request travels on the connection, not on a command line, so that
// secrets in the environment do not show in the host's process list,
// and no argument is ever parsed by a shell.
//
// The process dies with its connection: Kill (or ctx) kills the local
// ssh client, and the end of its channel kills the remote process group.
// Wait returns the remote exit status as an *executor.ExitError; 255 is
// also what ssh returns when the connection fails.
func (e *Executor) Start(ctx context.Context, c *executor.Cmd) (executor.Process, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if len(c.ExtraFiles) > 0 {
		return nil, fmt.Errorf("%w: descriptors cannot be passed to %s (bind paths of the host instead)", executor.ErrInvalid, e.host)
	}
	if !idRE.MatchString(c.Agent) || !idRE.MatchString(c.Incarnation) {
		return nil, fmt.Errorf("%w: agent %q, incarnation %q", ErrID, c.Agent, c.Incarnation)
	}
	id := make([]byte, 8)
	rand.Read(id)
	line, err := shellLine(wrapper, Marker, c.Agent, c.Incarnation, hex.EncodeToString(id))
	if err != nil {
		return nil, err
	}
	m, err := e.acquire(ctx)
	if err != nil {
		return nil, err
	}
	p, err := e.start(ctx, m, line, c)
	if err != nil {
		e.release(m)
	}
	return p, err
}

// start runs the wrapper's command line through m for Start.
func (e *Executor) start(ctx context.Context, m *master, line string, c *executor.Cmd) (*process, error) {
	cmd := e.client(ctx, m, line)
	cmd.Stdout, cmd.Stderr = c.Stdout, &watcher{w: c.Stderr, e: e, m: m}
	cmd.WaitDelay = executor.WaitDelay
	// The client leads a process group of its own (the daemon's table
	// of processes reaps by group), and dies with the daemon, which
	// ends its channel and so the remote process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go feed(stdin, request(c), c.Stdin)
	return &process{cmd: cmd, release: func() { e.release(m) }}, nil
}

// request encodes c's argv, environment and directory, then start.
func request(c *executor.Cmd) []byte {
	var b []byte
	frame := func(kind byte, s string) {
		// A line when it can be one: the shell reads it with no
		// process of its own (head -c is one per frame).
		if !strings.ContainsRune(s, '\n') {
			b = append(b, kind-'a'+'A')
			b = append(b, s...)
			b = append(b, '\n')
			return
		}
		b = append(b, kind)
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, '\n')
		b = append(b, s...)
	}
	for _, a := range c.Argv {
		frame('a', a)
	}
	for _, kv := range c.Env {
		frame('e', kv)
	}
	if c.Dir != "" {
		frame('c', c.Dir)
	}
	return append(b, "s\n"...)
}

// feed writes the request, then in into w as input frames, then the end
// of input. It leaves w open: its closing (when Wait has seen the ssh
// client end, or the daemon dies) is what tells the host that the
// connection is gone. A read of in that never returns keeps feed
// blocked, as exec.Cmd's copying would.
func feed(w io.Writer, req []byte, in io.Reader) {
	bw := bufio.NewWriter(w)
	bw.Write(req)
	if in != nil {
		buf := make([]byte, 32<<10)
		for {
			if err := bw.Flush(); err != nil {
				return
			}
			n, err := in.Read(buf)
			if n > 0 {
				fmt.Fprintf(bw, "d%d\n", n)
				bw.Write(buf[:n])
			}
			if err != nil {
				break
			}
		}
	}
	bw.WriteString("x\n")
	bw.Flush()
}

// process is a started process; its session is released when Wait has
// seen its ssh client end.
type process struct {
	cmd     *exec.Cmd
	release func()
	once    sync.Once
}

func (p *process) Pid() int { return p.cmd.Process.Pid }

func (p *process) Wait() error {
	err := p.cmd.Wait()
	p.once.Do(p.release)
	return executor.ExitStatus(err)
}

func (p *process) Kill() error {
	err := p.cmd.Process.Kill()
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}
