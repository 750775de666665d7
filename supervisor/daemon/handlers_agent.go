package daemon

import (
	"context"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/rpc"
)

// registerAgent registers the methods of the agents: create, list, inspect, send, attach, events, terminate, archive, permissions, budget, gate.
func (d *Daemon) registerAgent() {
	c, s := d.core, d.srv
	rpc.Handle(s, api.AgentCreate, func(ctx context.Context, p api.CreateParams) (api.AgentInfo, error) {
		return c.CreateAgent(p)
	})
	rpc.Handle(s, api.AgentList, func(ctx context.Context, p api.ListParams) ([]api.AgentInfo, error) {
		p.After, p.Limit = "", 0 // every match: agent.query pages
		page, err := c.Query(p)
		return page.Agents, err
	})
	rpc.Handle(s, api.AgentQuery, func(ctx context.Context, p api.ListParams) (api.ListPage, error) {
		return c.Query(p)
	})
	rpc.Handle(s, api.AgentInspect, func(ctx context.Context, p api.RefParams) (api.InspectResult, error) {
		return c.Inspect(p.Ref)
	})
	rpc.HandleStream(s, api.AgentSend, func(ctx context.Context, p api.SendMessageParams, send func(api.WatchFrame) error) (api.SendResult, error) {
		if !p.Wait {
			m, err := c.Send(api.SendParams{To: p.Ref, Text: p.Text})
			if err != nil {
				return api.SendResult{}, err
			}
			return api.SendResult{MessageID: m.ID}, nil
		}
		sending, err := c.SendWatched(api.SendParams{To: p.Ref, Text: p.Text})
		if err != nil {
			return api.SendResult{}, err
		}
		defer sending.Close()
		send(api.WatchFrame{Type: api.WatchSent, MessageID: sending.Message.ID})
		if why := c.HeldBecause(sending.Agent); why != "" {
			return api.SendResult{MessageID: sending.Message.ID, Held: why}, nil // no turn is coming: do not wait for one
		}
		return waitTurn(ctx, sending, send)
	})
	rpc.HandleStream(s, api.AgentAttach, func(ctx context.Context, p api.RefParams, send func(api.WatchFrame) error) (struct{}, error) {
		id, err := c.Resolve(p.Ref)
		if err != nil {
			return struct{}{}, err
		}
		return stream(ctx, c.Subscribe(id), send)
	})
	rpc.HandleStream(s, api.AgentEvents, func(ctx context.Context, p api.EventsParams, send func(fsstore.Event) error) (api.EventsResult, error) {
		if p.Follow {
			return c.FollowEvents(ctx, p, send)
		}
		return c.Events(p, send)
	})
	rpc.Handle(s, api.AgentTerminate, func(ctx context.Context, p api.TerminateParams) ([]api.AgentInfo, error) {
		return c.Terminate(ctx, p)
	})
	rpc.Handle(s, api.AgentArchive, func(ctx context.Context, p api.RefParams) ([]api.AgentInfo, error) {
		return c.Archive(ctx, p.Ref)
	})
	rpc.Handle(s, api.AgentWake, func(ctx context.Context, p api.RefParams) (api.AgentInfo, error) {
		return c.WakeParked(ctx, p.Ref)
	})
	rpc.Handle(s, api.AgentRestore, func(ctx context.Context, p api.RefParams) ([]api.AgentInfo, error) {
		return c.Restore(ctx, p.Ref)
	})
	rpc.Handle(s, api.AgentInstructions, func(ctx context.Context, p api.InstructionsParams) (api.AgentInfo, error) {
		return c.SetInstructions(ctx, p)
	})
	rpc.Handle(s, api.AgentLimits, func(ctx context.Context, p api.LimitsParams) (api.AgentInfo, error) {
		return c.SetLimits(ctx, p)
	})
	rpc.Handle(s, api.AgentPermissions, func(ctx context.Context, p api.PermissionsParams) (api.AgentInfo, error) {
		return c.SetPermissions(ctx, p)
	})
	rpc.Handle(s, api.AgentBudget, func(ctx context.Context, p api.BudgetParams) (api.AgentInfo, error) {
		return c.SetBudget(p.Ref, fsstore.Budget{Tokens: p.Tokens, CostUSD: p.CostUSD})
	})
	rpc.Handle(s, api.AgentGate, func(ctx context.Context, p api.GateParams) ([]api.AgentInfo, error) {
		return c.Gate(p)
	})
}
