package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"os"

	"github.com/substrat/substrat/supervisor"
	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
)

// decode unmarshals params strictly into v.
func decode(params json.RawMessage, v any) error {
	if len(bytes.TrimSpace(params)) == 0 || string(params) == "null" {
		params = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return api.Errorf(api.CodeInvalidParams, "invalid params: %v", err)
	}
	return nil
}

// handle registers a method whose params decode into P.
func handle[P any](d *Daemon, method string, f func(ctx context.Context, p P, send func(any) error) (any, error)) {
	d.srv.Handle(method, func(ctx context.Context, raw json.RawMessage, send func(any) error) (any, error) {
		var p P
		if err := decode(raw, &p); err != nil {
			return nil, err
		}
		return f(ctx, p, send)
	})
}

type refParams struct {
	Ref string `json:"ref"`
}

// eventsParams is agent.events: every event, or with Tail > 0 the last
// Tail of them.
type eventsParams struct {
	Ref  string `json:"ref"`
	Tail int    `json:"tail,omitempty"`
}

func (d *Daemon) register() {
	c := d.core
	handle(d, "daemon.status", func(ctx context.Context, _ struct{}, _ func(any) error) (any, error) {
		st := c.Status()
		st.Pid, st.Home, st.Version, st.StartedAt, st.MaxSlots = os.Getpid(), d.store.Layout().Home, d.opts.Version, d.started.UTC(), d.opts.MaxSlots
		return st, nil
	})
	handle(d, "daemon.stop", func(ctx context.Context, _ struct{}, _ func(any) error) (any, error) {
		d.requestStop()
		return map[string]bool{"stopping": true}, nil
	})
	handle(d, "daemon.recovery", func(ctx context.Context, _ struct{}, _ func(any) error) (any, error) {
		return d.report, nil
	})
	handle(d, "agent.create", func(ctx context.Context, p api.CreateParams, _ func(any) error) (any, error) {
		return c.CreateAgent(p)
	})
	handle(d, "agent.list", func(ctx context.Context, _ struct{}, _ func(any) error) (any, error) {
		l := c.List()
		if l == nil {
			l = []api.AgentInfo{}
		}
		return l, nil
	})
	handle(d, "agent.inspect", func(ctx context.Context, p refParams, _ func(any) error) (any, error) {
		return c.Inspect(p.Ref)
	})
	handle(d, "agent.send", func(ctx context.Context, p struct {
		Ref  string `json:"ref"`
		Text string `json:"text"`
		Wait bool   `json:"wait"`
	}, send func(any) error) (any, error) {
		id, err := c.Resolve(p.Ref)
		if err != nil {
			return nil, err
		}
		if !p.Wait {
			m, err := c.Send(api.SendParams{To: id, Text: p.Text})
			if err != nil {
				return nil, err
			}
			return api.SendResult{MessageID: m.ID}, nil
		}
		sub := c.Subscribe(id)
		defer sub.Close()
		m, outcome, cancel, err := c.SendAndAwait(api.SendParams{To: id, Text: p.Text})
		if err != nil {
			return nil, err
		}
		defer cancel()
		send(map[string]string{"type": "sent", "message_id": m.ID})
		return waitTurn(ctx, sub, outcome, api.SendResult{MessageID: m.ID}, send)
	})
	handle(d, "agent.attach", func(ctx context.Context, p refParams, send func(any) error) (any, error) {
		id, err := c.Resolve(p.Ref)
		if err != nil {
			return nil, err
		}
		return stream(ctx, c.Subscribe(id), send)
	})
	handle(d, "daemon.watch", func(ctx context.Context, p refParams, send func(any) error) (any, error) {
		id := ""
		if p.Ref != "" {
			var err error
			if id, err = c.Resolve(p.Ref); err != nil {
				return nil, err
			}
		}
		return stream(ctx, c.Subscribe(id), send)
	})
	handle(d, "agent.events", func(ctx context.Context, p eventsParams, send func(any) error) (any, error) {
		count, err := c.Events(p.Ref, p.Tail, func(e fsstore.Event) error { return send(e) })
		if err != nil {
			return nil, err
		}
		return map[string]int{"events": count}, nil
	})
	handle(d, "agent.terminate", func(ctx context.Context, p api.TerminateParams, _ func(any) error) (any, error) {
		return c.Terminate(ctx, p)
	})
	handle(d, "agent.archive", func(ctx context.Context, p refParams, _ func(any) error) (any, error) {
		return c.Archive(ctx, p.Ref)
	})
	handle(d, "agent.permissions", func(ctx context.Context, p api.PermissionsParams, _ func(any) error) (any, error) {
		return c.SetPermissions(ctx, p)
	})
	handle(d, "session.list", func(ctx context.Context, _ struct{}, _ func(any) error) (any, error) {
		return c.Sessions(), nil
	})
	handle(d, "session.suspend", func(ctx context.Context, p refParams, _ func(any) error) (any, error) {
		return c.Suspend(ctx, p.Ref)
	})
	handle(d, "session.resume", func(ctx context.Context, p refParams, _ func(any) error) (any, error) {
		return c.Resume(ctx, p.Ref)
	})
	handle(d, "session.delete", func(ctx context.Context, p refParams, _ func(any) error) (any, error) {
		return c.ResetSession(ctx, p.Ref)
	})
	handle(d, "agent.budget", func(ctx context.Context, p struct {
		Ref     string  `json:"ref"`
		Tokens  int64   `json:"tokens"`
		CostUSD float64 `json:"cost_usd"`
	}, _ func(any) error) (any, error) {
		return c.SetBudget(p.Ref, fsstore.Budget{Tokens: p.Tokens, CostUSD: p.CostUSD})
	})
	handle(d, "agent.gate", func(ctx context.Context, p api.GateParams, _ func(any) error) (any, error) {
		return c.Gate(p)
	})
	handle(d, "workspace.create", func(ctx context.Context, p api.WorkspaceParams, _ func(any) error) (any, error) {
		w, err := c.CreateWorkspace(p)
		if err != nil {
			return nil, err
		}
		return c.WorkspaceInfo(w), nil
	})
	handle(d, "workspace.list", func(ctx context.Context, _ struct{}, _ func(any) error) (any, error) {
		return c.ListWorkspaces()
	})
	handle(d, "workspace.inspect", func(ctx context.Context, p refParams, _ func(any) error) (any, error) {
		return c.InspectWorkspace(p.Ref)
	})
	handle(d, "workspace.delete", func(ctx context.Context, p refParams, _ func(any) error) (any, error) {
		return map[string]bool{"deleted": true}, c.DeleteWorkspace(p.Ref)
	})
	handle(d, "workspace.link", func(ctx context.Context, p api.LinkParams, _ func(any) error) (any, error) {
		w, err := c.LinkWorkspace(p)
		if err != nil {
			return nil, err
		}
		return c.WorkspaceInfo(w), nil
	})
	handle(d, "workspace.unlink", func(ctx context.Context, p struct {
		Workspace string `json:"workspace"`
		Target    string `json:"target"`
	}, _ func(any) error) (any, error) {
		w, err := c.UnlinkWorkspace(p.Workspace, p.Target)
		if err != nil {
			return nil, err
		}
		return c.WorkspaceInfo(w), nil
	})
	handle(d, "workspace.view", func(ctx context.Context, p api.ViewParams, _ func(any) error) (any, error) {
		w, err := c.ViewWorkspace(p)
		if err != nil {
			return nil, err
		}
		return c.WorkspaceInfo(w), nil
	})
	handle(d, "approval.answer", func(ctx context.Context, p api.AnswerParams, _ func(any) error) (any, error) {
		p.By = fsstore.User // the socket is USER's; agents answer with their approve tool
		return c.Answer(ctx, p)
	})
	handle(d, "approval.list", func(ctx context.Context, _ struct{}, _ func(any) error) (any, error) {
		return c.PendingApprovals(), nil
	})
	registerTools(d.srv, c, "")
	handle(d, "inbox.list", func(ctx context.Context, p struct {
		All  bool `json:"all"`
		Peek bool `json:"peek"` // leave unread messages unread
	}, _ func(any) error) (any, error) {
		if p.Peek {
			return c.PeekUserInbox(p.All)
		}
		return c.UserInbox(p.All)
	})
}

