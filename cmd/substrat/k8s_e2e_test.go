package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/substrat/substrat/executor/k8s"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/internal/k8stest"
	wire "github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/daemon"
)

// k8sModel is a script-provider model program (k8s-model in TestMain)
// for an agent on a Kubernetes executor. It works in its working
// directory, the pod's workspace (on kwok, whose exec runs it on this
// machine, a directory of the test). The last line of its prompt that is
// one of these says what to do:
//
//	write NAME TEXT  write TEXT to NAME, then say where it works
//	attack           plant what must not come back: symlinks out of
//	                 the tree, a git hook and config, a .git file
//	hold PATH        write PATH.started, then wait until PATH exists
//	                 (both outside the workspace)
func k8sModel() int {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	var turn struct {
		Prompt string `json:"prompt"`
	}
	if !in.Scan() || json.Unmarshal(in.Bytes(), &turn) != nil {
		return 1
	}
	var words []string
	for _, l := range strings.Split(turn.Prompt, "\n") {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == "write" || f[0] == "attack" || f[0] == "hold") {
			words = f
		}
	}
	out := json.NewEncoder(os.Stdout)
	done := func(text string) int {
		out.Encode(map[string]any{"type": "done", "text": text})
		return 0
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	wd, err := os.Getwd()
	if err != nil {
		return fail(err)
	}
	switch {
	case len(words) >= 3 && words[0] == "write":
		if err := os.WriteFile(words[1], []byte(strings.Join(words[2:], " ")), 0o644); err != nil {
			return fail(err)
		}
		return done("wrote " + words[1] + " in " + wd + " as " + os.Getenv("SUBSTRAT_AGENT_ID"))
	case len(words) == 2 && words[0] == "hold":
		if err := os.WriteFile(words[1]+".started", nil, 0o644); err != nil {
			return fail(err)
		}
		for {
			if _, err := os.Stat(words[1]); err == nil {
				return done("released")
			}
			time.Sleep(20 * time.Millisecond)
		}
	case len(words) == 1 && words[0] == "attack":
		for _, step := range []error{
			os.Symlink("/etc", "etc"),
			os.Symlink("../../../../../../../etc/passwd", "passwd"),
			os.MkdirAll(".git/hooks", 0o755),
			os.WriteFile(".git/hooks/post-checkout", []byte("#!/bin/sh\ntouch /tmp/hook-ran\n"), 0o755),
			os.WriteFile(".git/config", []byte("[core]\n\tfsmonitor = touch /tmp/fsmonitor-ran\n"), 0o644),
			os.MkdirAll("sub", 0o755),
			os.WriteFile("sub/.git", []byte("gitdir: /etc\n"), 0o644),
			os.WriteFile("innocent.txt", []byte("plain data"), 0o644),
		} {
			if step != nil {
				return fail(step)
			}
		}
		return done("planted")
	}
	return done("say what to do")
}

// k8sCluster is the test control plane (internal/k8stest), its
// kubeconfig and a namespace of the test's own.
func k8sCluster(t *testing.T) (kubeconfig, ns string, core corev1client.CoreV1Interface) {
	t.Helper()
	kubeconfig = k8stest.Kubeconfig(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if core, err = corev1client.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	ns = "e2e-" + strings.ToLower(fsstore.NewID())
	if len(ns) > 63 {
		ns = ns[:63]
	}
	ctx := context.Background()
	if _, err := core.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { core.Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	// Admission wants the namespace's default service account first.
	waitUntil(t, "the namespace's default service account", func() bool {
		_, err := core.ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
	return kubeconfig, ns, core
}

// agentVolume makes a volume for the workspace claim of agent in ns (the
// control plane has no provisioner), removed when the test ends, and
// returns its directory (a hostPath, which a real container's user can
// write).
func agentVolume(t *testing.T, core corev1client.CoreV1Interface, ns, agent string) string {
	t.Helper()
	vol := t.TempDir()
	if err := os.Chmod(vol, 0o777); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + strings.ToLower(agent)},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: vol}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: k8s.ClaimName(agent)},
		},
	}
	if _, err := core.PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { core.PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{}) })
	return vol
}

