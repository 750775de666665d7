package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
)

// DefaultPool is the slot pool of agents that name none.
const DefaultPool = "default"

// DefaultMaxHops bounds how many times agents may bounce messages between
// themselves without a message from USER or a reminder (the ping-pong
// guard).
const DefaultMaxHops = 32

// errPoolFull means a session cannot start now: its pool is full of busy
// sessions. The turn waits for a slot.
var errPoolFull = errors.New("slot pool full")

// poolLimit returns the number of live sessions pool may hold.
func (c *Core) poolLimit(pool string) int {
	pools := c.settings().Pools
	if n, ok := pools[pool]; ok && n > 0 {
		return n
	}
	return pools[DefaultPool]
}

func poolOf(s *fsstore.Session) string {
	if s.Pool == "" {
		return DefaultPool
	}
	return s.Pool
}

// makeRoom evicts the least recently used idle session of n's pool if the
// pool is full. It returns errPoolFull if every live session there is busy.
func (c *Core) makeRoom(ctx context.Context, n *node) error {
	c.mu.Lock()
	pool := poolOf(n.s())
	limit := c.poolLimit(pool)
	var live []*node
	for _, x := range c.nodes {
		if x.live != nil && x != n && poolOf(x.s()) == pool {
			live = append(live, x)
		}
	}
	if len(live) < limit {
		c.mu.Unlock()
		return nil
	}
	// Ties (turns started at the same instant) go by id, not map order, so
	// that a run can be replayed (sim).
	sort.Slice(live, func(i, j int) bool {
		if !live[i].lastUsed.Equal(live[j].lastUsed) {
			return live[i].lastUsed.Before(live[j].lastUsed)
		}
		return live[i].id() < live[j].id()
	})
	var victim *node
	for _, x := range live {
		if c.claimLocked(x) {
			victim = x
			break
		}
	}
	c.mu.Unlock()
	if victim == nil {
		return errPoolFull
	}
	defer c.release(victim)
	c.log.Info("evicting the least recently used session", "pool", pool, "agent", victim.id(), "for", n.id())
	return c.suspendHeld(ctx, victim, fmt.Sprintf("evicted: pool %q is full (%d live sessions)", pool, limit))
}

// notifyTransition tells the subscribers of n that its agent state moved
// from -> to.
func (c *Core) notifyTransition(n *node, from, to fsstore.AgentState, hops int) {
	c.mu.Lock()
	type hit struct {
		sub *node
		s   fsstore.Subscription
	}
	var hits []hit
	for _, id := range slices.Sorted(maps.Keys(c.subsByTarget[n.id()])) { // sorted: notices go out in a replayable order (sim)
		sub := c.nodes[id]
		if sub == nil || sub.terminated() {
			continue
		}
		for _, s := range sub.s().Subscriptions {
			if s.Target == n.id() && matchState(s.From, string(from)) && matchState(s.To, string(to)) {
				hits = append(hits, hit{sub, s})
			}
		}
	}
	name := n.s().Name
	c.mu.Unlock()
	for _, h := range hits {
		if hops > c.maxHops {
			c.log.Warn("subscription notice dropped by the ping-pong guard", "subscriber", h.sub.id(), "target", n.id())
			continue
		}
		text := fmt.Sprintf("[subscription %s] %s went %s -> %s", h.s.ID, name, from, to)
		m := &fsstore.Message{From: fsstore.System, FromName: fsstore.System, Kind: fsstore.KindSystem, Text: text, Hops: hops}
		if _, err := c.send(m, h.sub); err != nil {
			c.log.Warn("subscription notice not sent", "subscriber", h.sub.id(), "err", err)
			continue
		}
		if h.s.Once {
			if err := c.commit(h.sub, fsstore.Unsubscribed{ID: h.s.ID}); err != nil {
				c.log.Warn("once-subscription not removed", "subscriber", h.sub.id(), "err", err)
			}
		}
	}
}

func matchState(pattern, state string) bool {
	return pattern == "*" || strings.EqualFold(pattern, state)
}

