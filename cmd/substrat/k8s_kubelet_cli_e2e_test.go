package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/substrat/substrat/executor/k8s"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/internal/k8stest"
	"github.com/substrat/substrat/provider/fakeapi"
	wire "github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/daemon"
)

// kubeletDir is a directory outside /tmp, which the pod's own hides, for
// the programs the image holds at their paths here (kubeletDaemon).
func kubeletDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "substrat-k8s-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	return dir
}

// copyOut copies src (a file or a directory) to dst.
func copyOut(t *testing.T, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}

// kubeletDaemon starts a daemon whose agents on Kubernetes run on the
// real kubelet's node, in the host's network (the fake APIs listen on
// its loopback), from an image tag made of the agent image, files (a
// CLI, its runtime) and substrat: a copy of this test binary outside
// /tmp (which the pod's own hides), from which the daemon runs, so that
// the MCP server and the relay it starts are at that path there. It
// returns the daemon, and the executor of a namespace of the test's own.
// dir is kubeletDir's, where substrat goes too.
func kubeletDaemon(t *testing.T, dir, tag string, files []string, env ...string) (*e2eDaemon, string, corev1client.CoreV1Interface) {
	t.Helper()
	node, _ := k8stest.Kubelet(t)
	substrat := filepath.Join(dir, "substrat")
	if out, err := exec.Command("cp", lookPath(t, "substrat"), substrat).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	image := k8stest.Image(t, tag, append(files, substrat)...)
	kubeconfig, ns, core := k8sCluster(t)
	spec := `{"nodeName":"` + node + `","hostNetwork":true,"tolerations":[{"operator":"Exists"}]}`
	d := runDaemonAt(t, substrat, append(env,
		"KUBECONFIG="+kubeconfig, daemon.K8sImageEnv+"="+image, daemon.K8sPodSpecEnv+"="+spec)...)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(fsstore.Layout{Home: d.home}.Log())
			t.Logf("the daemon's log:\n%s", b)
		}
	})
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab", Network: true}, nil)
	return d, "k8s://" + k8stest.Context + "/" + ns, core
}

// TestK8sExecutorCLIRealKubelet: the real Claude Code CLI runs a turn in
// a real container (containerd, runc) on the real kubelet, whose image
// holds only the CLI's binary and substrat's at their paths here (and
// a shell, tar, find): its HOME, MCP config and workspace reach it only
// as copies in the claim's volume, and its tools only through the relay.
// A tool call reaches USER, and the second turn resumes the session the
// first left.
func TestK8sExecutorCLIRealKubelet(t *testing.T) {
	k8stest.Kubelet(t)
	real, err := filepath.EvalSymlinks(claudeCLI(t))
	if err != nil {
		t.Fatal(err)
	}
	// The CLI at a path outside /tmp (a clone of the project may be
	// there), first on the daemon's PATH.
	dir := kubeletDir(t)
	cli := filepath.Join(dir, "claude")
	copyOut(t, real, cli)
	api := fakeapi.NewClaude(k8sClaudeReply)
	t.Cleanup(api.Close)
	d, executor, core := kubeletDaemon(t, dir, "claude", []string{cli}, claudeEnv(cli, api.URL)...)
	var a wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "far", Provider: "claude", Workspace: "lab", Executor: executor}, &a)
	ns := executor[strings.LastIndex(executor, "/")+1:]
	vol := agentVolume(t, core, ns, a.ID)

	t0 := time.Now()
	if res := d.send("far", "remember MANGO"); !strings.HasPrefix(res.Text, "sent: ") {
		t.Fatalf("the first turn said %q", res.Text)
	}
	first := time.Since(t0)
	if got := d.waitInbox("MANGO noted from the pod", time.Minute); got != "MANGO noted from the pod" {
		t.Errorf("USER got %q", got)
	}
	t0 = time.Now()
	if res := d.send("far", "what did I say?"); res.Text != "you said MANGO" {
		t.Errorf("the second turn in the container said %q", res.Text)
	}
	t.Logf("Claude Code's turns in a container on the real kubelet: the first %v (pod made), then %v",
		first.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	// Its HOME was in the claim's volume, written by the container's user.
	var transcripts []string
	filepath.WalkDir(filepath.Join(vol, k8s.OwnDir), func(p string, de os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".jsonl") {
			transcripts = append(transcripts, p)
		}
		return nil
	})
	if len(transcripts) == 0 {
		t.Errorf("no session transcript in the claim's volume")
	}
}

// TestK8sExecutorGeminiRealKubelet: the real Gemini CLI, a node program,
// runs turns in a real container on the real kubelet, whose image holds
// node, the CLI's bundle and substrat; the second turn resumes the
// session its HOME carried back and into the pod again.
func TestK8sExecutorGeminiRealKubelet(t *testing.T) {
	k8stest.Kubelet(t)
	env := codexGeminiEnv(t, rememberReply)
	prog, err := filepath.EvalSymlinks(toolsBin(t, "gemini"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal(err)
	}
	// The CLI's bundle outside /tmp, its launcher first on the daemon's
	// PATH.
	dir := kubeletDir(t)
	bundle := filepath.Join(dir, "gemini-bundle")
	copyOut(t, filepath.Dir(prog), bundle)
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	if err := os.Symlink(filepath.Join(bundle, filepath.Base(prog)), filepath.Join(bin, "gemini")); err != nil {
		t.Fatal(err)
	}
	env = append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	d, executor, core := kubeletDaemon(t, dir, "gemini", []string{bundle, node}, env...)
	var a wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "gem", Provider: "gemini", Model: "fake-model", Workspace: "lab", Executor: executor}, &a)
	agentVolume(t, core, executor[strings.LastIndex(executor, "/")+1:], a.ID)
	if res := d.send("gem", "remember MANGO"); res.Text != "noted" {
		t.Fatalf("the first turn said %q", res.Text)
	}
	t0 := time.Now()
	if res := d.send("gem", "what did I say?"); res.Text != "you said MANGO" {
		t.Errorf("the second turn in the container said %q", res.Text)
	}
	t.Logf("a Gemini CLI turn in a container on the real kubelet: %v", time.Since(t0).Round(time.Millisecond))
}
