package doctor

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/substrat/substrat/supervisor/api"
)

// TestProviderSeverity: a missing CLI or key is a warning while no agent
// uses the provider, a failure once one does; a key is named, never shown.
func TestProviderSeverity(t *testing.T) {
	bin := t.TempDir()
	t.Setenv("PATH", bin)
	t.Setenv("OPENAI_API_KEY", "")
	codex := Providers[slices.IndexFunc(Providers, func(p Provider) bool { return p.Name == "codex" })]
	status := func(cs []api.DoctorCheck) string {
		var s []string
		for _, c := range cs {
			s = append(s, c.Check+"="+c.Status)
		}
		return strings.Join(s, " ")
	}
	ctx := context.Background()
	if got := status(checkProvider(ctx, codex, 0)); got != "codex CLI=warn" {
		t.Errorf("unused, no CLI: %s", got)
	}
	if got := status(checkProvider(ctx, codex, 2)); got != "codex CLI=FAIL codex key=FAIL" {
		t.Errorf("used, no CLI, no key: %s", got)
	}
	if err := os.WriteFile(filepath.Join(bin, "codex"), []byte("#!/bin/sh\necho codex-cli 9.9\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := status(checkProvider(ctx, codex, 0)); got != "codex CLI=ok codex key=warn" {
		t.Errorf("unused, CLI, no key: %s", got)
	}
	t.Setenv("OPENAI_API_KEY", "sk-very-secret")
	cs := checkProvider(ctx, codex, 1)
	if got := status(cs); got != "codex CLI=ok codex key=ok" {
		t.Errorf("used, CLI, key: %s", got)
	}
	if !strings.Contains(cs[0].Detail, "codex-cli 9.9") {
		t.Errorf("CLI detail %q lacks its version", cs[0].Detail)
	}
	for _, c := range cs {
		if strings.Contains(c.Detail+c.Hint, "sk-very-secret") {
			t.Errorf("a check shows the key: %+v", c)
		}
	}
	// A CLI whose --version fails.
	if err := os.WriteFile(filepath.Join(bin, "codex"), []byte("#!/bin/sh\necho broken >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if cs := checkProvider(ctx, codex, 1); cs[0].Status != api.DoctorFail || !strings.Contains(cs[0].Detail, "broken") {
		t.Errorf("a failing --version: %+v", cs[0])
	}
}

func TestUnitEnv(t *testing.T) {
	files, names := unitEnv([]byte("[Service]\nEnvironmentFile=-%h/.config/substrat/env\n" +
		"Environment=\"PATH=/usr/bin:/bin\" GEMINI_API_KEY=x\n  EnvironmentFile=/etc/substrat.env\n#EnvironmentFile=/no\n"))
	if !slices.Equal(files, []string{"-%h/.config/substrat/env", "/etc/substrat.env"}) {
		t.Errorf("files %q", files)
	}
	if !slices.Equal(names, []string{"PATH", "GEMINI_API_KEY"}) {
		t.Errorf("names %q", names)
	}
	got := envFileVars([]byte("# c\nexport PATH=/bin\n\nOPENAI_API_KEY = k\n; x\n"))
	if !slices.Equal(got, []string{"PATH", "OPENAI_API_KEY"}) {
		t.Errorf("env file vars %q", got)
	}
}

// TestHomeOnTmpfs: a home on tmpfs, where a power loss loses everything,
// is a warning (skipped where /dev/shm is not tmpfs).
func TestHomeOnTmpfs(t *testing.T) {
	dir, err := os.MkdirTemp("/dev/shm", "doctor-")
	if err != nil {
		t.Skip("no /dev/shm:", err)
	}
	defer os.RemoveAll(dir)
	c := checkHome(filepath.Join(dir, "home"))
	if !strings.Contains(c.Detail, "tmpfs") {
		t.Skipf("/dev/shm is not tmpfs here: %s", c.Detail)
	}
	if c.Status != api.DoctorWarn {
		t.Errorf("home on tmpfs: %+v", c)
	}
	if c := checkHome(t.TempDir()); c.Status == api.DoctorFail {
		t.Errorf("home in a temp dir: %+v", c)
	}
}
