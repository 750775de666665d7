package daemon

import (
	"context"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
)

// registerInbox registers the methods of USER's inbox and the approval requests.
func (d *Daemon) registerInbox() {
	c := d.core
	handle(d, api.MethodApprovalAnswer, func(ctx context.Context, p api.AnswerParams, _ func(any) error) (any, error) {
		p.By = fsstore.User // the socket is USER's; agents answer with their approve tool
		return c.Answer(ctx, p)
	})
	handle(d, api.MethodApprovalList, func(ctx context.Context, _ struct{}, _ func(any) error) (any, error) {
		return c.PendingApprovals(), nil
	})
	handle(d, api.MethodApprovalShow, func(ctx context.Context, p api.ShowApprovalParams, _ func(any) error) (any, error) {
		return c.ShowApproval(p.ID)
	})
	handle(d, api.MethodInboxFollow, d.follow)
	handle(d, api.MethodInboxList, func(ctx context.Context, p api.InboxListParams, _ func(any) error) (any, error) {
		return c.UserInbox(p.All)
	})
	handle(d, api.MethodInboxRead, func(ctx context.Context, p api.InboxReadParams, _ func(any) error) (any, error) {
		n, err := c.MarkUserRead(p.IDs)
		return api.InboxReadResult{Read: n}, err
	})
}
