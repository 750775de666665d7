package daemon

import (
	"log/slog"
	"os"
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
		`{"hostNetwork":true} x`,
		`{"hostNetwork":true}{}`,
	} {
		if _, err := placement(bad); err == nil {
			t.Errorf("placement(%s) taken", bad)
		}
	}
	// What would put the pods in the host's network is seen so by the
	// isolation's check, even what placement would not parse alike.
	for v, want := range map[string]bool{"": false, `{"nodeName":"n"}`: false, `{"hostNetwork":true}`: true,
		`{"HostNetwork":true}`: true, `{"hostNetwork":true} x`: true, `{"hostNetwork":false}{"hostNetwork":true}`: true} {
		if got := hostNetwork(v); got != want {
			t.Errorf("hostNetwork(%s) = %v, want %v", v, got, want)
		}
	}
}

// TestKubeSynced: the record of an agent's volume in sync counts for
// that volume only, and is gone once removed.
func TestKubeSynced(t *testing.T) {
	k := newKubes(slog.New(slog.DiscardHandler), "inc", t.TempDir())
	if k.isSynced("a1", "") || k.isSynced("a1", "vol1") {
		t.Fatal("synced with no record")
	}
	if err := k.setSynced("a1", "vol1"); err != nil {
		t.Fatal(err)
	}
	if !k.isSynced("a1", "vol1") || k.isSynced("a1", "vol2") || k.isSynced("a1", "") || k.isSynced("a2", "vol1") {
		t.Fatal("the record counts for another volume or agent, or not for its own")
	}
	if err := k.setSynced("a1", ""); err != nil {
		t.Fatal(err)
	}
	if err := k.setSynced("a1", ""); err != nil {
		t.Fatal(err)
	}
	if k.isSynced("a1", "vol1") {
		t.Fatal("synced after the record's removal")
	}
	if _, err := os.Stat(k.home + "/run/k8s/a1.synced"); !os.IsNotExist(err) {
		t.Fatalf("the record: %v", err)
	}
}
