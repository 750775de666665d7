package supervisor

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/permrule"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
)

// Where an agent works, and what it may do there.
//
// An agent with a workspace works in its bwrap sandbox, the workspace root
// as its working directory. Any other works in work_dir, a host directory
// the user chose at create (the CLI sends the directory it ran in), or, if
// none was named, scratch/<id> in the home; never in its own directory of
// the store. A child inherits its parent's work_dir unless it is spawned
// into a workspace.
//
// The permission setting is explicit and kept in session.json. A new
// agent gets the one asked for; a spawned child, its parent's; otherwise
// the default for where it runs: bypassPermissions (full tool permission)
// inside a sandbox, where bwrap is the boundary, and default (the CLI's
// safe mode) outside one, where only the user can give more.

// defaultPermissions is the permission setting of an agent created without
// one: full inside a sandbox, the CLI's safe mode outside.
func defaultPermissions(workspace string) *fsstore.Permissions {
	if workspace != "" {
		return &fsstore.Permissions{Mode: fsstore.ModeFull}
	}
	return &fsstore.Permissions{Mode: fsstore.ModeDefault}
}

// effectivePermissions is what a session runs with: its setting, or the
// default for where it runs (an agent from before the setting existed,
// until recovery records it).
func effectivePermissions(s *fsstore.Session) fsstore.Permissions {
	if s.Permissions != nil {
		return *s.Permissions
	}
	return *defaultPermissions(s.Workspace)
}

// placeCreate decides where a new agent works and what it may do:
// p.WorkDir and p.Permissions are set for the store. id is the new
// agent's id (for its scratch directory).
func (c *Core) placeCreate(p *api.CreateParams, parent *fsstore.Session, id string) error {
	home := c.store.Layout().Home
	switch {
	case p.Workspace != "" && p.WorkDir != "":
		return invalidParams("give a workspace or a directory, not both: an agent in a workspace works in its sandbox")
	case p.Workspace != "":
		// A git workspace copied from another home runs no agent here
		// until re-attached (package workspace).
		if w, err := c.getWorkspace(p.Workspace); err == nil {
			if err := c.ws.CheckHome(w); err != nil {
				return api.Errorf(api.CodeConflict, "%v", err)
			}
		}
	case parent != nil && p.WorkDir != "" && p.WorkDir == parent.WorkDir:
		// Inherited: where the parent works (its scratch directory too).
	case p.WorkDir != "":
		dir := filepath.Clean(p.WorkDir)
		if !filepath.IsAbs(dir) {
			return invalidParams("directory %q is not absolute", p.WorkDir)
		}
		if dir == home || strings.HasPrefix(dir, home+"/") {
			return invalidParams("directory %s is inside the Substrat home %s; an agent works in a directory of yours, never in the store", dir, home)
		}
		fi, err := c.store.FS().Stat(dir)
		if err != nil {
			return invalidParams("directory %s: %v", dir, err)
		}
		if !fi.IsDir() {
			return invalidParams("%s is not a directory", dir)
		}
		p.WorkDir = dir
	default:
		p.WorkDir = c.store.Layout().ScratchDir(id)
	}
	switch {
	case p.Limits != nil:
		if err := p.Limits.Validate(); err != nil {
			return api.Errorf(api.CodeInvalidParams, "%s", fsstore.Reason(err))
		}
		if p.Limits.IsZero() {
			p.Limits = nil
		}
	case parent != nil && parent.Limits != nil:
		l := *parent.Limits
		p.Limits = &l
	}
	switch {
	case p.Executor != "":
		if err := fsstore.ValidateExecutor(p.Executor); err != nil {
			return api.Errorf(api.CodeInvalidParams, "%s", fsstore.Reason(err))
		}
	case parent != nil:
		p.Executor = parent.Executor
	}
	switch {
	case p.Permissions != nil:
		perm := *p.Permissions
		if perm.Mode == "" {
			perm.Mode = c.newPermissions(p.Workspace).Mode
		}
		if err := perm.Validate(); err != nil {
			return api.Errorf(api.CodeInvalidParams, "%s", fsstore.Reason(err))
		}
		if err := checkRules(perm); err != nil {
			return err
		}
		p.Permissions = &perm
	case parent != nil && parent.Permissions != nil:
		p.Permissions = parent.Permissions.Clone()
	default:
		p.Permissions = c.newPermissions(p.Workspace)
	}
	return nil
}

