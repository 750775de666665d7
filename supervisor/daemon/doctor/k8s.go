package doctor

import (
	"context"
	"fmt"

	"github.com/substrat/substrat/executor/k8s"
	"github.com/substrat/substrat/supervisor/api"
)

// checkK8s checks a Kubernetes executor that agents name
// (k8s://CONTEXT/NAMESPACE), as executor/k8s.Check does: the context is
// in the kubeconfig ($KUBECONFIG, else ~/.kube/config), its API server
// is reachable with its credentials, and they may make pods and exec
// into them in the namespace (and SandboxClaims made, in that mode, which
// it shows). Agents use it, so a problem is a failure.
func checkK8s(ctx context.Context, executor string, used int) api.DoctorCheck {
	c := api.DoctorCheck{Check: executor}
	note := fmt.Sprintf(" (%d agent(s) name it)", used)
	t, err := k8s.Parse(executor)
	if err != nil {
		c.Status, c.Detail = api.DoctorFail, err.Error()+note
		return c
	}
	hint := "'kubectl --context " + t.Context + " -n " + t.Namespace + " auth can-i create pods/exec' must say yes for the daemon's user (the context in $KUBECONFIG or ~/.kube/config)"
	e, err := k8s.New(t, k8s.Options{Home: "doctor", NetworkPolicies: k8s.NetworkPoliciesEnforced()})
	if err != nil {
		c.Status, c.Detail, c.Hint = api.DoctorFail, cut(err.Error(), 300)+note, hint
		return c
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if err := e.Check(ctx); err != nil {
		c.Status, c.Detail, c.Hint = api.DoctorFail, cut(err.Error(), 300)+note, hint
		return c
	}
	v, _ := e.ServerVersion(ctx)
	mode, _ := e.Mode(ctx) // Check found it
	c.Status, c.Detail = api.DoctorOK, "the API server ("+v+") is reachable, and pods can be made and exec'd into in namespace "+t.Namespace+"; mode: "+mode+note
	return c
}
