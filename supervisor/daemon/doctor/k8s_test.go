package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/substrat/substrat/internal/k8stest"
	"github.com/substrat/substrat/supervisor/api"
)

func TestMain(m *testing.M) { k8stest.Main(m) }

// TestK8sExecutors: each distinct Kubernetes executor of the live agents
// is checked against a real API server (internal/k8stest), through
// $KUBECONFIG: a context that is there passes, one that is not, or whose
// server does not answer, fails, and says so.
func TestK8sExecutors(t *testing.T) {
	kc := k8stest.Kubeconfig(t)
	// A second kubeconfig whose context's server does not answer.
	data, err := os.ReadFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	dead := strings.ReplaceAll(string(data), "name: "+k8stest.Context, "name: dead")
	dead = strings.ReplaceAll(dead, "cluster: "+k8stest.Context, "cluster: dead")
	dead = strings.ReplaceAll(dead, "user: admin", "user: dead")
	dead = strings.ReplaceAll(dead, "name: admin", "name: dead")
	dead = strings.Replace(dead, "server: https://127.0.0.1:", "server: https://127.0.0.1:1#", 1)
	deadFile := filepath.Join(t.TempDir(), "dead")
	if err := os.WriteFile(deadFile, []byte(dead), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kc+string(os.PathListSeparator)+deadFile)
	t.Setenv("SUBSTRAT_K8S_SANDBOX_CLAIMS", "off")

	good := "k8s://" + k8stest.Context + "/default"
	var in Input
	for _, e := range []string{good, "", "ssh://x", good, "k8s://nowhere/default", "k8s://dead/default"} {
		in.CountExecutor(e)
	}
	if len(in.K8s) != 3 || in.K8s[good] != 2 || len(in.SSH) != 1 {
		t.Fatalf("counted %v, ssh %v", in.K8s, in.SSH)
	}
	got := map[string]api.DoctorCheck{}
	for k := range in.K8s {
		got[k] = checkK8s(context.Background(), k, in.K8s[k])
	}
	if c := got[good]; c.Status != api.DoctorOK || c.Check != good || !strings.Contains(c.Detail, "v1.34") || !strings.Contains(c.Detail, "2 agent(s)") {
		t.Errorf("reachable: %+v", c)
	}
	if c := got[good]; !strings.Contains(c.Detail, "mode: pods made by the daemon, SUBSTRAT_K8S_SANDBOX_CLAIMS=off") {
		t.Errorf("pod mode: %+v", c)
	}
	// The control plane has agent-sandbox's CRDs: auto finds them.
	t.Setenv("SUBSTRAT_K8S_SANDBOX_CLAIMS", "auto")
	if c := checkK8s(context.Background(), good, 1); c.Status != api.DoctorOK ||
		!strings.Contains(c.Detail, "mode: SandboxClaims (agent-sandbox makes the pods), SUBSTRAT_K8S_SANDBOX_CLAIMS=auto") {
		t.Errorf("claims mode: %+v", c)
	}
	if c := got["k8s://nowhere/default"]; c.Status != api.DoctorFail || !strings.Contains(c.Detail, `"nowhere"`) || c.Hint == "" {
		t.Errorf("no such context: %+v", c)
	}
	if c := got["k8s://dead/default"]; c.Status != api.DoctorFail || !strings.Contains(c.Detail, "is not reachable") {
		t.Errorf("no server: %+v", c)
	}
}
