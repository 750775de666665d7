package k8s

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/substrat/substrat/internal/k8stest"
)

// The tests run against a real control plane: see internal/k8stest.

func TestMain(m *testing.M) {
	// chmod in the real kubelet's agent image: the copies unlock what an
	// agent locked in its workspace (TestRealKubeletLocked).
	os.Setenv("SUBSTRAT_K8S_IMAGE_FILES", strings.TrimSpace(os.Getenv("SUBSTRAT_K8S_IMAGE_FILES")+" /usr/bin/chmod"))
	k8stest.Main(m)
}

func token() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newExec returns an executor on a namespace of its own (deleted after
// the test), with a home of its own, in pod mode unless opts says
// otherwise.
func newExec(t testing.TB, opts Options) *Executor {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", k8stest.Kubeconfig(t))
	if err != nil {
		t.Fatal(err)
	}
	ns := "t-" + token()
	if opts.Home == "" {
		opts.Home = "home-" + token()
	}
	if opts.SandboxClaims == "" {
		// The control plane has agent-sandbox's CRDs: the tests of pods
		// pin pod mode, those of claims (claims_test.go) claims mode.
		opts.SandboxClaims = ClaimsOff
	}
	e, err := newFromConfig(Target{Context: k8stest.Context, Namespace: ns}, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := e.core.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.core.Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	// The service account controller makes default/ServiceAccount, which
	// admission wants before any pod.
	waitFor(t, "the namespace's default service account", func() (bool, error) {
		_, err := e.core.ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
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
		_, err := e.core.Pods(e.target.Namespace).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}
