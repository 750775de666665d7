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
