// Package k8stest gives tests a real Kubernetes control plane on
// loopback: scripts/k8s-control-plane.sh builds it once per machine from
// the Go module proxy (into its cache, $SUBSTRAT_K8S_CACHE) and starts
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
// (fake nodes: pods are scheduled and go Running with no container, and
// kwok serves an exec into any pod by running the command on this
// machine). One control plane per test binary, started by the first test
// that asks (Kubeconfig) and stopped by Main.
//
// Environment:
//
//	SUBSTRAT_K8S_KUBECONFIG  use this running cluster (its current
//	                         context) instead, and start nothing
//	SUBSTRAT_K8S_REQUIRE=1   a control plane that cannot start fails the
//	                         test instead of skipping it (make test sets
//	                         it, after building the binaries)
//	SUBSTRAT_K8S_SANDBOX_CLAIMS  set to off when unset: the plane has
//	                         agent-sandbox's CRDs and controller, and the
//	                         tests that do not pin a mode use pods
package k8stest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Context is the name of the context of the kubeconfig the script
// writes.
const Context = "substrat-test"

var cluster struct {
	once       sync.Once
	kubeconfig string
	runDir     string
	script     string
	watchdog   *os.Process // stops the plane if this process dies first
	skip       string      // why the tests are skipped
	started    time.Duration
}

// Main runs the tests, then stops the control plane if one was started.
// Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop stops the control plane if one was started: for a TestMain that
// cannot call Main (testscript.Main runs the tests itself; give it a
// Run that calls Stop after m.Run).
func Stop() {
	if cluster.watchdog != nil {
		cluster.watchdog.Kill()
		cluster.watchdog.Wait()
		cluster.watchdog = nil
	}
	if cluster.runDir != "" {
		// Through bash by name, its output through a pipe of its own:
		// at the end of cmd/substrat's tests (testscript.Main), the
		// script run by its #! line exited 1 before its first command,
		// and left the control plane running.
		out, err := exec.Command("bash", cluster.script, "stop", cluster.runDir).CombinedOutput()
		os.Stderr.Write(out)
		if err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
		cluster.runDir = ""
	}
}

// Kubeconfig returns the path of a kubeconfig for the control plane,
// whose current context is Context, starting it the first time. It
// skips t when no control plane can be started (no Go module proxy to
// build it from, say), or fails it with SUBSTRAT_K8S_REQUIRE=1.
func Kubeconfig(t testing.TB) string {
	t.Helper()
	cluster.once.Do(start)
	if cluster.skip != "" {
		if os.Getenv("SUBSTRAT_K8S_REQUIRE") == "1" {
			t.Fatal(cluster.skip)
		}
		t.Skip(cluster.skip)
	}
	return cluster.kubeconfig
}

// Kubelet returns the node with a real kubelet and container runtime
// that the script started along (see scripts/k8s-control-plane.sh,
// SUBSTRAT_K8S_KUBELET), and the image that is there for its pods; or
// skips t, saying why there is none. $SUBSTRAT_K8S_KUBELET_NODE and
// $SUBSTRAT_K8S_IMAGE name them in a cluster that is given.
func Kubelet(t testing.TB) (node, image string) {
	t.Helper()
	Kubeconfig(t)
	node, image = os.Getenv("SUBSTRAT_K8S_KUBELET_NODE"), os.Getenv("SUBSTRAT_K8S_IMAGE")
	if node != "" && image != "" {
		return node, image
	}
	if cluster.runDir == "" {
		t.Skip("no node with a real kubelet: set SUBSTRAT_K8S_KUBELET_NODE and SUBSTRAT_K8S_IMAGE")
	}
	n, err1 := os.ReadFile(filepath.Join(cluster.runDir, "kubelet-node"))
	i, err2 := os.ReadFile(filepath.Join(cluster.runDir, "kubelet-image"))
	if err1 != nil || err2 != nil {
		t.Skip("no node with a real kubelet: the control plane started none (it needs root, containerd and runc; its log says why)")
	}
	return strings.TrimSpace(string(n)), strings.TrimSpace(string(i))
}