// waitTurn streams the agent's activity until the turn that took message
// id has finished or failed.
// waitTurn streams the agent's events while its turn runs, and returns
// the outcome of the message once the turn that took it ended (or
// failed). The outcome never depends on the stream: a client that reads
// late misses frames, is told how many, and still gets its result.
func waitTurn(ctx context.Context, sub *supervisor.Subscription, outcome <-chan supervisor.Outcome, res api.SendResult, send func(any) error) (any, error) {
	reported := 0
	lagging := func() {
		if n := sub.Dropped(); n > reported {
			send(map[string]any{"type": "dropped", "count": n - reported})
			reported = n
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case o := <-outcome:
			for len(sub.C) > 0 { // what is already queued comes first
				send(<-sub.C)
			}
			lagging()
			res.Text, res.Failed, res.Dropped = o.Text, o.Failed, reported
			return res, nil
		case e := <-sub.C:
			lagging()
			send(e)
			if e.Type == "detached" {
				res.Failed, res.Dropped = "the agent's directory was moved out of agents/", reported
				return res, nil
			}
		}
	}
}

// stream sends every event of a subscription until the client goes away.
func stream(ctx context.Context, sub *supervisor.Subscription, send func(any) error) (any, error) {
	defer sub.Close()
	reported := 0 // events dropped and said so
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e := <-sub.C:
			if n := sub.Dropped(); n > reported {
				if err := send(map[string]any{"type": "dropped", "count": n - reported}); err != nil {
					return nil, err
				}
				reported = n
			}
			if err := send(e); err != nil {
				return nil, err
			}
		}
	}
}
