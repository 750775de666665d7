package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/substrat/substrat/executor"
	"github.com/substrat/substrat/executor/k8s"
	"github.com/substrat/substrat/executor/relay"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
)

// A provider's own files and its tool socket in a pod.
//
// A CLI provider needs, besides the workspace, its own HOME (read-write:
// its sessions live there), a file or two of the home read-only (claude's
// mcp.json), the CLI's program and package, the substrat binary (its MCP
// server), and the agent's tool socket. In a pod:
//
//   - the files of the home go into the pod's workspace volume as trees
//     (k8s.Tree) under k8s.OwnDir, at their place relative to the home:
//     the HOME read-write (it comes back under the hostile rules, as the
//     workspace does), the others read-only; the copies of the workspace
//     root leave OwnDir out whole, both ways, and a git workspace's clone
//     ignores it there (info/exclude, in the pod's copy only). A
//     read-write path of the store's agents/ is refused, as on an ssh
//     executor: what comes back is the agent's, never the store's;
//   - the process's arguments and environment name them there: the
//     home's path is replaced by the place of its copy (the config files
//     the CLI reads name no path of the home: their MCP server is given
//     the pod's socket, below);
//   - the program, its package and the substrat binary are expected at
//     the same paths in the pod's image, as on an ssh executor's host;
//   - the tool socket: its path for the provider (host.ToolSocket) is
//     podToolSocket, in the pod's own /tmp, where `substrat tool-relay`
//     (executor/relay), started through an exec before the process,
//     listens; each connection made there is carried over that exec's
//     stream to the agent's socket here, which the relay dials. So the
//     MCP server in the pod reaches that one agent's tools, as it does in
//     a local sandbox. The relay ends with the process, before its files
//     come back.

// podToolSocket is where, in an agent's pod, its MCP server finds its
// tool socket (the pod's /tmp is its own).
func podToolSocket(agent string) string { return "/tmp/substrat-tool-" + agent + ".sock" }

// kubePlan is what an agent's sandbox hook readied for its start hook.
type kubePlan struct {
	own  []k8s.Tree // the provider's files, after the workspace's trees
	sock string     // the pod's tool socket to relay ("" for none)
}

// setPlan records agent's plan for its next start.
func (k *kubes) setPlan(agent string, p kubePlan) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.plans[agent] = p
}

// takePlan returns and forgets agent's plan (none: the zero plan).
func (k *kubes) takePlan(agent string) kubePlan {
	k.mu.Lock()
	defer k.mu.Unlock()
	p := k.plans[agent]
	delete(k.plans, agent)
	return p
}

// k8sOwn returns process p of sess as it runs in a pod whose workspace is
// at mount, with the paths of the home it names replaced by their
// copies' there, and the plan of its start: the trees of needs' paths of
// the home, and its tool socket.
func (h *host) k8sOwn(sess *fsstore.Session, target, mount string, p provider.Process, needs provider.SandboxNeeds) (provider.Process, kubePlan, error) {
	home := h.store.Layout().Home
	var plan kubePlan
	if needs.ToolSocket {
		plan.sock = podToolSocket(sess.ID)
	}
	add := func(local string, rw bool) error {
		local = filepath.Clean(local)
		rel, ok := strings.CutPrefix(local, home+"/")
		switch {
		case !ok && rw:
			return fmt.Errorf("%s runs on %s, and provider %s needs %s read-write, outside the Substrat home: not in a pod",
				sess.Name, target, sess.Provider, local)
		case !ok:
			return nil // the program, its package: in the pod's image
		case rw && strings.HasPrefix(local, h.store.Layout().AgentsDir()+"/"):
			return fmt.Errorf("%s runs on %s, and its provider would write %s of the store there", sess.Name, target, local)
		}
		if rw {
			if fi, err := os.Lstat(local); err != nil || !fi.IsDir() {
				return fmt.Errorf("%s runs on %s, and it needs %s read-write there: only a directory can be", sess.Name, target, local)
			}
		}
		t := k8s.Tree{Rel: path.Join(k8s.OwnDir, filepath.ToSlash(rel)), Local: local, RW: rw}
		if !slices.ContainsFunc(plan.own, func(u k8s.Tree) bool { return u.Rel == t.Rel }) {
			plan.own = append(plan.own, t)
		}
		return nil
	}
	for _, rw := range needs.ReadWrite {
		if err := add(rw, true); err != nil {
			return provider.Process{}, kubePlan{}, err
		}
	}
	for _, ro := range needs.ReadOnly {
		if err := add(ro, false); err != nil {
			return provider.Process{}, kubePlan{}, err
		}
	}
	r := strings.NewReplacer(home+"/", path.Join(mount, k8s.OwnDir)+"/")
	out := provider.Process{Path: p.Path, Args: append([]string{p.Path}, p.Args[1:]...), Dir: mount}
	for i := 1; i < len(out.Args); i++ {
		out.Args[i] = r.Replace(out.Args[i])
	}
	for _, kv := range p.Env {
		out.Env = append(out.Env, r.Replace(kv))
	}
	return out, plan, nil
}

// relayTimeout bounds the wait for a pod's relay to listen.
const relayTimeout = time.Minute

// kubeRelay is a running tool-socket relay into a pod.
type kubeRelay struct {
	r    *relay.Relay
	proc executor.Process
	out  *limitedBuffer // its stderr
}

// k8sRelay starts the relay of sess's tool socket into its pod, at sock
// there: `substrat tool-relay` (this binary, at its path here) through an
// exec of incarnation inc, whose stream carries the connections.
func (h *host) k8sRelay(ctx context.Context, e *k8s.Executor, sess *fsstore.Session, inc, sock string) (*kubeRelay, error) {
	local, err := h.toolSocket(sess.ID)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	stderr := &limitedBuffer{n: 4096}
	proc, err := e.Start(ctx, &executor.Cmd{Agent: sess.ID, Incarnation: inc,
		Argv: []string{exe, "tool-relay", "--listen", sock}, Stdin: inR, Stdout: outW, Stderr: stderr})
	if err != nil {
		return nil, fmt.Errorf("the tool socket's relay into the pod of %s: %w", sess.Name, err)
	}
	go func() {
		proc.Wait()
		outW.Close()
		inR.Close()
	}()
	stream := relay.Stream{Reader: outR, Writer: inW, Closers: []io.Closer{inW, outR}}
	timer := time.AfterFunc(relayTimeout, func() { stream.Close() })
	r, err := relay.Start(stream, func() (net.Conn, error) { return net.Dial("unix", local) })
	timer.Stop()
	if err != nil {
		stream.Close()
		proc.Kill()
		proc.Wait()
		return nil, fmt.Errorf("the tool socket's relay into the pod of %s: %w: %s", sess.Name, err, stderr.String())
	}
	return &kubeRelay{r: r, proc: proc, out: stderr}, nil
}

// stop ends the relay (the pod's end sees its input end and exits, else
// it is killed), and logs how it ended if it broke before.
func (kr *kubeRelay) stop(h *host, agent string) {
	if kr == nil {
		return
	}
	err := kr.r.Close()
	done := make(chan struct{})
	go func() {
		kr.proc.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		kr.proc.Kill()
		<-done
	}
	if err != nil {
		h.log.Warn("an agent's tool relay broke", "agent", agent, "err", err, "stderr", kr.out.String())
	}
}

// limitedBuffer keeps the first n bytes written to it.
type limitedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	n  int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.TrimSpace(l.b.String())
}
