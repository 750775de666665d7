package daemon

import (
	"context"

	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/rpc"
)

// registerSession registers the methods of the provider sessions.
func (d *Daemon) registerSession() {
	c, s := d.core, d.srv
	rpc.Handle(s, api.SessionList, func(ctx context.Context, _ struct{}) ([]api.SessionInfo, error) {
		return c.Sessions(), nil
	})
	rpc.Handle(s, api.SessionSuspend, func(ctx context.Context, p api.RefParams) (api.AgentInfo, error) {
		return c.Suspend(ctx, p.Ref)
	})
	rpc.Handle(s, api.SessionResume, func(ctx context.Context, p api.RefParams) (api.AgentInfo, error) {
		return c.Resume(ctx, p.Ref)
	})
	rpc.Handle(s, api.SessionDelete, func(ctx context.Context, p api.RefParams) (api.AgentInfo, error) {
		return c.ResetSession(ctx, p.Ref)
	})
}
