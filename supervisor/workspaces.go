package supervisor

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor/workspace"
)

// A workspace ref is "NAME" (a USER workspace) or "SCOPE/NAME", where SCOPE
// is USER or an agent id. session.json holds the canonical "SCOPE/NAME".

// splitWorkspaceRef parses a workspace ref; a scope given as an agent
// name or path is resolved.
func (c *Core) splitWorkspaceRef(ref string) (scope, name string, err error) {
	ref = strings.TrimSpace(ref)
	i := strings.LastIndex(ref, "/")
	if i < 0 {
		return workspace.UserScope, ref, nil
	}
	scope, name = ref[:i], ref[i+1:]
	if scope != workspace.UserScope && !fsstore.IsID(scope) {
		c.mu.Lock()
		n, err := c.resolveLocked(scope)
		c.mu.Unlock()
		if err != nil {
			return "", "", err
		}
		scope = n.id()
	}
	return scope, name, nil
}

// workspaceErr turns a workspace store error into an RPC error.
func workspaceErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, workspace.ErrNotFound):
		return api.Errorf(api.CodeNotFound, "%v", err)
	case errors.Is(err, workspace.ErrExists), errors.Is(err, workspace.ErrInUse):
		return api.Errorf(api.CodeConflict, "%v", err)
	case errors.Is(err, workspace.ErrInvalid), errors.Is(err, workspace.ErrEscape), errors.Is(err, bwrap.ErrLinkRefused):
		return api.Errorf(api.CodeInvalidParams, "%v", err)
	}
	return storeErr(err)
}

// getWorkspace loads a workspace by ref.
func (c *Core) getWorkspace(ref string) (*workspace.Workspace, error) {
	scope, name, err := c.splitWorkspaceRef(ref)
	if err != nil {
		return nil, err
	}
	w, err := c.ws.Get(scope, name)
	return w, workspaceErr(err)
}

// CreateWorkspace makes a new, empty workspace.
func (c *Core) CreateWorkspace(p api.WorkspaceParams) (*workspace.Workspace, error) {
	w, _, err := c.CreateWorkspaceNote(p)
	return w, err
}

// CreateWorkspaceNote is CreateWorkspace, and says what a user may not
// expect of a git workspace (the repository's uncommitted changes are
// not in it), or "".
func (c *Core) CreateWorkspaceNote(p api.WorkspaceParams) (*workspace.Workspace, string, error) {
	scope := workspace.UserScope
	if p.Scope != "" && p.Scope != workspace.UserScope {
		id, err := c.Resolve(p.Scope)
		if err != nil {
			return nil, "", err
		}
		scope = id
	}
	ws := workspace.Workspace{Scope: scope, Name: p.Name, NetworkAccess: p.Network}
	note := ""
	if p.Git != "" {
		g, n, err := c.gitSpec(p.Name, p.Git, p.Branch, p.Base)
		if err != nil {
			return nil, "", err
		}
		ws.Git, note = g, n
		if note != "" {
			c.log.Info("workspace "+p.Name+": "+note, "workspace", p.Name)
		}
	} else if p.Branch != "" || p.Base != "" {
		return nil, "", invalidParams("--branch and --base are for a git workspace (--git REPO)")
	}
	w, err := c.ws.Create(ws)
	return w, note, workspaceErr(err)
}

// WorkspaceInfo describes a workspace as the CLI and the tools show it.
func (c *Core) WorkspaceInfo(w *workspace.Workspace) api.WorkspaceInfo {
	root := c.store.Layout().WorkspaceRoot(w.Scope, w.Name)
	if spec, err := w.Spec(c.store.Layout()); err == nil {
		root = spec.Root.Host
	}
	return api.WorkspaceInfo{Workspace: w.Wire(), Ref: w.Ref(), Root: root, Users: c.workspaceUsers(w.Scope, w.Name)}
}

// ListWorkspaces lists every workspace.
func (c *Core) ListWorkspaces() ([]api.WorkspaceInfo, error) {
	ws, err := c.ws.List()
	if err != nil && ws == nil {
		return nil, workspaceErr(err)
	}
	out := []api.WorkspaceInfo{}
	for _, w := range ws {
		out = append(out, c.WorkspaceInfo(w))
	}
	return out, nil
}

// InspectWorkspace returns one workspace.
func (c *Core) InspectWorkspace(ref string) (api.WorkspaceInfo, error) {
	w, err := c.getWorkspace(ref)
	if err != nil {
		return api.WorkspaceInfo{}, err
	}
	return c.WorkspaceInfo(w), nil
}

