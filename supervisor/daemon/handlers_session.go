package daemon

import (
	"context"

	"github.com/substrat/substrat/supervisor/api"
)

// registerSession registers the methods of the provider sessions.
func (d *Daemon) registerSession() {
	c := d.core
	handle(d, api.MethodSessionList, func(ctx context.Context, _ struct{}, _ func(any) error) (any, error) {
		return c.Sessions(), nil
	})
	handle(d, api.MethodSessionSuspend, func(ctx context.Context, p refParams, _ func(any) error) (any, error) {
		return c.Suspend(ctx, p.Ref)
	})
	handle(d, api.MethodSessionResume, func(ctx context.Context, p refParams, _ func(any) error) (any, error) {
		return c.Resume(ctx, p.Ref)
	})
	handle(d, api.MethodSessionDelete, func(ctx context.Context, p refParams, _ func(any) error) (any, error) {
		return c.ResetSession(ctx, p.Ref)
	})
}
