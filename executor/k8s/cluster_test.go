package k8s

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// The tests run against a real control plane (see the package doc):
// scripts/k8s-control-plane.sh starts one for the package, the first
// time a test needs it, and stops it after the last. Environment:
//
//	SUBSTRAT_K8S_KUBECONFIG  use this running cluster instead (its current
//	                         context), and start nothing
//	SUBSTRAT_K8S_REQUIRE=1   a control plane that cannot start fails the
//	                         tests instead of skipping them (make test
//	                         sets it, after building the binaries)
//	SUBSTRAT_K8S_CACHE       the script's cache of built binaries

var cluster struct {
	once       sync.Once
	kubeconfig string
	runDir     string
	script     string
	skip       string // why the cluster tests are skipped
	started    time.Duration
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cluster.runDir != "" {
		cmd := exec.Command(cluster.script, "stop", cluster.runDir)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}
	os.Exit(code)
}

// repoRoot is the module's root, where scripts/ is.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "scripts", "k8s-control-plane.sh")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("scripts/k8s-control-plane.sh not found above the package")
		}
		dir = up
	}
}

// startCluster starts the control plane, once.
func startCluster() {
	if kc := os.Getenv("SUBSTRAT_K8S_KUBECONFIG"); kc != "" {
		cluster.kubeconfig = kc
		return
	}
	root, err := repoRoot()
	if err != nil {
		cluster.skip = err.Error()
		return
	}
	cluster.script = filepath.Join(root, "scripts", "k8s-control-plane.sh")
	dir, err := os.MkdirTemp("", "substrat-k8s-test")
	if err != nil {
		cluster.skip = err.Error()
		return
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(cluster.script, "start", dir)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		os.RemoveAll(dir)
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		cluster.skip = fmt.Sprintf("no control plane: %s start: %v:\n%s", cluster.script, err,
			strings.Join(lines[max(0, len(lines)-15):], "\n"))
		return
	}
	cluster.started = time.Since(t0)
	cluster.runDir = dir
	cluster.kubeconfig = strings.TrimSpace(stdout.String())
	fmt.Fprintf(os.Stderr, "control plane started in %v (kubeconfig %s)\n", cluster.started.Round(time.Millisecond), cluster.kubeconfig)
}

// needCluster skips t (or fails it, with SUBSTRAT_K8S_REQUIRE=1) when
// there is no control plane.
func needCluster(t testing.TB) {
	t.Helper()
	cluster.once.Do(startCluster)
	if cluster.skip != "" {
		if os.Getenv("SUBSTRAT_K8S_REQUIRE") == "1" {
			t.Fatal(cluster.skip)
		}
		t.Skip(cluster.skip)
	}
}

func token() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newExec returns an executor on a namespace of its own (deleted after
// the test), with a home of its own, and an emptyDir workspace unless
// opts says otherwise.
func newExec(t testing.TB, opts Options) *Executor {
	t.Helper()
	needCluster(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", cluster.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ns := "t-" + token()
	if opts.Home == "" {
		opts.Home = "home-" + token()
	}
	e, err := newFromConfig(Target{Context: "substrat-test", Namespace: ns}, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	// The service account controller makes default/ServiceAccount, which
	// admission wants before any pod.
	waitFor(t, "the namespace's default service account", func() (bool, error) {
		_, err := e.cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	return e
}

// emptyDir is a workspace for tests that do not look at it.
func emptyDir(string) corev1.VolumeSource {
	return corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
}

// waitLimit bounds waitFor: it only fails a test that would hang, and
// is no timing assertion.
var waitLimit = 3 * time.Minute

// waitFor polls cond until it holds.
func waitFor(t testing.TB, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s after %v", what, waitLimit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ctxT is a context that fails a test that would hang.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// running ensures a's pod and waits until it runs.
func running(t testing.TB, e *Executor, a Agent) *corev1.Pod {
	t.Helper()
	ctx := ctxT(t)
	if _, err := e.Ensure(ctx, a); err != nil {
		t.Fatal(err)
	}
	p, err := e.WaitRunning(ctx, a.ID, a.Incarnation)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// gone waits until no pod is named name.
func gone(t testing.TB, e *Executor, name string) {
	t.Helper()
	waitFor(t, "pod "+name+" to be gone", func() (bool, error) {
		_, err := e.cs.CoreV1().Pods(e.target.Namespace).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}
