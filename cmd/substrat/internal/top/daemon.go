package top

import (
	"context"
	"encoding/json"
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

func (d Daemon) call(ctx context.Context, method string, params, result any) error {
	c, err := rpc.Dial(ctx, d.Socket)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Call(ctx, method, params, result)
}

// Status implements Source.
func (d Daemon) Status(ctx context.Context) (api.StatusResult, error) {
	var st api.StatusResult
	err := d.call(ctx, api.MethodDaemonStatus, nil, &st)
	return st, err
}

// Agents implements Source.
func (d Daemon) Agents(ctx context.Context, p api.ListParams) (api.ListPage, error) {
	var page api.ListPage
	err := d.call(ctx, api.MethodAgentQuery, p, &page)
	return page, err
}

// Inbox implements Source.
func (d Daemon) Inbox(ctx context.Context) ([]api.InboxMessage, error) {
	var in []api.InboxMessage
	err := d.call(ctx, api.MethodInboxList, api.InboxListParams{}, &in)
	return in, err
}

// Approvals implements Source.
func (d Daemon) Approvals(ctx context.Context) ([]api.PendingApproval, error) {
	var ap []api.PendingApproval
	err := d.call(ctx, api.MethodApprovalList, nil, &ap)
	return ap, err
}

// Recovery implements Source.
func (d Daemon) Recovery(ctx context.Context) (api.Report, error) {
	var r api.Report
	err := d.call(ctx, api.MethodDaemonRecovery, nil, &r)
	return r, err
}

// Detail implements Source.
func (d Daemon) Detail(ctx context.Context, id string, tail int) (Detail, error) {
	var det Detail
	if err := d.call(ctx, api.MethodAgentInspect, map[string]string{"ref": id}, &det.Inspect); err != nil {
		return det, err
	}
	c, err := rpc.Dial(ctx, d.Socket)
	if err != nil {
		return det, err
	}
	defer c.Close()
	err = c.Stream(ctx, api.MethodAgentEvents, map[string]any{"ref": id, "tail": tail}, func(raw json.RawMessage) error {
		var e fsstore.Event
		if err := json.Unmarshal(raw, &e); err != nil {
			return err
		}
		det.Events = append(det.Events, e)
		return nil
	}, nil)
	return det, err
}

// Watch implements Source.
func (d Daemon) Watch(ctx context.Context, fn func(Event)) error {
	c, err := rpc.Dial(ctx, d.Socket)
	if err != nil {
		return err
	}
	defer c.Close()
	err = c.Stream(ctx, api.MethodDaemonWatch, map[string]string{}, func(raw json.RawMessage) error {
		var e Event
		if err := json.Unmarshal(raw, &e); err != nil {
			return err
		}
		fn(e)
		return nil
	}, nil)
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
	ref := map[string]string{"ref": a.ID}
	switch a.Kind {
	case ActSend:
		return d.call(ctx, api.MethodAgentSend, map[string]any{"ref": a.ID, "text": a.Text}, nil)
	case ActGate, ActUngate, ActPermit:
		return d.call(ctx, api.MethodAgentGate, api.GateParams{Ref: a.ID, Op: a.Kind}, nil)
	case ActSuspend:
		return d.call(ctx, api.MethodSessionSuspend, ref, nil)
	case ActResume:
		return d.call(ctx, api.MethodSessionResume, ref, nil)
	case ActTerminate:
		return d.call(ctx, api.MethodAgentTerminate, api.TerminateParams{Ref: a.ID}, nil)
	case ActArchive:
		return d.call(ctx, api.MethodAgentArchive, ref, nil)
	case ActApprove, ActDeny:
		return d.call(ctx, api.MethodApprovalAnswer, api.AnswerParams{ID: a.ID, Allow: a.Kind == ActApprove, By: fsstore.User}, nil)
	case ActReadInbox:
		var in []api.InboxMessage
		if err := d.call(ctx, api.MethodInboxList, api.InboxListParams{}, &in); err != nil {
			return err
		}
		ids := make([]string, 0, len(in))
		for _, m := range in {
			ids = append(ids, m.ID)
		}
		return d.call(ctx, api.MethodInboxRead, api.InboxReadParams{IDs: ids}, nil)
	}
	return fmt.Errorf("unknown action %q", a.Kind)
}