// k8sDaemon starts a daemon whose Kubernetes executors reach the test's
// control plane (kubeconfig), with the pods' workspace at inPod (kwok's
// exec runs on this machine).
func k8sDaemon(t *testing.T, kubeconfig, inPod string, env ...string) *e2eDaemon {
	t.Helper()
	d := runDaemon(t, append([]string{"KUBECONFIG=" + kubeconfig, daemon.K8sMountPathEnv + "=" + inPod}, env...)...)
	t.Cleanup(func() {
		// Under -race, the daemon (this test binary) reports there.
		if b, _ := os.ReadFile(filepath.Join(d.home, "e2e-daemon.out")); strings.Contains(string(b), "DATA RACE") {
			t.Errorf("the daemon raced:\n%s", b)
		}
		if t.Failed() {
			b, _ := os.ReadFile(fsstore.Layout{Home: d.home}.Log())
			t.Logf("the daemon's log:\n%s", b)
		}
	})
	return d
}

// waitUntil polls cond for at most two minutes (a bound for a test that
// would hang, not a timing assertion).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// agentPods lists the pods of agent in ns.
func agentPods(t *testing.T, core corev1client.CoreV1Interface, ns, agent string) []corev1.Pod {
	t.Helper()
	list, err := core.Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: k8s.LabelAgent + "=" + agent})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// TestK8sExecutorE2E: an agent created with --executor
// k8s://CONTEXT/NAMESPACE runs its turns in its pod, on the test's real
// control plane (kwok's nodes: the exec runs the command on this
// machine, in the pod's workspace, which the test makes a directory of
// its own). Its workspace goes there and what it wrote comes back; what
// it planted to attack this side does not; a daemon restart's reconcile
// deletes the pod of the previous incarnation, and the next turn runs in
// a pod of the new one.
func TestK8sExecutorE2E(t *testing.T) {
	kubeconfig, ns, core := k8sCluster(t)
	inPod := t.TempDir() // the pod's workspace, on kwok
	d := k8sDaemon(t, kubeconfig, inPod)
	model := lookPath(t, "k8s-model")
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab", Network: true}, nil)
	root := fsstore.Layout{Home: d.home}.WorkspaceRoot("USER", "lab")
	if err := os.WriteFile(filepath.Join(root, "input.txt"), []byte("from here"), 0o644); err != nil {
		t.Fatal(err)
	}
	var a wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "far", Model: model, Workspace: "lab",
		Executor: "k8s://" + k8stest.Context + "/" + ns}, &a)
	agentVolume(t, core, ns, a.ID)

	t0 := time.Now()
	res := d.send("far", "write hello.txt hi from the pod")
	first := time.Since(t0)
	if want := "wrote hello.txt in " + inPod + " as " + a.ID; res.Text != want {
		t.Fatalf("the turn said %q, want %q", res.Text, want)
	}
	if b, err := os.ReadFile(filepath.Join(root, "hello.txt")); err != nil || string(b) != "hi from the pod" {
		t.Fatalf("hello.txt in the workspace: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(inPod, "input.txt")); err != nil || string(b) != "from here" {
		t.Fatalf("input.txt in the pod: %q, %v", b, err)
	}
	// Its pod: the agent's labels, this home's, one incarnation.
	homeID, err := fsstore.HomeID(d.home)
	if err != nil {
		t.Fatal(err)
	}
	pods := agentPods(t, core, ns, a.ID)
	if len(pods) != 1 {
		t.Fatalf("%d pods of the agent", len(pods))
	}
	pod := pods[0]
	inc := pod.Labels[k8s.LabelIncarnation]
	if pod.Labels[k8s.LabelHome] != homeID || pod.Labels[k8s.LabelManagedBy] != k8s.ManagedBy || inc == "" ||
		!strings.HasPrefix(pod.Name, k8s.PodPrefix(a.ID, inc)) || pod.Status.Phase != corev1.PodRunning {
		t.Fatalf("pod %s: labels %v, phase %s", pod.Name, pod.Labels, pod.Status.Phase)
	}
	if v := pod.Spec.Volumes[0]; v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != k8s.ClaimName(a.ID) {
		t.Errorf("the pod's workspace volume: %+v", v)
	}

	// A turn in the running pod: its cost (kwok's exec runs here).
	os.Remove(filepath.Join(root, "input.txt"))
	var warm time.Duration
	for i := range 3 {
		t0 = time.Now()
		d.send("far", fmt.Sprintf("write second.txt again %d", i))
		warm += time.Since(t0)
	}
	warm /= 3
	if _, err := os.Lstat(filepath.Join(inPod, "input.txt")); !os.IsNotExist(err) {
		t.Errorf("input.txt removed here is still in the pod: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "second.txt")); string(b) != "again 2" {
		t.Errorf("second.txt: %q", b)
	}
	// The same turn on this machine, in its sandbox, to compare.
	needBwrap(t)
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "here", Network: true}, nil)
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "near", Model: model, Workspace: "here"}, nil)
	d.send("near", "write x.txt warm-up")
	var local time.Duration
	for i := range 3 {
		t0 = time.Now()
		d.send("near", fmt.Sprintf("write x.txt %d", i))
		local += time.Since(t0)
	}
	local /= 3
	t.Logf("a turn in a pod on kwok: the first %v (pod made), then %v; on this machine in bwrap %v: %v more",
		first.Round(time.Millisecond), warm.Round(time.Millisecond), local.Round(time.Millisecond), (warm - local).Round(time.Millisecond))

	// The attack: nothing of it comes back, the plain file does.
	if res := d.send("far", "attack"); res.Text != "planted" {
		t.Fatalf("the attack turn said %q", res.Text)
	}
	if b, err := os.ReadFile(filepath.Join(root, "innocent.txt")); err != nil || string(b) != "plain data" {
		t.Fatalf("innocent.txt: %q, %v", b, err)
	}
	for _, bad := range []string{"etc", "passwd", ".git", "sub/.git"} {
		if fi, err := os.Lstat(filepath.Join(root, bad)); !os.IsNotExist(err) {
			t.Errorf("%s came back from the pod: %v, %v", bad, fi, err)
		}
	}

	// A restart (kill -9): the start's reconcile deletes the pod of the
	// previous incarnation (the agent is idle: none is made).
	d.kill()
	d.start()
	waitUntil(t, "the stale pod's deletion", func() bool {
		_, err := core.Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	// The reconcile logs what it did once all of it is done, which may
	// be after the deletion shows.
	waitUntil(t, "the daemon's log to name the stale pod "+pod.Name+" it deleted", func() bool {
		b, _ := os.ReadFile(fsstore.Layout{Home: d.home}.Log())
		return strings.Contains(string(b), pod.Name)
	})
	res = d.send("far", "write third.txt after the restart")
	if !strings.HasPrefix(res.Text, "wrote third.txt") {
		t.Fatalf("the turn after the restart said %q", res.Text)
	}
	pods = agentPods(t, core, ns, a.ID)
	if len(pods) != 1 || pods[0].Labels[k8s.LabelIncarnation] == inc || pods[0].Name == pod.Name {
		t.Fatalf("after the restart: %d pods, the first of incarnation %q (before: %q)", len(pods), pods[0].Labels[k8s.LabelIncarnation], inc)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "third.txt")); string(b) != "after the restart" {
		t.Errorf("third.txt: %q", b)
	}
	// Its end deletes its pod; the claim stays.
	var ended []wire.AgentInfo
	mustCall(d, wire.AgentTerminate, wire.TerminateParams{Ref: "far"}, &ended)
	waitUntil(t, "the terminated agent's pod's deletion", func() bool { return len(agentPods(t, core, ns, a.ID)) == 0 })
	if _, err := core.PersistentVolumeClaims(ns).Get(context.Background(), k8s.ClaimName(a.ID), metav1.GetOptions{}); err != nil {
		t.Errorf("the workspace claim: %v", err)
	}
}