// indexSubsLocked rebuilds the subscription index entries of n.
func (c *Core) indexSubsLocked(n *node) {
	for target, subs := range c.subsByTarget {
		delete(subs, n.id())
		if len(subs) == 0 {
			delete(c.subsByTarget, target)
		}
	}
	for _, s := range n.s().Subscriptions {
		if c.subsByTarget[s.Target] == nil {
			c.subsByTarget[s.Target] = map[string]bool{}
		}
		c.subsByTarget[s.Target][n.id()] = true
	}
}

// Tick fires the reminders that are due at now. The daemon calls it every
// second; the simulation calls it with abstract time. A reminder that came
// due while the daemon was down fires at the first tick.
func (c *Core) Tick(now time.Time) {
	c.mu.Lock()
	if c.down {
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.unpark(now)
	c.mu.Lock()
	type due struct {
		n *node
		r fsstore.Reminder
	}
	var dues []due
	for _, n := range c.nodes {
		if n.terminated() {
			continue
		}
		for _, r := range n.s().Reminders {
			if !r.Due.After(now) {
				dues = append(dues, due{n, r})
			}
		}
	}
	c.mu.Unlock()
	c.signal() // failed turns may be due for their retry
	sort.Slice(dues, func(i, j int) bool { return dues[i].r.ID < dues[j].r.ID })
	for _, d := range dues {
		text := fmt.Sprintf("[reminder %s] %s", d.r.ID, agentText(d.r.Reason))
		if late := now.Sub(d.r.Due); late > time.Minute {
			text += fmt.Sprintf(" (due %s ago)", late.Round(time.Second))
		}
		m := &fsstore.Message{From: fsstore.System, FromName: fsstore.System, Kind: fsstore.KindSystem, Text: text}
		if _, err := c.send(m, d.n); err != nil {
			c.log.Warn("reminder not sent", "agent", d.n.id(), "err", err)
			continue
		}
		done := fsstore.ReminderDone{ID: d.r.ID, Reason: "fired"}
		if d.r.EverySeconds > 0 {
			every := time.Duration(d.r.EverySeconds) * time.Second
			next := d.r.Due
			for !next.After(now) {
				next = next.Add(every)
			}
			done.NextDue = &next
		}
		if err := c.commit(d.n, done); err != nil {
			c.log.Warn("reminder state not saved", "agent", d.n.id(), "err", err)
		}
	}
}

// checkBudgets enforces the budgets of n and its ancestors after n spent
// something: a subtree over its budget is gated (no more turns) and its idle
// sessions suspended, and the budget holder's parent, or USER, is told.
func (c *Core) checkBudgets(n *node) {
	c.mu.Lock()
	var over []*node
	seen := map[string]bool{}
	for a := n; a != nil && !seen[a.id()]; a = c.nodes[a.s().ParentID] {
		seen[a.id()] = true
		if a.s().Budget.Exceeded(c.subtreeCountersLocked(a, map[string]bool{})) {
			over = append(over, a)
		}
	}
	c.mu.Unlock()
	for _, a := range over {
		c.enforceBudget(a)
	}
}

func (c *Core) enforceBudget(a *node) {
	c.mu.Lock()
	sub := c.subtreeLocked(a)
	used := c.subtreeCountersLocked(a, map[string]bool{})
	b := *a.s().Budget
	path := c.pathLocked(a)
	parent := c.nodes[a.s().ParentID]
	c.mu.Unlock()
	reason := fmt.Sprintf("budget of %s exceeded: %d tokens, $%.4f used (budget: %s)", path, used.InputTokens+used.OutputTokens, used.CostUSD, b.String())
	gatedAny := false
	yes := true
	for _, x := range sub {
		if x.terminated() || x.s().Gated {
			continue
		}
		if err := c.commit(x, fsstore.GateChange{Gated: &yes, Reason: reason}); err != nil {
			c.log.Error("budget gate not saved", "agent", x.id(), "err", err)
			continue
		}
		gatedAny = true
		c.mu.Lock()
		claimed := x.live != nil && c.claimLocked(x)
		c.mu.Unlock()
		if claimed {
			if err := c.suspendHeld(context.Background(), x, reason); err != nil {
				c.log.Error("suspend for budget failed", "agent", x.id(), "err", err)
			}
			c.release(x)
		}
	}
	if !gatedAny {
		return // already enforced
	}
	c.log.Warn("budget exceeded; subtree gated", "agent", a.id(), "reason", reason)
	c.notifyAbout(api.NotifyGated, a, reason+" (its subtree is gated)", time.Time{})
	text := reason + fmt.Sprintf(". Its subtree is suspended and gated. Raise the budget (substrat agent budget %s --tokens N) and ungate it (substrat agent ungate %s --recursive) to continue.", path, path)
	m := &fsstore.Message{From: fsstore.System, FromName: fsstore.System, Kind: fsstore.KindSystem, Text: text}
	if parent != nil && !parent.terminated() {
		if _, err := c.send(m, parent); err == nil {
			return
		}
	}
	if err := c.sendUser(m); err != nil {
		c.log.Error("budget notice not sent", "err", err)
	}
}

// SetBudget sets (or with a zero budget removes) an agent's budget.
func (c *Core) SetBudget(ref string, b fsstore.Budget) (api.AgentInfo, error) {
	if b.Tokens < 0 || b.CostUSD < 0 {
		return api.AgentInfo{}, invalidParams("a budget cannot be negative")
	}
	c.mu.Lock()
	n, err := c.resolveLocked(ref)
	c.mu.Unlock()
	if err != nil {
		return api.AgentInfo{}, err
	}
	if err := c.commit(n, b); err != nil {
		return api.AgentInfo{}, err
	}
	c.snapshot(n)
	c.checkBudgets(n)
	return c.infoOf(n), nil
}

// Gate gates, ungates or permits one turn to an agent (or its subtree).
func (c *Core) Gate(p api.GateParams) ([]api.AgentInfo, error) {
	c.mu.Lock()
	n, err := c.resolveLocked(p.Ref)
	var targets []*node
	if err == nil {
		targets = []*node{n}
		if p.Recursive {
			targets = c.subtreeLocked(n)
		}
	}
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var out []api.AgentInfo
	for _, x := range targets {
		if err := c.gateOp(x, p.Op, "by the user"); err != nil {
			return out, err
		}
		out = append(out, c.infoOf(x))
	}
	c.signal()
	return out, nil
}

func (c *Core) gateOp(x *node, op, by string) error {
	yes, no := true, false
	var ch fsstore.GateChange
	switch op {
	case "gate":
		ch = fsstore.GateChange{Gated: &yes, Reason: "gated " + by}
	case "ungate":
		ch = fsstore.GateChange{Gated: &no, Reason: "ungated " + by}
	case "permit":
		if !x.s().Gated {
			return invalidParams("%s is not gated; it needs no permit", x.s().Name)
		}
		ch = fsstore.GateChange{AddPermits: 1, Reason: "one turn permitted " + by}
	default:
		return invalidParams("unknown gate op %q (gate, ungate, permit)", op)
	}
	if err := c.commit(x, ch); err != nil {
		return err
	}
	if op == "ungate" {
		c.mu.Lock()
		x.failures, x.retryAt = nil, time.Time{}
		c.mu.Unlock()
	}
	c.snapshot(x)
	if op == "gate" && by != "by the user" {
		c.notifyAbout(api.NotifyGated, x, ch.Reason, time.Time{})
	}
	return nil
}

// parseDelay reads a duration given as a Go duration string ("90s", "5m")
// or a number of seconds.
func parseDelay(raw json.RawMessage) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if d, err := time.ParseDuration(s); err == nil {
			return d, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return time.Duration(f * float64(time.Second)), nil
		}
		return 0, fmt.Errorf("%q is not a duration (like \"90s\" or \"5m\") or a number of seconds", s)
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return 0, fmt.Errorf("%s is not a duration or a number of seconds", raw)
	}
	return time.Duration(f * float64(time.Second)), nil
}

// addWaiting records requests n sent in a turn, keeping the newest few.
func addWaiting(cur, add []string) []string {
	out := append(slices.Clone(cur), add...)
	if len(out) > maxWaiting {
		out = out[len(out)-maxWaiting:]
	}
	return out
}

// maxWaiting bounds the requests an agent is recorded as waiting for.
const maxWaiting = 16
