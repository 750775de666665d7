package main

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	networkingclient "k8s.io/client-go/kubernetes/typed/networking/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/substrat/substrat/executor/k8s"
	"github.com/substrat/substrat/internal/k8stest"
	wire "github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/daemon"
)

// TestK8sExecutorIsolated: an agent whose workspace has no network runs
// in a pod only where the daemon is told the cluster enforces
// NetworkPolicies; then a policy that allows its pod nothing selects
// it. Elsewhere, and with its pod in the host's network, its turn is
// refused, saying what to do. (No network plugin runs here: that the
// policy is enforced is not tested.)
func TestK8sExecutorIsolated(t *testing.T) {
	kubeconfig, ns, core := k8sCluster(t)
	model := lookPath(t, "k8s-model")
	executor := "k8s://" + k8stest.Context + "/" + ns
	for _, c := range []struct {
		name string
		env  []string
		says string // "" when the turn runs
	}{
		{"unknown", nil, k8s.NetworkPolicyEnv + "=enforced"},
		{"host-network", []string{k8s.NetworkPolicyEnv + "=enforced", daemon.K8sPodSpecEnv + `={"hostNetwork":true}`}, "host's network"},
		{"enforced", []string{k8s.NetworkPolicyEnv + "=enforced"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := k8sDaemon(t, kubeconfig, t.TempDir(), c.env...)
			mustCall(d, wire.WorkspaceCreate, wire.WorkspaceParams{Name: "closed"}, nil)
			var a wire.AgentInfo
			mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "shut", Model: model, Workspace: "closed", Executor: executor}, &a)
			agentVolume(t, core, ns, a.ID)
			var res wire.SendResult
			err := e2eStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "shut", Text: "write x.txt inside", Wait: true}, &res)
			if err != nil {
				t.Fatal(err)
			}
			if c.says != "" {
				if !strings.Contains(res.Failed, c.says) {
					t.Fatalf("the turn of an agent without network: %+v, want it refused saying %q", res, c.says)
				}
				if pods := agentPods(t, core, ns, a.ID); len(pods) > 0 {
					t.Errorf("a refused agent got a pod: %s", pods[0].Name)
				}
				return
			}
			if !strings.HasPrefix(res.Text, "wrote x.txt") {
				t.Fatalf("the isolated turn: %+v", res)
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				t.Fatal(err)
			}
			nets := networkingclient.NewForConfigOrDie(cfg)
			np, err := nets.NetworkPolicies(ns).Get(context.Background(), k8s.NetworkPolicyName(a.ID), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			sel, _ := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			pods := agentPods(t, core, ns, a.ID)
			if len(pods) != 1 || !sel.Matches(labels.Set(pods[0].Labels)) || len(np.Spec.Egress)+len(np.Spec.Ingress) > 0 {
				t.Errorf("the policy %+v over the pods %d", np.Spec, len(pods))
			}
		})
	}
}
