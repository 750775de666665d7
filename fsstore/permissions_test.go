package fsstore

import (
	"errors"
	"strings"
	"testing"
)

// The permission setting and the working directory are checked, replayed
// from their events, and deep-copied.
func TestPermissionsAndWorkDir(t *testing.T) {
	base := &Session{Version: Version, ID: idA, Name: "w", Provider: "claude", WorkDir: "/home/u/proj",
		Permissions: &Permissions{Mode: ModeDefault}, AgentState: AgentIdle, SessionState: SessionCreated, CreatedAt: epoch, UpdatedAt: epoch}
	s, err := Apply(nil, mustEvent(1, epoch, EvCreated, base))
	if err != nil {
		t.Fatal(err)
	}
	p := Permissions{Mode: ModeAcceptEdits, AllowedTools: []string{"Bash(git *)"}, DisallowedTools: []string{"WebFetch"}}
	if s, err = Apply(s, mustEvent(2, epoch, EvPermissions, p)); err != nil {
		t.Fatal(err)
	}
	if !s.Permissions.Equal(&p) {
		t.Fatalf("after the permissions event: %+v", s.Permissions)
	}
	if s, err = Apply(s, mustEvent(3, epoch, EvWorkDir, WorkDirChange{WorkDir: "/srv/x"})); err != nil || s.WorkDir != "/srv/x" {
		t.Fatalf("after the work_dir event: %q, %v", s.WorkDir, err)
	}
	full := Permissions{Mode: ModeFull}
	if s, err = Apply(s, mustEvent(4, epoch, EvEdited, Edit{Permissions: &full})); err != nil || s.Permissions.Mode != ModeFull || s.Permissions.AllowedTools != nil {
		t.Fatalf("after a hand edit: %+v, %v", s.Permissions, err)
	}
	c := s.Clone()
	c.Permissions.Mode = ModePlan
	if s.Permissions.Mode != ModeFull {
		t.Fatal("Clone shares the permissions")
	}
	// History only: the snapshot does not change.
	if s2, err := Apply(s, mustEvent(5, epoch, EvToolDenied, ToolDenied{Tool: "Write", Reason: "outside"})); err != nil || !s2.Permissions.Equal(s.Permissions) {
		t.Fatalf("tool_denied changed the session: %v", err)
	}

	for _, bad := range []struct {
		edit func(*Session)
		want string
	}{
		{func(s *Session) { s.Permissions = &Permissions{Mode: "yolo"} }, `permission mode "yolo" is not one of default, acceptEdits, plan, dontAsk, bypassPermissions`},
		{func(s *Session) { s.Permissions = &Permissions{Mode: ModeDefault, AllowedTools: []string{" "}} }, "tool rule"},
		{func(s *Session) { s.Permissions = &Permissions{Mode: ModeDefault, DisallowedTools: []string{"a\nb"}} }, "control character"},
		{func(s *Session) { s.WorkDir = "relative/dir" }, "not an absolute, clean path"},
		{func(s *Session) { s.WorkDir = "/a/../b" }, "not an absolute, clean path"},
	} {
		c := s.Clone()
		bad.edit(c)
		if err := c.Validate(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Validate: %v, want %q", err, bad.want)
		}
	}
	if _, err := Apply(s, mustEvent(6, epoch, EvPermissions, Permissions{Mode: "yolo"})); !errors.Is(err, ErrInvalid) {
		t.Errorf("a permissions event with a bad mode replayed: %v", err)
	}
}

// New names may not imitate what routing and ids already mean, hide
// characters, or mix scripts.
func TestCheckNewName(t *testing.T) {
	for _, ok := range []string{"lead", "worker-1", "w_2.x", "Ärger", "作業者", "δοκιμή", "v1.2"} {
		if err := CheckNewName(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for bad, why := range map[string]string{
		"USER":                                 "reserved",
		"user":                                 "reserved",
		"System":                               "reserved",
		"parent":                               "reserved",
		"019a6f1e-7c2b-7d3e-9a1b-2c3d4e5f6a7b": "UUID",
		"019A6F1E7C2B7D3E9A1B2C3D4E5F6A7B":     "UUID",
		"lead\u200b":                           "invisible",
		"\u202eevil":                           "direction-changing",
		"p\u0430ypal":                          "mixes Latin and Cyrillic",
		"a b":                                  "control or space",
	} {
		err := CheckNewName(bad)
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: %v, want %q", bad, err, why)
		}
		if ValidateName(bad) == nil && why == "reserved" {
			continue // still loads if already on disk
		}
	}
}
