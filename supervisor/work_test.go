package supervisor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
)

// Where an agent works and what it may do: the defaults, the inheritance,
// the refusals, and the migration of agents from before.
func TestWorkDirAndPermissions(t *testing.T) {
	home := t.TempDir()
	c, _ := newCore(t, home, false)
	if _, err := c.CreateWorkspace(api.WorkspaceParams{Name: "lab"}); err != nil {
		t.Fatal(err)
	}
	proj := t.TempDir()
	sess := func(ref string) *fsstore.Session {
		t.Helper()
		return nodeOf(t, c, ref).s()
	}

	// Outside a sandbox: the directory asked for, the CLI's safe mode.
	mustCreate(t, c, api.CreateParams{Name: "dev", WorkDir: proj})
	if s := sess("dev"); s.WorkDir != proj || s.Permissions == nil || s.Permissions.Mode != fsstore.ModeDefault {
		t.Errorf("dev: work_dir %q permissions %+v", s.WorkDir, s.Permissions)
	}
	// In a sandbox: full tool permission, no work_dir.
	mustCreate(t, c, api.CreateParams{Name: "boxed", Workspace: "lab"})
	if s := sess("boxed"); s.WorkDir != "" || s.Permissions.Mode != fsstore.ModeFull {
		t.Errorf("boxed: work_dir %q permissions %+v", s.WorkDir, s.Permissions)
	}
	// Neither: a scratch directory of its own in the home.
	mustCreate(t, c, api.CreateParams{Name: "api"})
	if s := sess("api"); s.WorkDir != c.store.Layout().ScratchDir(s.ID) {
		t.Errorf("api: work_dir %q", s.WorkDir)
	}
	// Asked for explicitly.
	mustCreate(t, c, api.CreateParams{Name: "trusted", WorkDir: proj, Permissions: &fsstore.Permissions{Mode: fsstore.ModeAcceptEdits, AllowedTools: []string{"Bash(go test *)"}}})
	if p := sess("trusted").Permissions; p.Mode != fsstore.ModeAcceptEdits || len(p.AllowedTools) != 1 {
		t.Errorf("trusted: %+v", p)
	}

	// Refusals.
	for _, bad := range []struct {
		p    api.CreateParams
		want string
	}{
		{api.CreateParams{Name: "x1", WorkDir: "relative"}, "not absolute"},
		{api.CreateParams{Name: "x2", WorkDir: filepath.Join(proj, "missing")}, "no such file"},
		{api.CreateParams{Name: "x3", WorkDir: c.store.Layout().AgentsDir()}, "inside the Substrat home"},
		{api.CreateParams{Name: "x4", WorkDir: proj, Workspace: "lab"}, "not both"},
		{api.CreateParams{Name: "x5", WorkDir: proj, Permissions: &fsstore.Permissions{Mode: "yolo"}}, `permission mode "yolo"`},
	} {
		if _, err := c.CreateAgent(bad.p); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: %v, want %q", bad.p, err, bad.want)
		}
	}

	// A spawned child inherits both; into a workspace, only the setting.
	tt := newTurnTools(c, nodeOf(t, c, "trusted"), nil)
	if r := tt.CallTool(context.Background(), call("spawn_agent", "k1", map[string]string{"name": "kid", "instructions": "go"})); r.IsError {
		t.Fatal(r.Text)
	}
	if s := sess("trusted/kid"); s.WorkDir != proj || s.Permissions.Mode != fsstore.ModeAcceptEdits || s.Permissions.AllowedTools[0] != "Bash(go test *)" {
		t.Errorf("kid: work_dir %q permissions %+v", s.WorkDir, s.Permissions)
	}
	tb := newTurnTools(c, nodeOf(t, c, "boxed"), nil)
	if r := tb.CallTool(context.Background(), call("spawn_agent", "k2", map[string]string{"name": "helper", "instructions": "go"})); r.IsError {
		t.Fatal(r.Text)
	}
	if s := sess("boxed/helper"); s.Workspace != "USER/lab" || s.WorkDir != "" || s.Permissions.Mode != fsstore.ModeFull {
		t.Errorf("helper: %+v", s)
	}

	// The setting changes with an event, and a live session restarts.
	if _, err := c.SetPermissions(context.Background(), api.PermissionsParams{Ref: "dev", Mode: fsstore.ModePlan, DisallowedTools: []string{"WebFetch"}}); err != nil {
		t.Fatal(err)
	}
	if p := sess("dev").Permissions; p.Mode != fsstore.ModePlan || len(p.DisallowedTools) != 1 {
		t.Errorf("after SetPermissions: %+v", p)
	}
	if _, err := c.SetPermissions(context.Background(), api.PermissionsParams{Ref: "dev", Mode: "everything"}); err == nil {
		t.Error("a bad mode was set")
	}

	// An agent from before: no work_dir, no setting. Recovery records
	// them.
	old, err := c.store.CreateAgent(&fsstore.Session{Name: "old", Provider: "script"})
	if err != nil {
		t.Fatal(err)
	}
	old.Close()
	c2, _ := newCore(t, home, false)
	s := nodeOf(t, c2, "old").s()
	if s.WorkDir != c2.store.Layout().ScratchDir(s.ID) || s.Permissions == nil || s.Permissions.Mode != fsstore.ModeDefault {
		t.Errorf("migrated: work_dir %q permissions %+v", s.WorkDir, s.Permissions)
	}
	events, _ := os.ReadFile(c2.store.Layout().Agent(s.ID).Events())
	if !strings.Contains(string(events), `"type":"work_dir"`) || !strings.Contains(string(events), `"type":"permissions"`) {
		t.Errorf("the migration is not in the log:\n%s", events)
	}
}