// workspaceUsers names the live agents whose workspace is scope/name.
func (c *Core) workspaceUsers(scope, name string) []string {
	ref := scope + "/" + name
	c.mu.Lock()
	defer c.mu.Unlock()
	var users []string
	for _, n := range c.nodes {
		if n.s().Workspace == ref && !n.terminated() {
			users = append(users, c.pathLocked(n))
		}
	}
	slices.Sort(users)
	return users
}

// DeleteWorkspace removes a workspace no live agent uses.
func (c *Core) DeleteWorkspace(ref string) error {
	return c.DeleteWorkspaceWith(ref, workspace.DeleteOptions{})
}

// DeleteWorkspaceWith is DeleteWorkspace with the options of a git
// workspace (force past uncommitted work; delete its branch too).
func (c *Core) DeleteWorkspaceWith(ref string, opts workspace.DeleteOptions) error {
	scope, name, err := c.splitWorkspaceRef(ref)
	if err != nil {
		return err
	}
	return workspaceErr(c.ws.DeleteWith(scope, name, c.workspaceUsers, opts))
}

// ReattachWorkspace makes a git workspace copied from another home (a
// backup, restored) this home's: git work on it is allowed again, and
// this home takes its branch over in the repository.
func (c *Core) ReattachWorkspace(ref string) (*workspace.Workspace, error) {
	scope, name, err := c.splitWorkspaceRef(ref)
	if err != nil {
		return nil, err
	}
	w, err := c.ws.Reattach(scope, name)
	return w, workspaceErr(err)
}

// LinkWorkspace binds a host directory into a workspace (a user's act: any
// host path the user names).
func (c *Core) LinkWorkspace(p api.LinkParams) (*workspace.Workspace, error) {
	scope, name, err := c.splitWorkspaceRef(p.Workspace)
	if err != nil {
		return nil, err
	}
	if p.Mode == "" {
		p.Mode = workspace.ModeRO
	}
	if !filepath.IsAbs(p.Source) {
		return nil, invalidParams("source %q must be an absolute host path", p.Source)
	}
	src, err := workspace.ResolveHostPath(p.Source)
	if err != nil {
		return nil, workspaceErr(err)
	}
	w, err := c.ws.Link(scope, name, workspace.Link{HostPath: src, MountPath: p.Target, Mode: p.Mode})
	return w, workspaceErr(err)
}

// UnlinkWorkspace removes a link.
func (c *Core) UnlinkWorkspace(ref, target string) (*workspace.Workspace, error) {
	scope, name, err := c.splitWorkspaceRef(ref)
	if err != nil {
		return nil, err
	}
	w, err := c.ws.Unlink(scope, name, target)
	return w, workspaceErr(err)
}

// ViewWorkspace makes a workspace whose root is another's root (or a
// directory of it), read-only unless asked otherwise.
func (c *Core) ViewWorkspace(p api.ViewParams) (*workspace.Workspace, error) {
	sscope, sname, err := c.splitWorkspaceRef(p.Source)
	if err != nil {
		return nil, err
	}
	scope := workspace.UserScope
	if p.Scope != "" && p.Scope != workspace.UserScope {
		if scope, err = c.Resolve(p.Scope); err != nil {
			return nil, err
		}
	}
	if p.Mode == "" {
		p.Mode = workspace.ModeRO
	}
	w, err := c.ws.CreateView(scope, p.Name, workspace.View{SourceScope: sscope, SourceName: sname, Subdir: p.Subdir, Mode: p.Mode})
	return w, workspaceErr(err)
}

// agentSpec returns the sandbox of an agent, or ok false if it has no
// workspace (it then runs unsandboxed, as the user chose).
// AgentSpec returns the sandbox of an agent in a workspace, as bwrap
// binds it (the daemon's host wraps provider processes in it).
func (c *Core) AgentSpec(sess *fsstore.Session) (bwrap.Spec, error) {
	spec, _, _, err := c.agentSpec(sess)
	return spec, err
}

// AgentWorkspace is AgentSpec with the workspace it is of (nil, with an
// empty spec, for an agent without one).
func (c *Core) AgentWorkspace(sess *fsstore.Session) (bwrap.Spec, *workspace.Workspace, error) {
	spec, w, _, err := c.agentSpec(sess)
	return spec, w, err
}

func (c *Core) agentSpec(sess *fsstore.Session) (spec bwrap.Spec, w *workspace.Workspace, ok bool, err error) {
	if sess.Workspace == "" {
		return bwrap.Spec{}, nil, false, nil
	}
	scope, name, _ := strings.Cut(sess.Workspace, "/")
	w, err = c.ws.Get(scope, name)
	if err != nil {
		return bwrap.Spec{}, nil, false, fmt.Errorf("workspace %s of %s: %w", sess.Workspace, sess.Name, err)
	}
	spec, err = w.Spec(c.store.Layout())
	return spec, w, err == nil, err
}

