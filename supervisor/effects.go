package supervisor

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/google/uuid"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
)

// The effect journal: exactly once across a turn run again.
//
// A turn cut short (the daemon killed, the provider failing) runs again
// from the same messages, and the model makes its calls again, with new
// call ids and perhaps in another order. A call of an agent tool whose
// effect reaches beyond the turn is recorded in the agent's log
// (fsstore.EvEffect) under the turn (its first message) and a key made of
// the tool, a hash of its arguments and which repeat of that same call it
// is: once before it acts, with the id its own ids derive from, and once
// after, with its result. The same call in the turn run again then
// returns the recorded result without acting; one recorded only before
// acting runs again with the same ids, and each effect checks that it is
// not there already (a message id in the recipient's inbox, a child by
// its spawn key, a reminder by its id). The turn run again is told which
// calls already took effect.

// journaled are the tools recorded as effects. The others read (check
// inbox, inspect, list, diff, read_file), or are the work tools, whose
// effects on files and processes cannot be taken back or checked: those
// run again (at least once).
var journaled = map[string]bool{
	"spawn_agent": true, "send_message": true, "complete": true, "broadcast": true, "poke": true,
	"remind_me": true, "cancel_reminder": true, "set_agent_metadata": true, "subscribe": true, "unsubscribe": true,
	"gate": true, "ungate": true, "permit_turn": true, "create_workspace": true, "delete_workspace": true,
	"link_dir": true, "unlink_dir": true, "link_from": true,
}

// effectCtx is the context key of the running call's effect.
type effectCtx struct{}

// callEffect is the journal entry of the call being run.
type callEffect struct {
	fsstore.Effect
	// again: the call ran before and may have acted (its first record is
	// there, its second is not).
	again bool
	next  int // the next id to derive from Base
}

// effectOf returns the running call's effect, or nil.
func effectOf(ctx context.Context) *callEffect {
	e, _ := ctx.Value(effectCtx{}).(*callEffect)
	return e
}

// newID returns the next id of the call: derived from its Base, so that
// the call run again makes the same ids in the same order; a fresh id
// outside a journaled call.
func (t *turnTools) newID(ctx context.Context) string {
	e := effectOf(ctx)
	if e == nil {
		return t.c.store.NewID()
	}
	k := e.next
	e.next++
	if k == 0 {
		return e.Base
	}
	u, err := uuid.Parse(e.Base)
	if err != nil {
		return t.c.store.NewID()
	}
	u[14], u[15] = byte(k>>8), byte(k) // a UUIDv7 still, of the same time
	return u.String()
}

// again reports whether the running call ran before, so that an effect
// must check that it is not there already.
func again(ctx context.Context) bool {
	e := effectOf(ctx)
	return e != nil && e.again
}

// effectKey is the key of call within its turn, n the repeats of the
// same call before it: the tool, a digest of its arguments as canonical
// JSON (callKey), and n.
func effectKey(call provider.ToolCall, n int) string {
	return fmt.Sprintf("%s:%s:%d", call.Name, callKey(call.Name, call.Args)[:16], n)
}

// effects returns n's journal index, turn -> key -> the latest record,
// read from its log once (the turns whose first message is still
// pending), then kept in memory.
func (c *Core) effects(n *node) map[string]map[string]fsstore.Effect {
	c.mu.Lock()
	idx := n.effects
	c.mu.Unlock()
	if idx != nil {
		return idx
	}
	idx = map[string]map[string]fsstore.Effect{}
	pending := map[string]bool{}
	if msgs, _, err := n.agent.Pending(); err == nil {
		for _, m := range msgs {
			pending[m.ID] = true
		}
	}
	fsstore.ReadEventsOfType(c.store.FS(), n.agent.Files().Events(), fsstore.EvEffect, func(e fsstore.Event) error {
		var eff fsstore.Effect
		if e.Decode(&eff) == nil && pending[eff.Turn] {
			if idx[eff.Turn] == nil {
				idx[eff.Turn] = map[string]fsstore.Effect{}
			}
			idx[eff.Turn][eff.Key] = eff
		}
		return nil
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	if n.effects == nil {
		n.effects = idx
	}
	return n.effects
}

// forgetEffects drops the journal index of a turn that is over.
func (c *Core) forgetEffects(n *node, turn string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n.effects != nil {
		delete(n.effects, turn)
	}
}

// recordEffect commits e to n's log and keeps it in the index.
func (c *Core) recordEffect(n *node, idx map[string]map[string]fsstore.Effect, e fsstore.Effect) error {
	if err := c.commit(n, e); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if idx[e.Turn] == nil {
		idx[e.Turn] = map[string]fsstore.Effect{}
	}
	idx[e.Turn][e.Key] = e
	return nil
}

// runJournaled runs a journaled call: its recorded result if it took
// effect before, else the tool, between its two records.
func (t *turnTools) runJournaled(ctx context.Context, tl tool, call provider.ToolCall) (string, error) {
	t.mu.Lock()
	if t.repeats == nil {
		t.repeats = map[string]int{}
	}
	base := effectKey(call, 0)
	k := t.repeats[base]
	t.repeats[base]++
	t.mu.Unlock()
	key := effectKey(call, k)

	idx := t.c.effects(t.n)
	t.c.mu.Lock()
	prev, found := idx[t.turnKey][key]
	t.c.mu.Unlock()
	if found && prev.Done {
		if prev.IsError {
			return "", fmt.Errorf("%s", prev.Result)
		}
		return prev.Result, nil
	}
	e := &callEffect{Effect: prev, again: found}
	if !found {
		e.Effect = fsstore.Effect{Turn: t.turnKey, Key: key, Tool: call.Name, Args: cut(string(call.Args), 300), Base: t.c.store.NewID()}
		if err := t.c.recordEffect(t.n, idx, e.Effect); err != nil {
			return "", err
		}
	}
	call.ID = t.turnKey + "/" + key // stable across runs: spawn_agent keys its child by it
	text, err := tl.run(t, context.WithValue(ctx, effectCtx{}, e), call)
	done := e.Effect
	done.Done, done.Result = true, text
	if err != nil {
		done.Result, done.IsError = err.Error(), true
	}
	if rerr := t.c.recordEffect(t.n, idx, done); rerr != nil && err == nil {
		return "", rerr
	}
	return text, err
}

// replayNote tells a turn run again which of its calls took effect before
// it was cut short, or is "".
func (c *Core) replayNote(n *node, turn string) string {
	c.mu.Lock()
	var done []fsstore.Effect
	if n.effects != nil {
		for _, e := range n.effects[turn] {
			if e.Done && !e.IsError {
				done = append(done, e)
			}
		}
	}
	c.mu.Unlock()
	if len(done) == 0 {
		return ""
	}
	sort.Slice(done, func(i, j int) bool { return done[i].Key < done[j].Key })
	var b strings.Builder
	b.WriteString("This turn was cut short and runs again. These calls of it already took effect; " +
		"calling one again with the same arguments returns its result and does not act twice:\n")
	for _, e := range done {
		fmt.Fprintf(&b, "- %s %s -> %s\n", e.Tool, e.Args, cut(e.Result, 300))
	}
	return b.String()
}
