package daemon

import (
	"context"

	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/workspace"
)

// registerWorkspace registers the methods of the workspaces.
func (d *Daemon) registerWorkspace() {
	c := d.core
	handle(d, api.MethodWorkspaceCreate, func(ctx context.Context, p api.WorkspaceParams, _ func(any) error) (any, error) {
		w, note, err := c.CreateWorkspaceNote(p)
		if err != nil {
			return nil, err
		}
		info := c.WorkspaceInfo(w)
		info.Note = note
		return info, nil
	})
	handle(d, api.MethodWorkspaceList, func(ctx context.Context, _ struct{}, _ func(any) error) (any, error) {
		return c.ListWorkspaces()
	})
	handle(d, api.MethodWorkspaceInspect, func(ctx context.Context, p refParams, _ func(any) error) (any, error) {
		return c.InspectWorkspace(p.Ref)
	})
	handle(d, api.MethodWorkspaceDelete, func(ctx context.Context, p api.WorkspaceDeleteParams, _ func(any) error) (any, error) {
		return map[string]bool{"deleted": true}, c.DeleteWorkspaceWith(p.Ref, workspace.DeleteOptions{Force: p.Force, DeleteBranch: p.DeleteBranch})
	})
	handle(d, api.MethodWorkspaceDiff, func(ctx context.Context, p api.WorkspaceDiffParams, _ func(any) error) (any, error) {
		diff, err := c.WorkspaceDiff(p.Ref, p.Stat)
		return map[string]string{"diff": diff}, err
	})
	handle(d, api.MethodWorkspacePublish, func(ctx context.Context, p refParams, _ func(any) error) (any, error) {
		commit, err := c.WorkspacePublish(p.Ref)
		return map[string]string{"commit": commit}, err
	})
	handle(d, api.MethodWorkspaceReattach, func(ctx context.Context, p refParams, _ func(any) error) (any, error) {
		w, err := c.ReattachWorkspace(p.Ref)
		if err != nil {
			return nil, err
		}
		return c.WorkspaceInfo(w), nil
	})
	handle(d, api.MethodWorkspaceLink, func(ctx context.Context, p api.LinkParams, _ func(any) error) (any, error) {
		w, err := c.LinkWorkspace(p)
		if err != nil {
			return nil, err
		}
		return c.WorkspaceInfo(w), nil
	})
	handle(d, api.MethodWorkspaceUnlink, func(ctx context.Context, p struct {
		Workspace string `json:"workspace"`
		Target    string `json:"target"`
	}, _ func(any) error) (any, error) {
		w, err := c.UnlinkWorkspace(p.Workspace, p.Target)
		if err != nil {
			return nil, err
		}
		return c.WorkspaceInfo(w), nil
	})
	handle(d, api.MethodWorkspaceView, func(ctx context.Context, p api.ViewParams, _ func(any) error) (any, error) {
		w, err := c.ViewWorkspace(p)
		if err != nil {
			return nil, err
		}
		return c.WorkspaceInfo(w), nil
	})
}
