package daemon

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/substrat/substrat/executor/k8s"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
)

// TestK8sOwn: a provider's files of the home go into the pod as trees
// under k8s.OwnDir (its HOME read-write, the rest read-only), the
// program and its package are left to the image, the process names
// their copies there, and its tool socket is the pod's; a read-write
// path outside the home, or in the store's agents/, or not a directory,
// is refused.
func TestK8sOwn(t *testing.T) {
	home := shortDir(t)
	_, h := newCore(t, home)
	layout := h.store.Layout()
	cliHome := filepath.Join(home, "state", "claude", "homes", "a1")
	mcp := filepath.Join(layout.AgentsDir(), "a1", "mcp.json")
	for _, d := range []string{cliHome, filepath.Dir(mcp)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(mcp, []byte("{}"), 0o600)
	sess := &fsstore.Session{ID: "a1", Name: "far", Provider: "claude"}
	p := provider.Process{Path: "/opt/cli/claude", Args: []string{"claude", "--mcp-config", mcp, "-p"},
		Env: []string{"HOME=" + cliHome, "KEEP=" + home + "x/not-under"}}
	needs := provider.SandboxNeeds{ReadOnly: []string{"/opt/cli", "/usr/bin/substrat", mcp}, ReadWrite: []string{cliHome}, ToolSocket: true}
	out, plan, err := h.k8sOwn(sess, "k8s://c/ns", "/workspace", p, needs)
	if err != nil {
		t.Fatal(err)
	}
	podHome := "/workspace/" + k8s.OwnDir
	want := []k8s.Tree{
		{Rel: k8s.OwnDir + "/state/claude/homes/a1", Local: cliHome, RW: true},
		{Rel: k8s.OwnDir + "/agents/a1/mcp.json", Local: mcp},
	}
	if len(plan.own) != len(want) {
		t.Fatalf("trees %+v, want %+v", plan.own, want)
	}
	for i := range want {
		if g := plan.own[i]; g.Rel != want[i].Rel || g.Local != want[i].Local || g.RW != want[i].RW {
			t.Errorf("tree %d: %+v, want %+v", i, g, want[i])
		}
	}
	if plan.sock != podToolSocket("a1") {
		t.Errorf("socket %q", plan.sock)
	}
	if want := []string{"/opt/cli/claude", "--mcp-config", podHome + "/agents/a1/mcp.json", "-p"}; !slices.Equal(out.Args, want) {
		t.Errorf("args %q, want %q", out.Args, want)
	}
	if want := []string{"HOME=" + podHome + "/state/claude/homes/a1", "KEEP=" + home + "x/not-under"}; !slices.Equal(out.Env, want) {
		t.Errorf("env %q, want %q", out.Env, want)
	}
	if out.Dir != "/workspace" {
		t.Errorf("dir %q", out.Dir)
	}

	file := filepath.Join(home, "state", "afile")
	os.WriteFile(file, nil, 0o600)
	for _, bad := range []struct{ rw, says string }{
		{"/var/lib/cli", "outside the Substrat home"},
		{filepath.Dir(mcp), "of the store"},
		{filepath.Join(home, "state", "..", "agents", "a1"), "of the store"},
		{file, "only a directory"},
	} {
		_, _, err := h.k8sOwn(sess, "k8s://c/ns", "/workspace", p, provider.SandboxNeeds{ReadWrite: []string{bad.rw}})
		if err == nil || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("read-write %s: %v, want it refused (%s)", bad.rw, err, bad.says)
		}
	}
}