// workDirFor returns the host directory sess's provider runs in when it
// is not sandboxed, making a scratch directory on first use.
func (c *Core) workDirFor(sess *fsstore.Session) (string, error) {
	if sess.Workspace != "" {
		return "", nil
	}
	dir := sess.WorkDir
	if dir == "" {
		dir = c.store.Layout().ScratchDir(sess.ID)
	}
	if dir == c.store.Layout().ScratchDir(sess.ID) {
		if err := c.store.EnsureDir(dir); err != nil {
			return "", err
		}
		return dir, nil
	}
	fi, err := c.store.FS().Stat(dir)
	if err != nil {
		return "", fmt.Errorf("the working directory of %s: %w (recreate it, or edit work_dir in its session.json)", sess.Name, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("the working directory of %s, %s, is not a directory", sess.Name, dir)
	}
	return dir, nil
}

// migrateWork records, for an agent created before agents had working
// directories and permission settings, the ones it runs with: its scratch
// directory and the default permissions for where it runs.
func (c *Core) migrateWork(n *node) error {
	s := n.s()
	if n.terminated() {
		return nil
	}
	var ps []fsstore.Payload // one commit for both
	if s.Workspace == "" && s.WorkDir == "" {
		ps = append(ps, fsstore.WorkDirChange{WorkDir: c.store.Layout().ScratchDir(s.ID),
			Reason: "migrated: an agent without a workspace works in a directory of its own, never in the store"})
	}
	if s.Permissions == nil {
		ps = append(ps, *c.newPermissions(s.Workspace))
	}
	if len(ps) == 0 {
		return nil
	}
	return c.commit(n, ps...)
}

// checkRules checks the rules of perm in the rule language of permrule
// (a Bash rule's words and constructs).
func checkRules(perm fsstore.Permissions) error {
	for _, r := range slices.Concat(perm.AllowedTools, perm.DisallowedTools) {
		if err := permrule.Check(r); err != nil {
			return api.Errorf(api.CodeInvalidParams, "%v", err)
		}
	}
	return nil
}

// SetPermissions changes an agent's permission setting. It takes effect
// at the agent's next session start: a live session is suspended (its
// state saved) and resumes with the new setting at the next turn.
func (c *Core) SetPermissions(ctx context.Context, p api.PermissionsParams) (api.AgentInfo, error) {
	n, err := c.hold(ctx, p.Ref)
	if err != nil {
		return api.AgentInfo{}, err
	}
	defer c.release(n)
	perm := effectivePermissions(n.s())
	if p.Mode != "" {
		perm.Mode = p.Mode
	}
	if p.AllowedTools != nil {
		perm.AllowedTools = slices.Clone(p.AllowedTools)
	}
	if p.DisallowedTools != nil {
		perm.DisallowedTools = slices.Clone(p.DisallowedTools)
	}
	if p.Approver != "" {
		perm.Approver = p.Approver
	}
	if p.ApprovalTimeout != "" {
		perm.ApprovalTimeout = p.ApprovalTimeout
	}
	if len(perm.AllowedTools) == 0 {
		perm.AllowedTools = nil
	}
	if len(perm.DisallowedTools) == 0 {
		perm.DisallowedTools = nil
	}
	if err := perm.Validate(); err != nil {
		return api.AgentInfo{}, api.Errorf(api.CodeInvalidParams, "%s", fsstore.Reason(err))
	}
	if err := checkRules(perm); err != nil {
		return api.AgentInfo{}, err
	}
	if err := c.commit(n, perm); err != nil {
		return api.AgentInfo{}, err
	}
	c.mu.Lock()
	live := n.live != nil
	c.mu.Unlock()
	if live {
		// The provider reads the setting when a session starts.
		if err := c.suspendHeld(ctx, n, "permissions changed"); err != nil {
			return api.AgentInfo{}, err
		}
	}
	c.snapshot(n)
	return c.infoOf(n), nil
}

// SetInstructions replaces an agent's instructions. Its next turn carries
// them, whatever the provider (provider.Turn.Instructions): no session
// restarts.
func (c *Core) SetInstructions(ctx context.Context, p api.InstructionsParams) (api.AgentInfo, error) {
	n, err := c.hold(ctx, p.Ref)
	if err != nil {
		return api.AgentInfo{}, err
	}
	defer c.release(n)
	text := p.Instructions
	if err := c.commit(n, fsstore.Edit{Instructions: &text}); err != nil {
		return api.AgentInfo{}, err
	}
	c.snapshot(n)
	return c.infoOf(n), nil
}

// PermissionSummary says in one line what an agent may do, for people.
func PermissionSummary(s *fsstore.Session) string {
	perm := effectivePermissions(s)
	var where string
	if s.Workspace != "" {
		where = "in the sandbox of workspace " + s.Workspace
	} else {
		where = "in " + s.WorkDir + ", no sandbox"
	}
	var what string
	switch perm.Mode {
	case fsstore.ModeFull:
		what = "full tool permission"
	case fsstore.ModeAcceptEdits:
		what = "edits allowed, other tools need permission"
	case fsstore.ModePlan:
		what = "plan mode: read only"
	case fsstore.ModeDontAsk:
		what = "only what is allowed runs; nothing asks"
	default:
		what = "the CLI's safe mode: what would need permission is refused"
	}
	out := fmt.Sprintf("%s (%s), %s", perm.Mode, what, where)
	if len(perm.AllowedTools) > 0 {
		out += "; allowed: " + strings.Join(perm.AllowedTools, ", ")
	}
	if len(perm.DisallowedTools) > 0 {
		out += "; denied: " + strings.Join(perm.DisallowedTools, ", ")
	}
	if provider.AsksApproval(provider.Permissions(perm)) && s.Provider == "claude" {
		who := "its parent"
		switch {
		case perm.Approver == fsstore.ApproverUser:
			who = "USER"
		case s.ParentID == "":
			who = "USER"
		}
		out += fmt.Sprintf("; what would need permission is asked of %s (waits %s)", who, perm.Timeout())
	}
	return out
}

// providerPermissions is the setting a provider session gets.
func providerPermissions(s *fsstore.Session) provider.Permissions {
	p := new(effectivePermissions(s))
	return *p.Clone()
}

// limitsOf is what agent s's processes run under: its limits over its
// pool's (pool_limits), over the configured defaults, field by field,
// with "none" made zero.
func (c *Core) limitsOf(s *fsstore.Session) fsstore.Limits {
	var l fsstore.Limits
	if s.Limits != nil {
		l = *s.Limits
	}
	set := c.settings()
	return l.Over(set.PoolLimits[poolOf(s)]).Over(set.Limits).Enforced()
}

// SetLimits changes an agent's resource limits (a "limits" event). They
// take effect at the agent's next session start: a live session is
// suspended (its state saved) and resumes under them at the next turn.
func (c *Core) SetLimits(ctx context.Context, p api.LimitsParams) (api.AgentInfo, error) {
	n, err := c.hold(ctx, p.Ref)
	if err != nil {
		return api.AgentInfo{}, err
	}
	defer c.release(n)
	var l fsstore.Limits
	if s := n.s(); s.Limits != nil {
		l = *s.Limits
	}
	old := l
	for _, f := range []struct {
		to   *int64
		from *int64
	}{{&l.MemoryBytes, p.MemoryBytes}, {&l.Pids, p.Pids}, {&l.CPUWeight, p.CPUWeight}} {
		if f.from != nil {
			*f.to = *f.from
		}
	}
	if err := l.Validate(); err != nil {
		return api.AgentInfo{}, api.Errorf(api.CodeInvalidParams, "%s", fsstore.Reason(err))
	}
	if l == old {
		return c.infoOf(n), nil
	}
	if err := c.commit(n, l); err != nil {
		return api.AgentInfo{}, err
	}
	c.mu.Lock()
	live := n.live != nil
	c.mu.Unlock()
	if live {
		// The provider's hooks take the limits when a session starts.
		if err := c.suspendHeld(ctx, n, "resource limits changed"); err != nil {
			return api.AgentInfo{}, err
		}
	}
	c.snapshot(n)
	return c.infoOf(n), nil
}
