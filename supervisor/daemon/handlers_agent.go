package daemon

import (
	"context"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
)

// registerAgent registers the methods of the agents: create, list, inspect, send, attach, events, terminate, archive, permissions, budget, gate.
func (d *Daemon) registerAgent() {
	c := d.core
	handle(d, api.MethodAgentCreate, func(ctx context.Context, p api.CreateParams, _ func(any) error) (any, error) {
		return c.CreateAgent(p)
	})
	handle(d, api.MethodAgentList, func(ctx context.Context, p api.ListParams, _ func(any) error) (any, error) {
		p.After, p.Limit = "", 0 // every match: agent.query pages
		page, err := c.Query(p)
		return page.Agents, err
	})
	handle(d, api.MethodAgentQuery, func(ctx context.Context, p api.ListParams, _ func(any) error) (any, error) {
		return c.Query(p)
	})
	handle(d, api.MethodAgentInspect, func(ctx context.Context, p refParams, _ func(any) error) (any, error) {
		return c.Inspect(p.Ref)
	})
	handle(d, api.MethodAgentSend, func(ctx context.Context, p struct {
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
		if why := c.HeldBecause(id); why != "" {
			return api.SendResult{MessageID: m.ID, Held: why}, nil // no turn is coming: do not wait for one
		}
		return waitTurn(ctx, sub, outcome, api.SendResult{MessageID: m.ID}, send)
	})
	handle(d, api.MethodAgentAttach, func(ctx context.Context, p refParams, send func(any) error) (any, error) {
		id, err := c.Resolve(p.Ref)
		if err != nil {
			return nil, err
		}
		return stream(ctx, c.Subscribe(id), send)
	})
	handle(d, api.MethodAgentEvents, func(ctx context.Context, p api.EventsParams, send func(any) error) (any, error) {
		fn := func(e fsstore.Event) error { return send(e) }
		if p.Follow {
			return c.FollowEvents(ctx, p, fn)
		}
		return c.Events(p, fn)
	})
	handle(d, api.MethodAgentTerminate, func(ctx context.Context, p api.TerminateParams, _ func(any) error) (any, error) {
		return c.Terminate(ctx, p)
	})
	handle(d, api.MethodAgentArchive, func(ctx context.Context, p refParams, _ func(any) error) (any, error) {
		return c.Archive(ctx, p.Ref)
	})
	handle(d, api.MethodAgentWake, func(ctx context.Context, p refParams, _ func(any) error) (any, error) {
		return c.WakeParked(ctx, p.Ref)
	})
	handle(d, api.MethodAgentRestore, func(ctx context.Context, p refParams, _ func(any) error) (any, error) {
		return c.Restore(ctx, p.Ref)
	})
	handle(d, api.MethodAgentInstructions, func(ctx context.Context, p api.InstructionsParams, _ func(any) error) (any, error) {
		return c.SetInstructions(ctx, p)
	})
	handle(d, api.MethodAgentLimits, func(ctx context.Context, p api.LimitsParams, _ func(any) error) (any, error) {
		return c.SetLimits(ctx, p)
	})
	handle(d, api.MethodAgentPermissions, func(ctx context.Context, p api.PermissionsParams, _ func(any) error) (any, error) {
		return c.SetPermissions(ctx, p)
	})
	handle(d, api.MethodAgentBudget, func(ctx context.Context, p struct {
		Ref     string  `json:"ref"`
		Tokens  int64   `json:"tokens"`
		CostUSD float64 `json:"cost_usd"`
	}, _ func(any) error) (any, error) {
		return c.SetBudget(p.Ref, fsstore.Budget{Tokens: p.Tokens, CostUSD: p.CostUSD})
	})
	handle(d, api.MethodAgentGate, func(ctx context.Context, p api.GateParams, _ func(any) error) (any, error) {
		return c.Gate(p)
	})
}