// resolveAgentWorkspace turns the workspace an agent names (for itself or
// for a child) into a canonical ref it may use: a workspace of its own
// scope, its own workspace, or a USER workspace when it has none.
func (c *Core) resolveAgentWorkspace(n *node, ref string) (string, error) {
	if ref == "" {
		return "", nil
	}
	own := n.s().Workspace
	var scope, name string
	if strings.Contains(ref, "/") {
		var err error
		if scope, name, err = c.splitWorkspaceRef(ref); err != nil {
			return "", err
		}
	} else {
		scope, name = n.id(), ref
		if _, err := c.ws.Get(scope, name); err != nil {
			if own != "" && strings.HasSuffix(own, "/"+ref) {
				return own, nil
			}
			return "", fmt.Errorf("no workspace %q in your scope; create_workspace makes one", ref)
		}
	}
	canon := scope + "/" + name
	if canon != own && scope != n.id() {
		return "", fmt.Errorf("workspace %s is not yours to use: use your own workspace or one you created", canon)
	}
	if _, err := c.ws.Get(scope, name); err != nil {
		return "", workspaceErr(err)
	}
	return canon, nil
}

// grants lists the host paths an agent's own workspace makes visible, and
// maps a path as the agent sees it (inside its sandbox) to the host.
func (c *Core) grants(n *node) ([]bwrap.Mount, error) {
	spec, _, ok, err := c.agentSpec(n.s())
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("you have no workspace, so you can grant nothing; ask USER to link it (substrat workspace link)")
	}
	return spec.Grants(), nil
}

func hostPath(grants []bwrap.Mount, p string) string {
	p = filepath.Clean(p)
	for _, g := range grants {
		if p == g.Target || strings.HasPrefix(p, g.Target+"/") {
			return g.Host + strings.TrimPrefix(p, g.Target)
		}
	}
	return p
}

func workspaceTools() []tool {
	return []tool{
		newTool("list_workspaces", "List the workspaces you can use: yours, the ones you created, and USER's.", (*turnTools).listWorkspaces),
		newTool("create_workspace", "Create an empty workspace in your scope (network only if yours has network).", (*turnTools).createWorkspace),
		newTool("delete_workspace", "Delete a workspace of your scope that no live agent uses.", (*turnTools).deleteWorkspace),
		newTool("link_dir", "Bind a directory your own workspace grants (a path as you see it) into a workspace of your scope.", (*turnTools).linkDir),
		newTool("unlink_dir", "Remove a link from a workspace of your scope.", (*turnTools).unlinkDir),
		newTool("workspace_diff", "Show what a git workspace (a child's, or your own) changed on its branch since it began, committed and not.",
			(*turnTools).workspaceDiff),
		newTool("link_from", "Bind a directory of another workspace you can use into a workspace of your scope.", (*turnTools).linkFrom),
	}
}

func (t *turnTools) ownScope(name string) (*workspace.Workspace, error) {
	w, err := t.c.ws.Get(t.n.id(), name)
	if err != nil {
		return nil, fmt.Errorf("no workspace %q in your scope", name)
	}
	return w, nil
}

func (t *turnTools) listWorkspaces(ctx context.Context, call provider.ToolCall, a noArgs) (string, error) {
	all, _ := t.c.ws.List()
	var out []api.WorkspaceInfo
	for _, w := range all {
		if w.Scope == t.n.id() || w.Ref() == t.n.s().Workspace || (w.Scope == workspace.UserScope && t.n.s().Workspace == "") {
			out = append(out, t.c.WorkspaceInfo(w))
		}
	}
	if len(out) == 0 {
		return "no workspaces", nil
	}
	return toolJSON(out)
}

func (t *turnTools) createWorkspace(ctx context.Context, call provider.ToolCall, a createWorkspaceArgs) (string, error) {
	if a.NetworkAccess {
		if _, own, ok, err := t.c.agentSpec(t.n.s()); err != nil || (ok && !own.NetworkAccess) {
			return "", fmt.Errorf("your workspace has no network access, so you cannot grant it")
		}
	}
	w, err := t.c.ws.Create(workspace.Workspace{Scope: t.n.id(), Name: a.Name, NetworkAccess: a.NetworkAccess})
	if err != nil {
		return "", workspaceErr(err)
	}
	return "created workspace " + w.Ref(), nil
}

func (t *turnTools) deleteWorkspace(ctx context.Context, call provider.ToolCall, a deleteWorkspaceArgs) (string, error) {
	if _, err := t.ownScope(a.Name); err != nil {
		return "", err
	}
	if err := t.c.ws.Delete(t.n.id(), a.Name, t.c.workspaceUsers); err != nil {
		return "", workspaceErr(err)
	}
	return "deleted workspace " + a.Name, nil
}

