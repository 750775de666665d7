package daemon

import (
	"context"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/rpc"
)

// registerInbox registers the methods of USER's inbox and the approval requests.
func (d *Daemon) registerInbox() {
	c, s := d.core, d.srv
	rpc.Handle(s, api.ApprovalAnswer, func(ctx context.Context, p api.AnswerParams) (fsstore.Approval, error) {
		p.By = fsstore.User // the socket is USER's; agents answer with their approve tool
		return c.Answer(ctx, p)
	})
	rpc.Handle(s, api.ApprovalList, func(ctx context.Context, _ struct{}) ([]api.PendingApproval, error) {
		return c.PendingApprovals(), nil
	})
	rpc.Handle(s, api.ApprovalShow, func(ctx context.Context, p api.ShowApprovalParams) (api.ApprovalDetail, error) {
		return c.ShowApproval(p.ID)
	})
	rpc.HandleStream(s, api.InboxFollow, d.follow)
	rpc.Handle(s, api.InboxList, func(ctx context.Context, p api.InboxListParams) ([]api.InboxMessage, error) {
		return c.UserInbox(p.All)
	})
	rpc.Handle(s, api.InboxRead, func(ctx context.Context, p api.InboxReadParams) (api.InboxReadResult, error) {
		n, err := c.MarkUserRead(p.IDs)
		return api.InboxReadResult{Read: n}, err
	})
}
