package k8s

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/substrat/substrat/executor"
	"github.com/substrat/substrat/executor/executortest"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/internal/k8stest"
)

// TestRealKubelet runs the executor's pods on the node with a real
// kubelet and containerd that scripts/k8s-control-plane.sh starts when it
// can (k8stest.Kubelet; skipped otherwise), with an image built there from
// this machine's binaries (no registry is reached). The pods run on the
// host's network, so no CNI is needed. What kwok cannot show is checked
// here: the command runs in the container, as the pod's user, under its
// memory limit, on a read-only root with a writable workspace; the
// conformance suite passes; a command whose pod is fenced dies, and its
// Wait says so.
func TestRealKubelet(t *testing.T) {
	e := kubeletExec(t)
	ctx := ctxT(t)
	a := Agent{ID: "a", Incarnation: "1", Limits: fsstore.Limits{MemoryBytes: 64 << 20, CPUWeight: 100}}
	t0 := time.Now()
	pod := running(t, e, a)
	t.Logf("Ensure to Running on a real kubelet: %v", time.Since(t0).Round(time.Millisecond))

	run := func(script string) (string, error) {
		var out bytes.Buffer
		p, err := e.Start(ctx, &executor.Cmd{Agent: "a", Incarnation: "1", Argv: []string{"/bin/sh", "-c", script},
			Env: []string{"PATH=/usr/bin:/bin"}, Stdout: &out, Stderr: &out})
		if err != nil {
			return "", err
		}
		err = p.Wait()
		return out.String(), err
	}
	out, err := run(`id -u; cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max; ` +
		`if (: > /rootfile) 2>/dev/null; then echo root-writable; else echo root-read-only; fi; ` +
		`echo w > /workspace/f && cat /workspace/f; pwd`)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("in the container: %q", out)
	if want := "65532\n67108864\nroot-read-only\nw\n/workspace\n"; out != want {
		t.Errorf("in the container: %q, want %q", out, want)
	}

	executortest.Run(t, e, func(t *testing.T, cmd ...string) *executor.Cmd {
		return &executor.Cmd{Argv: cmd}
	})

	// Fenced while a command runs: the kubelet kills it with its pod.
	outR, outW := io.Pipe()
	p, err := e.Start(ctx, &executor.Cmd{Agent: "a", Incarnation: "1",
		Argv: []string{"/bin/sh", "-c", `echo started; sleep 1000`}, Stdout: outW})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if _, err := io.ReadFull(outR, buf); err != nil || string(buf) != "started\n" {
		t.Fatalf("said %q, %v", buf, err)
	}
	go io.Copy(io.Discard, outR)
	if _, err := e.Fence(ctx, "a", "2"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a fenced command's Wait returned nil")
		}
	case <-ctx.Done():
		t.Fatal("a fenced command still runs")
	}
	gone(t, e, pod.Name)
	if _, err := e.Start(ctx, &executor.Cmd{Agent: "a", Incarnation: "1", Argv: []string{"true"}}); !errors.Is(err, ErrNoPod) {
		t.Errorf("Start of the fenced incarnation: %v", err)
	}
}

// kubeletExec is an executor whose pods run on the node with a real
// kubelet, in the host's network, from the agent image (or skips t).
func kubeletExec(t *testing.T) *Executor {
	t.Helper()
	node, image := k8stest.Kubelet(t)
	return newExec(t, Options{Image: image, Workspace: emptyDir, Customize: func(p *corev1.Pod) {
		p.Spec.NodeName = node
		p.Spec.HostNetwork = true
		p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	}})
}

// containerSh runs script in the container of a's pod, in /workspace,
// and returns what it printed; a failure fails t.
func containerSh(t *testing.T, e *Executor, a Agent, script string) string {
	t.Helper()
	var out bytes.Buffer
	p, err := e.Start(ctxT(t), &executor.Cmd{Agent: a.ID, Incarnation: a.Incarnation, Dir: "/workspace",
		Env: []string{"PATH=/usr/bin:/bin"}, Stdout: &out, Stderr: &out, Argv: []string{"/bin/sh", "-c", script}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("%s: %v: %s", script, err, out.String())
	}
	return out.String()
}
