package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/internal/k8stest"
	"github.com/substrat/substrat/provider/fakeapi"
	wire "github.com/substrat/substrat/supervisor/api"
)

// TestK8sExecutorWorkTools: the daemon's work tools for an agent on a
// Kubernetes executor (--provider openai): its shell runs in its pod (on
// kwok, an exec that runs on this machine, in the pod's workspace), in
// the workspace's copy, with its working directory kept between calls in
// the pod; what it wrote comes back; the file tools work here on the
// root, which the next shell's push carries there.
func TestK8sExecutorWorkTools(t *testing.T) {
	api := fakeapi.NewOpenAI(scriptedCalls(
		fakeapi.Call{Name: "shell", Args: `{"command":"mkdir sub && cd sub && echo pod > made.txt && pwd"}`},
		fakeapi.Call{Name: "write_file", Args: `{"path":"sub/local.txt","content":"written here"}`},
		fakeapi.Call{Name: "shell", Args: `{"command":"pwd; cat local.txt; exit 3"}`},
	))
	t.Cleanup(api.Close)
	kubeconfig, ns, core := k8sCluster(t)
	inPod := t.TempDir()
	d := k8sDaemon(t, kubeconfig, inPod, "OPENAI_BASE_URL="+api.URL, "OPENAI_API_KEY=sk-fake", "OPENAI_MODEL=fake-model")
	mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "lab", Network: true}, nil)
	root := fsstore.Layout{Home: d.home}.WorkspaceRoot("USER", "lab")
	var a wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "far", Provider: "openai", Workspace: "lab",
		Executor: "k8s://" + k8stest.Context + "/" + ns}, &a)
	agentVolume(t, core, ns, a.ID)
	// The shell's state is in the pod's /tmp: this machine's, on kwok.
	t.Cleanup(func() { os.RemoveAll("/tmp/substrat-shell-" + a.ID) })
	res := d.send("far", "go")
	out := strings.Split(res.Text, "\n---\n")
	if len(out) != 3 {
		t.Fatalf("the turn said %q", res.Text)
	}
	if want := filepath.Join(inPod, "sub") + "\n[exit status 0]"; out[0] != want {
		t.Errorf("the first shell said %q, want %q (run in the pod's workspace)", out[0], want)
	}
	if want := filepath.Join(inPod, "sub") + "\nwritten here\n[exit status 3]"; out[2] != want {
		t.Errorf("the second shell said %q, want %q (in the directory the first left, with the file written here)", out[2], want)
	}
	if b, err := os.ReadFile(filepath.Join(root, "sub", "made.txt")); err != nil || string(b) != "pod\n" {
		t.Errorf("made.txt here: %q, %v", b, err)
	}
	if pods := agentPods(t, core, ns, a.ID); len(pods) != 1 {
		t.Errorf("%d pods of the agent", len(pods))
	}
}