// TestK8sExecutorPodGone: a turn whose pod is deleted while its process
// runs fails as cut short (k8s.ErrPodGone), and is retried in a new pod.
// (On kwok the process outlives its pod, this machine's; the exec's end
// is what finds the pod gone.) The same in SandboxClaims mode, where
// agent-sandbox's controller makes the pods (a Sandbox owns each).
func TestK8sExecutorPodGone(t *testing.T) {
	for _, mode := range []string{"off", "on"} {
		t.Run("claims-"+mode, func(t *testing.T) { testK8sPodGone(t, mode) })
	}
}

func testK8sPodGone(t *testing.T, claims string) {
	kubeconfig, ns, core := k8sCluster(t)
	inPod := t.TempDir()
	d := k8sDaemon(t, kubeconfig, inPod, "SUBSTRAT_K8S_SANDBOX_CLAIMS="+claims)
	cfg := `{"version": 1, "retry": {"limit": 5, "window": "1m", "base": "200ms"}}`
	if err := os.WriteFile(filepath.Join(d.home, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d.kill()
	d.start()
	model := lookPath(t, "k8s-model")
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab", Network: true}, nil)
	var a wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "far", Model: model, Workspace: "lab",
		Executor: "k8s://" + k8stest.Context + "/" + ns}, &a)
	agentVolume(t, core, ns, a.ID)
	release := filepath.Join(t.TempDir(), "release")
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "far", Text: "hold " + release}, nil)
	waitFile(t, release+".started")
	pods := agentPods(t, core, ns, a.ID)
	if len(pods) != 1 {
		t.Fatalf("%d pods", len(pods))
	}
	owners := ""
	for _, o := range pods[0].OwnerReferences {
		owners += o.Kind + " "
	}
	if claimed := strings.Contains(owners, "Sandbox"); claimed != (claims == "on") {
		t.Fatalf("claims %s: the pod's owners are %q", claims, owners)
	}
	zero := int64(0)
	if err := core.Pods(ns).Delete(context.Background(), pods[0].Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the pod's deletion", func() bool {
		_, err := core.Pods(ns).Get(context.Background(), pods[0].Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d.waitFirstTurn("far")
	events, err := os.ReadFile(fsstore.Layout{Home: d.home}.Agent(a.ID).Events())
	if err != nil {
		t.Fatal(err)
	}
	var failed string
	for _, l := range strings.Split(string(events), "\n") {
		if strings.Contains(l, `"`+fsstore.EvTurnFailed+`"`) {
			failed = l
		}
	}
	if !strings.Contains(failed, "the pod went while the command ran") {
		t.Fatalf("no turn failed as its pod went:\n%s", events)
	}
	t.Logf("the cut turn: %s", failed)
	after := agentPods(t, core, ns, a.ID)
	if len(after) != 1 || after[0].Name == pods[0].Name {
		t.Fatalf("after the retry: %d pods", len(after))
	}
}

// k8sShellModel is a script-provider model program in sh, for the agent
// image of the real kubelet (which has no Go test binary): it writes
// hello.txt with its user id, plants what must not come back, and says
// so.
const k8sShellModel = `#!/bin/sh
read -r turn
echo "hi from $(id -u) in $(pwd)" > hello.txt
ln -s /etc etc
mkdir -p .git/hooks sub
echo evil > .git/hooks/post-checkout
echo 'gitdir: /etc' > sub/.git
echo '{"type":"done","text":"wrote hello.txt"}'
`

// k8sShellModelPath is where TestMain wrote k8sShellModel ("" if it
// could not).
var k8sShellModelPath string

// TestK8sExecutorRealKubelet: the daemon's turn in a pod of the node
// with a real kubelet and container runtime (skipped where there is
// none): the workspace goes into the container's claim, the model runs
// there as the pod's user, and its work comes back, its attack not.
func TestK8sExecutorRealKubelet(t *testing.T) {
	node, image := k8stest.Kubelet(t)
	if k8sShellModelPath == "" {
		t.Skip("no model program for the agent image")
	}
	kubeconfig, ns, core := k8sCluster(t)
	spec := `{"nodeName":"` + node + `","hostNetwork":true,"tolerations":[{"operator":"Exists"}]}`
	d := runDaemon(t, "KUBECONFIG="+kubeconfig, daemon.K8sImageEnv+"="+image, daemon.K8sPodSpecEnv+"="+spec)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(fsstore.Layout{Home: d.home}.Log())
			t.Logf("the daemon's log:\n%s", b)
		}
	})
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab", Network: true}, nil)
	root := fsstore.Layout{Home: d.home}.WorkspaceRoot("USER", "lab")
	os.WriteFile(filepath.Join(root, "input.txt"), []byte("from here"), 0o644)
	var a wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "far", Model: k8sShellModelPath, Workspace: "lab",
		Executor: "k8s://" + k8stest.Context + "/" + ns}, &a)
	vol := agentVolume(t, core, ns, a.ID)

	t0 := time.Now()
	res := d.send("far", "go")
	first := time.Since(t0)
	if res.Text != "wrote hello.txt" {
		t.Fatalf("the turn said %q", res.Text)
	}
	t0 = time.Now()
	d.send("far", "again")
	t.Logf("a turn in a pod on the real kubelet: the first %v (pod made), then %v", first.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	if b, err := os.ReadFile(filepath.Join(root, "hello.txt")); err != nil || string(b) != "hi from 65532 in /workspace\n" {
		t.Errorf("hello.txt: %q, %v", b, err)
	}
	// The workspace went into the claim's volume.
	if b, err := os.ReadFile(filepath.Join(vol, "input.txt")); err != nil || string(b) != "from here" {
		t.Errorf("input.txt in the claim: %q, %v", b, err)
	}
	for _, bad := range []string{"etc", ".git", "sub/.git"} {
		if _, err := os.Lstat(filepath.Join(root, bad)); !os.IsNotExist(err) {
			t.Errorf("%s came back from the pod: %v", bad, err)
		}
	}
	pods := agentPods(t, core, ns, a.ID)
	if len(pods) != 1 || pods[0].Spec.NodeName != node {
		t.Fatalf("%d pods, on %v", len(pods), pods)
	}
}