func (t *turnTools) linkDir(ctx context.Context, call provider.ToolCall, a linkDirArgs) (string, error) {
	if a.Mode == "" {
		a.Mode = workspace.ModeRO
	}
	if _, err := t.ownScope(a.Workspace); err != nil {
		return "", err
	}
	if !filepath.IsAbs(a.Source) || slices.Contains(strings.Split(a.Source, "/"), "..") {
		return "", fmt.Errorf("source %q must be an absolute path without '..'", a.Source)
	}
	grants, err := t.c.grants(t.n)
	if err != nil {
		return "", err
	}
	resolved, err := bwrap.CheckLink(grants, hostPath(grants, a.Source), a.Mode == workspace.ModeRW)
	if err != nil {
		return "", err
	}
	w, err := t.c.ws.Link(t.n.id(), a.Workspace, workspace.Link{HostPath: resolved, MountPath: a.Target, Mode: string(a.Mode)})
	if err != nil {
		return "", workspaceErr(err)
	}
	return fmt.Sprintf("linked %s at %s (%s) in %s", a.Source, w.Links[len(w.Links)-1].MountPath, a.Mode, a.Workspace), nil
}

func (t *turnTools) unlinkDir(ctx context.Context, call provider.ToolCall, a unlinkDirArgs) (string, error) {
	if _, err := t.ownScope(a.Workspace); err != nil {
		return "", err
	}
	if _, err := t.c.ws.Unlink(t.n.id(), a.Workspace, a.Target); err != nil {
		return "", workspaceErr(err)
	}
	target, _ := workspace.ResolveTarget(a.Target)
	return "unlinked " + target, nil
}

func (t *turnTools) linkFrom(ctx context.Context, call provider.ToolCall, a linkFromArgs) (string, error) {
	if a.Mode == "" {
		a.Mode = workspace.ModeRO
	}
	if _, err := t.ownScope(a.Workspace); err != nil {
		return "", err
	}
	ref, err := t.c.resolveAgentWorkspace(t.n, a.SourceWorkspace)
	if err != nil {
		return "", err
	}
	scope, name, _ := strings.Cut(ref, "/")
	src, err := t.c.ws.Get(scope, name)
	if err != nil {
		return "", workspaceErr(err)
	}
	spec, err := src.Spec(t.c.store.Layout())
	if err != nil {
		return "", workspaceErr(err)
	}
	if filepath.IsAbs(a.Subdir) || slices.Contains(strings.Split(a.Subdir, "/"), "..") {
		return "", fmt.Errorf("subdir %q must be relative, without '..'", a.Subdir)
	}
	root := spec.Grants()[:1]
	resolved, err := bwrap.CheckLink(root, filepath.Join(spec.Root.Host, a.Subdir), a.Mode == workspace.ModeRW)
	if err != nil {
		return "", err
	}
	w, err := t.c.ws.Link(t.n.id(), a.Workspace, workspace.Link{HostPath: resolved, MountPath: a.Target, Mode: string(a.Mode)})
	if err != nil {
		return "", workspaceErr(err)
	}
	return fmt.Sprintf("linked %s:%s at %s (%s) in %s", ref, a.Subdir, w.Links[len(w.Links)-1].MountPath, a.Mode, a.Workspace), nil
}

// createWorkspaceArgs are the arguments of create_workspace.
type createWorkspaceArgs struct {
	Name          string `json:"name"`
	NetworkAccess bool   `json:"network_access,omitempty"`
}

// deleteWorkspaceArgs are the arguments of delete_workspace.
type deleteWorkspaceArgs struct {
	Name string `json:"name"`
}

// linkDirArgs are the arguments of link_dir.
type linkDirArgs struct {
	Workspace string   `json:"workspace"`
	Source    string   `json:"source"`
	Target    string   `json:"target" jsonschema:"where it appears in the sandbox: absolute, or relative to /workspace"`
	Mode      linkMode `json:"mode,omitempty"`
}

// linkMode is how a link is bound: "ro" (the default) or "rw".
type linkMode string

// unlinkDirArgs are the arguments of unlink_dir.
type unlinkDirArgs struct {
	Workspace string `json:"workspace"`
	Target    string `json:"target"`
}

// linkFromArgs are the arguments of link_from.
type linkFromArgs struct {
	Workspace       string   `json:"workspace"`
	SourceWorkspace string   `json:"source_workspace"`
	Subdir          string   `json:"subdir,omitempty"`
	Target          string   `json:"target"`
	Mode            linkMode `json:"mode,omitempty"`
}
