package daemon

import (
	"context"

	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/rpc"
	"github.com/substrat/substrat/supervisor/workspace"
)

// registerWorkspace registers the methods of the workspaces.
func (d *Daemon) registerWorkspace() {
	c, s := d.core, d.srv
	rpc.Handle(s, api.WorkspaceCreate, func(ctx context.Context, p api.WorkspaceParams) (api.WorkspaceInfo, error) {
		w, note, err := c.CreateWorkspaceNote(p)
		if err != nil {
			return api.WorkspaceInfo{}, err
		}
		info := c.WorkspaceInfo(w)
		info.Note = note
		return info, nil
	})
	rpc.Handle(s, api.WorkspaceList, func(ctx context.Context, _ struct{}) ([]api.WorkspaceInfo, error) {
		return c.ListWorkspaces()
	})
	rpc.Handle(s, api.WorkspaceInspect, func(ctx context.Context, p api.RefParams) (api.WorkspaceInfo, error) {
		return c.InspectWorkspace(p.Ref)
	})
	rpc.Handle(s, api.WorkspaceDelete, func(ctx context.Context, p api.WorkspaceDeleteParams) (api.WorkspaceDeleteResult, error) {
		// Its copies on ssh hosts go with it: those of the hosts its
		// agents ran on, as of before the delete.
		info, ierr := c.InspectWorkspace(p.Ref)
		var hosts []string
		if ierr == nil {
			hosts = workspaceHosts(c, info.Ref)
		}
		if err := c.DeleteWorkspaceWith(p.Ref, workspace.DeleteOptions{Force: p.Force, DeleteBranch: p.DeleteBranch}); err != nil {
			return api.WorkspaceDeleteResult{}, err
		}
		if ierr == nil {
			d.host.remotes.forgetWorkspace(info.Root, hosts)
		}
		return api.WorkspaceDeleteResult{Deleted: true}, nil
	})
	rpc.Handle(s, api.WorkspaceDiff, func(ctx context.Context, p api.WorkspaceDiffParams) (api.WorkspaceDiffResult, error) {
		diff, err := c.WorkspaceDiff(p.Ref, p.Stat)
		return api.WorkspaceDiffResult{Diff: diff}, err
	})
	rpc.Handle(s, api.WorkspacePublish, func(ctx context.Context, p api.RefParams) (api.WorkspacePublishResult, error) {
		commit, err := c.WorkspacePublish(p.Ref)
		return api.WorkspacePublishResult{Commit: commit}, err
	})
	rpc.Handle(s, api.WorkspaceReattach, func(ctx context.Context, p api.RefParams) (api.WorkspaceInfo, error) {
		w, err := c.ReattachWorkspace(p.Ref)
		if err != nil {
			return api.WorkspaceInfo{}, err
		}
		return c.WorkspaceInfo(w), nil
	})
	rpc.Handle(s, api.WorkspaceLink, func(ctx context.Context, p api.LinkParams) (api.WorkspaceInfo, error) {
		w, err := c.LinkWorkspace(p)
		if err != nil {
			return api.WorkspaceInfo{}, err
		}
		return c.WorkspaceInfo(w), nil
	})
	rpc.Handle(s, api.WorkspaceUnlink, func(ctx context.Context, p api.UnlinkParams) (api.WorkspaceInfo, error) {
		w, err := c.UnlinkWorkspace(p.Workspace, p.Target)
		if err != nil {
			return api.WorkspaceInfo{}, err
		}
		return c.WorkspaceInfo(w), nil
	})
	rpc.Handle(s, api.WorkspaceView, func(ctx context.Context, p api.ViewParams) (api.WorkspaceInfo, error) {
		w, err := c.ViewWorkspace(p)
		if err != nil {
			return api.WorkspaceInfo{}, err
		}
		return c.WorkspaceInfo(w), nil
	})
}
