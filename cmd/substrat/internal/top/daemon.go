package top

import (
	"context"
	"fmt"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/rpc"
)

// Daemon is the Source of a running daemon, reached at its socket. Each
// call dials afresh (a Unix socket dial costs microseconds), so a daemon
// restart needs no reconnect logic beyond Watch's.
type Daemon struct {
	Socket string
}

// call makes the call m on a connection of its own.
func call[P, R any](ctx context.Context, d Daemon, m api.Method[P, R], p P) (R, error) {
	c, err := rpc.Dial(ctx, d.Socket)
	if err != nil {
		var zero R
		return zero, err
	}
	defer c.Close()
	return rpc.Call(ctx, c, m, p)
}

// Status implements Source.
func (d Daemon) Status(ctx context.Context) (api.StatusResult, error) {
	return call(ctx, d, api.DaemonStatus, struct{}{})
}

// Agents implements Source.
func (d Daemon) Agents(ctx context.Context, p api.ListParams) (api.ListPage, error) {
	return call(ctx, d, api.AgentQuery, p)
}

// Inbox implements Source.
func (d Daemon) Inbox(ctx context.Context) ([]api.InboxMessage, error) {
	return call(ctx, d, api.InboxList, api.InboxListParams{})
}

// Approvals implements Source.
func (d Daemon) Approvals(ctx context.Context) ([]api.PendingApproval, error) {
	return call(ctx, d, api.ApprovalList, struct{}{})
}

// Recovery implements Source.
func (d Daemon) Recovery(ctx context.Context) (api.Report, error) {
	r, err := call(ctx, d, api.DaemonRecovery, struct{}{})
	if r == nil {
		return api.Report{}, err
	}
	return *r, err
}

// Detail implements Source.
func (d Daemon) Detail(ctx context.Context, id string, tail int) (Detail, error) {
	var det Detail
	var err error
	if det.Inspect, err = call(ctx, d, api.AgentInspect, api.RefParams{Ref: id}); err != nil {
		return det, err
	}
	c, err := rpc.Dial(ctx, d.Socket)
	if err != nil {
		return det, err
	}
	defer c.Close()
	_, err = rpc.Stream(ctx, c, api.AgentEvents, api.EventsParams{Ref: id, Tail: tail}, func(e fsstore.Event) error {
		det.Events = append(det.Events, e)
		return nil
	})
	return det, err
}

// Watch implements Source.
func (d Daemon) Watch(ctx context.Context, fn func(Event)) error {
	c, err := rpc.Dial(ctx, d.Socket)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = rpc.Stream(ctx, c, api.DaemonWatch, api.RefParams{}, func(e api.WatchFrame) error {
		fn(e)
		return nil
	})
	if ctx.Err() != nil {
		return nil
	}
	if err == nil {
		err = fmt.Errorf("the daemon ended the watch")
	}
	return err
}

// Act implements Source.
func (d Daemon) Act(ctx context.Context, a Action) error {
	ref := api.RefParams{Ref: a.ID}
	var err error
	switch a.Kind {
	case ActSend:
		_, err = stream(ctx, d, api.AgentSend, api.SendMessageParams{Ref: a.ID, Text: a.Text})
	case ActGate, ActUngate, ActPermit:
		_, err = call(ctx, d, api.AgentGate, api.GateParams{Ref: a.ID, Op: a.Kind})
	case ActSuspend:
		_, err = call(ctx, d, api.SessionSuspend, ref)
	case ActResume:
		_, err = call(ctx, d, api.SessionResume, ref)
	case ActTerminate:
		_, err = call(ctx, d, api.AgentTerminate, api.TerminateParams{Ref: a.ID})
	case ActArchive:
		_, err = call(ctx, d, api.AgentArchive, ref)
	case ActApprove, ActDeny:
		_, err = call(ctx, d, api.ApprovalAnswer, api.AnswerParams{ID: a.ID, Allow: a.Kind == ActApprove, By: fsstore.User})
	case ActReadInbox:
		in, err := call(ctx, d, api.InboxList, api.InboxListParams{})
		if err != nil {
			return err
		}
		ids := make([]string, 0, len(in))
		for _, m := range in {
			ids = append(ids, m.ID)
		}
		_, err = call(ctx, d, api.InboxRead, api.InboxReadParams{IDs: ids})
		return err
	default:
		return fmt.Errorf("unknown action %q", a.Kind)
	}
	return err
}

// stream makes the streaming call m on a connection of its own, and
// drops its frames.
func stream[P, F, R any](ctx context.Context, d Daemon, m api.StreamMethod[P, F, R], p P) (R, error) {
	c, err := rpc.Dial(ctx, d.Socket)
	if err != nil {
		var zero R
		return zero, err
	}
	defer c.Close()
	return rpc.Stream(ctx, c, m, p, nil)
}
