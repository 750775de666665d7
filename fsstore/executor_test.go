package fsstore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateExecutor(t *testing.T) {
	for _, ok := range []string{"", "ssh://build1", "ssh://u@gpu-2.example.com", "ssh://[::1]:22", "ssh://h_1%eth0"} {
		if err := ValidateExecutor(ok); err != nil {
			t.Errorf("ValidateExecutor(%q): %v", ok, err)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"ssh://-oProxyCommand=x", "cannot start with '-'"},
		{"ftp://x", "is not ssh://HOST"},
		{"ssh://", "names no host"},
		{"ssh://a b", "letters, digits"},
		{"ssh://a\x1b[2J", "letters, digits"},
		{"ssh://a;rm", "letters, digits"},
		{"ssh://a\nb", "letters, digits"},
		{"ssh://" + strings.Repeat("h", 256), "longer than 255"},
		{"SSH://x", "is not ssh://HOST"},
		{"build1", "is not ssh://HOST"},
	} {
		if err := ValidateExecutor(c.in); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ValidateExecutor(%q) = %v, want %q", c.in, err, c.want)
		}
	}
	for _, ok := range []string{"k8s://kind-dev/agents", "k8s://arn:aws:eks:eu-west-1:1:cluster/prod/substrat", "k8s://u@c/ns-1"} {
		if err := ValidateExecutor(ok); err != nil {
			t.Errorf("ValidateExecutor(%q): %v", ok, err)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"k8s://ctx", "names no namespace"},
		{"k8s:///ns", "names no context"},
		{"k8s://-ctx/ns", "cannot start with '-'"},
		{"k8s://c tx/ns", "letters, digits"},
		{"k8s://ctx;rm/ns", "letters, digits"},
		{"k8s://ctx/NS", "a namespace is"},
		{"k8s://ctx/", "a namespace is"},
		{"k8s://ctx/a.b", "a namespace is"},
		{"K8S://ctx/ns", "nor k8s://CONTEXT/NAMESPACE"},
	} {
		if err := ValidateExecutor(c.in); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ValidateExecutor(%q) = %v, want %q", c.in, err, c.want)
		}
	}
	if k := ExecutorKubernetes("k8s://c/n"); k != "k8s://c/n" || ExecutorKubernetes("ssh://h") != "" {
		t.Errorf("ExecutorKubernetes: %q", k)
	}
	if h := ExecutorHost("ssh://u@h"); h != "u@h" {
		t.Errorf("ExecutorHost: %q", h)
	}
	if h := ExecutorHost(""); h != "" {
		t.Errorf("ExecutorHost(local): %q", h)
	}
}

// An agent's executor is set at create, changed by an executor event,
// survives a reopen, and a bad one is refused on create, on commit and
// on replay.
func TestExecutorEvent(t *testing.T) {
	home := t.TempDir()
	s := mustOpen(t, home, Options{})
	if _, err := s.CreateAgent(&Session{Name: "bad", Provider: "script", Executor: "ssh://-oProxyCommand=x"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("created with a bad executor: %v", err)
	}
	a, err := s.CreateAgent(&Session{Name: "a", Provider: "script", Executor: "ssh://build1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Session().Executor; got != "ssh://build1" {
		t.Fatalf("executor after create: %q", got)
	}
	if _, err := a.Commit(ExecutorChange{Executor: "ftp://x"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("committed a bad executor: %v", err)
	}
	if _, err := a.Commit(ExecutorChange{Executor: "ssh://u@build2", Reason: "moved"}); err != nil {
		t.Fatal(err)
	}
	id := a.ID()
	a.Close()

	s2 := mustOpen(t, home, Options{})
	res := mustScan(t, s2, ScanOptions{})
	defer closeAgents(res)
	if len(res.Agents) != 1 || res.Agents[0].Session().Executor != "ssh://u@build2" {
		t.Fatalf("after a reopen: %v", liveIDs(res))
	}
	log, err := os.ReadFile(filepath.Join(s2.Layout().AgentDir(id), "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), `"type":"executor","data":{"executor":"ssh://u@build2","reason":"moved"}`) {
		t.Errorf("events.jsonl:\n%s", log)
	}

	// Replayed from the log alone.
	base := &Session{Version: Version, ID: idA, Name: "w", Provider: "claude", AgentState: AgentIdle,
		SessionState: SessionCreated, CreatedAt: epoch, UpdatedAt: epoch}
	n, err := Apply(nil, mustEvent(1, epoch, EvCreated, base))
	if err != nil {
		t.Fatal(err)
	}
	if n, err = Apply(n, mustEvent(2, epoch, EvExecutor, ExecutorChange{Executor: "ssh://h"})); err != nil || n.Executor != "ssh://h" {
		t.Fatalf("replayed: %q, %v", n.Executor, err)
	}
	if n, err = Apply(n, mustEvent(3, epoch, EvExecutor, ExecutorChange{})); err != nil || n.Executor != "" {
		t.Fatalf("back to local: %q, %v", n.Executor, err)
	}
	if _, err := Apply(n, mustEvent(4, epoch, EvExecutor, ExecutorChange{Executor: "ssh://a b"})); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a bad executor event replayed: %v", err)
	}
}