// Image makes one more image on the real kubelet's node (Kubelet): the
// agent image with files besides, at their paths, with their libraries
// (scripts/k8s-control-plane.sh image), and returns its reference; or
// skips t, saying why there is none.
func Image(t testing.TB, tag string, files ...string) string {
	t.Helper()
	Kubelet(t)
	if cluster.runDir == "" {
		t.Skip("no image can be made in a cluster that is given")
	}
	out, err := exec.Command("bash", append([]string{cluster.script, "image", cluster.runDir, tag}, files...)...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("making the image %s: %v\n%s", tag, err, stderr)
	}
	return strings.TrimSpace(string(out))
}

// Started is how long the control plane took to start (0 when it was
// given).
func Started() time.Duration { return cluster.started }

// Script is the path of scripts/k8s-control-plane.sh, found above the
// working directory (a package of the module).
func Script() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		s := filepath.Join(dir, "scripts", "k8s-control-plane.sh")
		if _, err := os.Stat(s); err == nil {
			return s, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("scripts/k8s-control-plane.sh not found above the package")
		}
		dir = up
	}
}

func start() {
	// The control plane has agent-sandbox's CRDs and controller, so an
	// executor in auto mode would make SandboxClaims: the tests that do
	// not say otherwise (the daemon's, run by the tests) use pods, as
	// they were written for. Set it to on to run them all on claims.
	if os.Getenv("SUBSTRAT_K8S_SANDBOX_CLAIMS") == "" {
		os.Setenv("SUBSTRAT_K8S_SANDBOX_CLAIMS", "off")
	}
	if kc := os.Getenv("SUBSTRAT_K8S_KUBECONFIG"); kc != "" {
		cluster.kubeconfig = kc
		return
	}
	script, err := Script()
	if err != nil {
		cluster.skip = err.Error()
		return
	}
	cluster.script = script
	dir, err := os.MkdirTemp("", "substrat-k8s")
	if err != nil {
		cluster.skip = err.Error()
		return
	}
	var stdout, stderr bytes.Buffer
	t0 := time.Now()
	// Its ports are free when the script picks them, and may not be by
	// the time a server binds them (another plane starting, in another
	// package's tests): such a start is tried again, with other ports.
	for try := 0; ; try++ {
		stdout.Reset()
		stderr.Reset()
		cmd := exec.Command(script, "start", dir)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err = cmd.Run(); err == nil || try == 2 || !strings.Contains(stderr.String(), "address already in use") {
			break
		}
		// The script stopped what it started; a fresh directory, for
		// etcd's data made with the old ports.
		exec.Command("bash", script, "stop", dir).Run()
		os.RemoveAll(dir)
		if dir, err = os.MkdirTemp("", "substrat-k8s"); err != nil {
			break
		}
		fmt.Fprintf(os.Stderr, "k8stest: a port was taken meanwhile; starting again\n")
	}
	if err != nil {
		os.RemoveAll(dir)
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		cluster.skip = fmt.Sprintf("no control plane (%s start: %v):\n%s", script, err,
			strings.Join(lines[max(0, len(lines)-15):], "\n"))
		return
	}
	cluster.started = time.Since(t0)
	cluster.runDir = dir
	cluster.watchdog = watch(script, dir)
	cluster.kubeconfig = strings.TrimSpace(stdout.String())
	fmt.Fprintf(os.Stderr, "k8stest: control plane started in %v\n", cluster.started.Round(time.Millisecond))
}

// watchdogScript waits for process $1 to end, then stops the control
// plane of run directory $3 with script $2.
const watchdogScript = `while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec bash "$2" stop "$3" >/dev/null 2>&1`

// watch starts a process, in a session of its own and holding none of
// this one's descriptors (go test waits for its output pipes to close),
// that stops the control plane in dir when this process ends without
// Stop: killed by a signal, by go test's timeout, or by a closed pipe
// (go test ... | head). Stop kills it first.
func watch(script, dir string) *os.Process {
	cmd := exec.Command("sh", "-c", watchdogScript, "k8stest-watchdog", strconv.Itoa(os.Getpid()), script, dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "k8stest: no watchdog for the control plane:", err)
		return nil
	}
	return cmd.Process
}
