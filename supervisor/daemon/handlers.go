package daemon

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/substrat/substrat/supervisor"
	"github.com/substrat/substrat/supervisor/api"
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

func (d *Daemon) register() {
	d.registerDaemon()
	d.registerAgent()
	d.registerSession()
	d.registerWorkspace()
	d.registerInbox()
	d.registerShell()
	registerTools(d.srv, d.core, "")
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
