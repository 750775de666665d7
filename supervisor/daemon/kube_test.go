package daemon

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestPlacement: SUBSTRAT_K8S_POD_SPEC sets where the pods run, and
// nothing else of their spec.
func TestPlacement(t *testing.T) {
	if c, err := placement(""); c != nil || err != nil {
		t.Fatalf("placement(\"\") = %v, %v", c != nil, err)
	}
	c, err := placement(`{"nodeName":"n1","nodeSelector":{"pool":"agents"},"tolerations":[{"operator":"Exists"}],` +
		`"runtimeClassName":"gvisor","hostNetwork":true}`)
	if err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent"}}}}
	c(p)
	if s := p.Spec; s.NodeName != "n1" || s.NodeSelector["pool"] != "agents" || len(s.Tolerations) != 1 ||
		s.RuntimeClassName == nil || *s.RuntimeClassName != "gvisor" || !s.HostNetwork || len(s.Containers) != 1 {
		t.Errorf("spec %+v", s)
	}
	for _, bad := range []string{
		`{"containers":[{"name":"x","image":"evil"}]}`,
		`{"hostPID":true}`,
		`{"volumes":[{"name":"root","hostPath":{"path":"/"}}]}`,
		`{"nodeName":`,
	} {
		if _, err := placement(bad); err == nil {
			t.Errorf("placement(%s) taken", bad)
		}
	}
}
