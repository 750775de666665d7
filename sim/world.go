package sim

import (
	"context"
	"fmt"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script/native"
	"github.com/substrat/substrat/supervisor"
)

// Home is the home directory of every simulated run. Nothing exists at
// this path on the real disk (the core's workspace store, which does not
// use the FS seam, only ever finds it missing).
const Home = "/substrat-sim/home"

// PoolSize is the slot pool of a simulated core: small, so that turns
// evict sessions.
const PoolSize = 2

// MaxHops is the ping-pong guard of a simulated core.
const MaxHops = 6

// wrapProvider, if set, wraps the provider of every simulated core (a
// seam for tests: parkProvider).
var wrapProvider func(p provider.Provider, clock *Clock) provider.Provider

// world is one daemon process on a simulated machine: a store and a core
// over an FS, with an abstract clock and seeded ids.
type world struct {
	fs     *FS
	clock  *Clock
	ids    *IDs
	store  *fsstore.Store
	core   *supervisor.Core
	report *api.Report
}

// start opens the store on fsys and recovers it into a new core, as the
// daemon does when it starts. onAck, if set, is called each time an agent
// tool call succeeds: that result is an acknowledgement to the agent.
func start(fsys *FS, clock *Clock, ids *IDs, unclean bool, onAck func()) (*world, error) {
	st, err := fsstore.Open(Home, fsstore.Options{FS: fsys, Now: clock.Now, NewID: ids.New})
	if err != nil {
		return nil, fmt.Errorf("open the store: %w", err)
	}
	var p provider.Provider = native.New(nil) // in-process: native mode, nothing run
	if wrapProvider != nil {
		p = wrapProvider(p, clock)
	}
	if onAck != nil {
		p = ackProvider{p, onAck}
	}
	core := supervisor.New(supervisor.Config{Store: st, Providers: provider.NewRegistry(p), Clock: clock,
		Pools: map[string]int{supervisor.DefaultPool: PoolSize}, MaxHops: MaxHops})
	rep, err := core.Recover(context.Background(), unclean)
	if err != nil {
		return nil, fmt.Errorf("recover: %w", err)
	}
	return &world{fs: fsys, clock: clock, ids: ids, store: st, core: core, report: rep}, nil
}

// tree returns the agents of the core, for the generator.
func (w *world) tree() []Agent {
	list := w.core.List()
	names := map[string]string{}
	for _, a := range list {
		names[a.ID] = a.Name
	}
	out := make([]Agent, 0, len(list))
	for _, a := range list {
		out = append(out, Agent{Name: a.Name, Parent: names[a.ParentID], Live: a.AgentState != fsstore.AgentTerminated})
	}
	return out
}

// do runs one action and returns its error: nil means the action was
// acknowledged.
func (w *world) do(ctx context.Context, a Action) error {
	c := w.core
	switch a.Kind {
	case CreateRoot:
		_, err := c.CreateAgent(api.CreateParams{Name: a.Name})
		return err
	case UserSend:
		_, err := c.Send(api.SendParams{To: a.Name, Text: a.Text})
		return err
	case SendCollide:
		// The message gets the id of one still waiting in inbox/new: the
		// store must refuse it rather than replace the other.
		if id, err := c.Resolve(a.Name); err == nil {
			msgs, _, _ := fsstore.ReadInbox(w.fs, w.store.Layout().Agent(id).Inbox(), fsstore.InboxNew)
			if len(msgs) > 0 {
				w.ids.ForceNext(msgs[len(msgs)-1].ID)
			}
		}
		_, err := c.Send(api.SendParams{To: a.Name, Text: a.Text})
		w.ids.ForceNext("")
		return err
	case Turn:
		id, err := c.Resolve(a.Name)
		if err != nil {
			return err
		}
		return c.RunTurn(ctx, id)
	case Drain:
		for round := 0; round < 3; round++ {
			ids := c.Runnable()
			if len(ids) == 0 {
				break
			}
			for _, id := range ids {
				if err := c.RunTurn(ctx, id); err != nil {
					return err
				}
			}
		}
		return nil
	case Tick:
		c.Tick(w.clock.Now())
		return nil
	case Suspend:
		_, err := c.Suspend(ctx, a.Name)
		return err
	case Resume:
		_, err := c.Resume(ctx, a.Name)
		return err
	case Terminate:
		_, err := c.Terminate(ctx, api.TerminateParams{Ref: a.Name, Recursive: a.Recursive})
		return err
	case HandEdit:
		return w.handEdit(a.Name, a.Text)
	case Archive:
		_, err := c.Archive(ctx, a.Name)
		return err
	}
	return fmt.Errorf("unknown action %v", a.Kind)
}

// handEdit changes an agent's instructions in session.json as a user with
// a careful editor would: a new file renamed over the old one. Nobody
// acknowledges it; the core adopts it when it next writes a snapshot.
func (w *world) handEdit(ref, instructions string) error {
	id, err := w.core.Resolve(ref)
	if err != nil {
		return err
	}
	path := w.store.Layout().Agent(id).Session()
	data, err := w.fs.ReadFile(path)
	if err != nil {
		return err
	}
	s, err := fsstore.DecodeSession(data)
	if err != nil {
		return err
	}
	s.Instructions = instructions
	data, err = fsstore.EncodeSession(s)
	if err != nil {
		return err
	}
	return w.fs.WriteFileAtomic(path, data, 0o600)
}

// ackProvider wraps a provider so that every successful tool call is
// reported: its result told the agent that the call's effect is durable.
type ackProvider struct {
	provider.Provider
	ack func()
}

func (p ackProvider) Create(ctx context.Context, cfg provider.Config) (provider.Session, error) {
	s, err := p.Provider.Create(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return ackSession{s, p.ack}, nil
}

func (p ackProvider) Restore(ctx context.Context, cfg provider.Config, state []byte) (provider.Session, error) {
	s, err := p.Provider.Restore(ctx, cfg, state)
	if err != nil {
		return nil, err
	}
	return ackSession{s, p.ack}, nil
}

type ackSession struct {
	provider.Session
	ack func()
}

func (s ackSession) Send(ctx context.Context, turn provider.Turn) (provider.TurnResult, error) {
	tools := turn.Tools
	turn.Tools = provider.ToolHandlerFunc(func(ctx context.Context, call provider.ToolCall) provider.ToolResult {
		r := tools.CallTool(ctx, call)
		if !r.IsError {
			s.ack()
		}
		return r
	})
	return s.Session.Send(ctx, turn)
}
