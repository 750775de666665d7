package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor/api"
)

// Parking.
//
// A turn that a provider's usage or rate limit stopped (a
// provider.RateLimited) is not a failed turn: the agent is PARKED until
// the limit resets, recorded as a parked event so that a restart keeps
// it. It gives up its live session and its pool slot, its messages wait
// in its inbox, and every other agent of the same provider waits for the
// same reset instead of hammering the API (the provider's credentials are
// the daemon's, one set per provider). At the reset the parked agents
// become runnable again and the scheduler runs them within the pool
// limits, least recently run first. A limit without a reset time backs
// off exponentially: ParkBase, doubling, up to ParkCap. `agent wake`
// ends a park early.

// Backoff of a limit without a reset time.
const (
	ParkBase = 30 * time.Second
	ParkCap  = 10 * time.Minute
)

// parkKey is the provider and credentials a limit of n's applies to.
func parkKey(s *fsstore.Session) string { return s.Provider }

// parkTurn parks n after its turn hit rl, instead of failing it.
func (c *Core) parkTurn(n *node, msgs []*fsstore.Message, rl *provider.RateLimited) error {
	now := c.clock.Now()
	key := parkKey(n.s())
	c.mu.Lock()
	until := rl.Until
	if !until.After(now) {
		n.parks++
		until = now.Add(min(ParkBase<<(n.parks-1), ParkCap))
	} else {
		n.parks = 0
	}
	live := n.live
	n.live = nil
	n.woken = false
	n.mail = len(msgs) > 0
	n.retryAt = until
	fresh := !now.Before(c.parked[key]) // the provider was not parked: tell USER
	if until.After(c.parked[key]) {
		c.parked[key] = until
	}
	c.mu.Unlock()
	if live != nil {
		live.Stop()
	}
	c.log.Warn("agent parked: its provider's limit", "agent", n.id(), "until", until, "reason", rl.Reason)
	// Told once the park is on record.
	defer c.outcomes.settle(messageIDs(msgs), Outcome{Failed: fmt.Sprintf("parked until %s: %s; the message is kept and its turn runs then",
		until.Local().Format("15:04:05"), rl.Reason)})
	if n.s().SessionState == fsstore.SessionActive {
		if err := c.commit(n, fsstore.StateChange{SessionState: fsstore.SessionSuspended, Reason: "parked"}); err != nil {
			return err
		}
	}
	if err := c.commit(n, fsstore.Parked{Until: until.UTC(), Reason: rl.Reason, Key: key}); err != nil {
		return err
	}
	if !n.terminated() {
		reason := fmt.Sprintf("parked until %s: %s", until.UTC().Format(time.RFC3339), rl.Reason)
		if err := c.commit(n, fsstore.StateChange{AgentState: fsstore.AgentIdle, Reason: reason}); err != nil {
			return err
		}
	}
	c.snapshot(n)
	c.notifyAbout(api.NotifyParked, n, rl.Reason, until)
	if fresh {
		c.tellUser(fmt.Sprintf("Provider %s is rate limited until %s (%s); its agents wait for the reset and then resume by themselves "+
			"(substrat daemon status; substrat agent wake REF tries one now).", key, until.Local().Format("2006-01-02 15:04:05"), rl.Reason))
	}
	return nil
}

// tellUser sends USER a message from SYSTEM (notify_command runs for it);
// a failure is logged.
func (c *Core) tellUser(text string) {
	m := &fsstore.Message{From: fsstore.System, FromName: fsstore.System, Kind: fsstore.KindSystem, Text: text}
	if err := c.sendUser(m); err != nil {
		c.log.Warn("telling USER failed", "err", err, "text", text)
	}
}

// isRateLimited returns the limit that stopped a turn, if one did.
func isRateLimited(err error) *provider.RateLimited {
	var rl *provider.RateLimited
	if errors.As(err, &rl) {
		return rl
	}
	return nil
}

// parkedLocked returns until when n may start no turn (zero: it may).
func (c *Core) parkedLocked(n *node, now time.Time) time.Time {
	if p := n.s().Parked; p != nil && now.Before(p.Until) {
		return p.Until
	}
	if until := c.parked[parkKey(n.s())]; !n.woken && now.Before(until) {
		return until
	}
	return time.Time{}
}

// loadParkLocked takes in the park of a loaded agent, so that its
// provider waits for the same reset after a restart.
func (c *Core) loadParkLocked(n *node) {
	if p := n.s().Parked; p != nil && p.Until.After(c.parked[p.Key]) {
		c.parked[p.Key] = p.Until
	}
}

// unpark ends the parks that are over at now: the agents' parked events
// are closed, least recently run first, and the scheduler woken.
func (c *Core) unpark(now time.Time) {
	c.mu.Lock()
	var reset []string
	for k, until := range c.parked {
		if !now.Before(until) {
			delete(c.parked, k)
			reset = append(reset, k)
		}
	}
	var due []*node
	for _, n := range c.nodes {
		if p := n.s().Parked; p != nil && !now.Before(p.Until) {
			due = append(due, n)
		}
	}
	c.mu.Unlock()
	if len(due) > 0 {
		// They may run now (parkedLocked is over at now): the scheduler
		// does not wait for the parks' closing events.
		c.signal()
	}
	sort.Slice(due, func(i, j int) bool { return due[i].s().UpdatedAt.Before(due[j].s().UpdatedAt) })
	for _, n := range due {
		if err := c.commit(n, fsstore.Parked{}); err != nil {
			c.log.Warn("unparking failed", "agent", n.id(), "err", err)
			continue
		}
		c.notifyAbout(api.NotifyUnparked, n, "its provider's limit has reset", time.Time{})
	}
	if len(due) > 0 {
		c.signal()
	}
	sort.Strings(reset)
	for _, k := range reset {
		c.tellUser(fmt.Sprintf("Provider %s's limit has reset; its parked agents resume.", k))
	}
}

// WakeParked ends agent ref's park now: its next turn tries the provider again.
func (c *Core) WakeParked(ctx context.Context, ref string) (api.AgentInfo, error) {
	c.mu.Lock()
	n, err := c.resolveLocked(ref)
	if err == nil {
		n.woken, n.retryAt, n.parks = true, time.Time{}, 0
	}
	c.mu.Unlock()
	if err != nil {
		return api.AgentInfo{}, err
	}
	if n.s().Parked != nil {
		if err := c.commit(n, fsstore.Parked{}); err != nil {
			return api.AgentInfo{}, err
		}
		c.snapshot(n)
		c.notifyAbout(api.NotifyUnparked, n, "woken early (substrat agent wake)", time.Time{})
	}
	c.signal()
	return c.infoOf(n), nil
}

// HeldBecause says why agent id starts no turn now, whatever its inbox
// holds (gated without a permit, over a budget, parked, terminated), or
// "" if it may.
func (c *Core) HeldBecause(id string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[id]
	switch {
	case n == nil:
		return ""
	case n.terminated():
		return "it has terminated"
	case n.s().Gated && n.s().Permits == 0:
		why := n.s().StateReason
		if why == "" {
			why = "gated"
		}
		return why + " (substrat agent permit or ungate lets it run)"
	}
	if until := c.parkedLocked(n, c.clock.Now()); !until.IsZero() {
		return fmt.Sprintf("parked until %s: its provider's limit (substrat agent wake tries now)", until.Local().Format("15:04:05"))
	}
	return ""
}

// parkInfoLocked is how n's park shows: its own, or its provider's while
// it has messages waiting.
func (c *Core) parkInfoLocked(n *node) *fsstore.Park {
	now := c.clock.Now()
	if p := n.s().Parked; p != nil && now.Before(p.Until) {
		cp := *p
		return &cp
	}
	key := parkKey(n.s())
	if until := c.parked[key]; !n.woken && n.mail && now.Before(until) {
		return &fsstore.Park{Until: until, Reason: "its provider " + key + " is rate limited", Key: key}
	}
	return nil
}

// governed adds n to the recovery report's parked agents if it is parked,
// and to its limited ones if its processes run under limits.
func (c *Core) governed(n *node, parked, limited []api.RecoveredAgent) ([]api.RecoveredAgent, []api.RecoveredAgent) {
	if n.terminated() {
		return parked, limited
	}
	if p := n.s().Parked; p != nil && c.clock.Now().Before(p.Until) {
		parked = append(parked, api.RecoveredAgent{ID: n.id(), Path: c.pathOf(n),
			Detail: fmt.Sprintf("until %s: %s", p.Until.UTC().Format(time.RFC3339), p.Reason)})
	}
	if l := c.limitsOf(n.s()); !l.IsZero() {
		var in []string
		if l.MemoryBytes > 0 {
			in = append(in, "memory "+fsstore.FormatBytes(l.MemoryBytes))
		}
		if l.Pids > 0 {
			in = append(in, fmt.Sprintf("pids %d", l.Pids))
		}
		if l.CPUWeight > 0 {
			in = append(in, fmt.Sprintf("cpu weight %d", l.CPUWeight))
		}
		limited = append(limited, api.RecoveredAgent{ID: n.id(), Path: c.pathOf(n), Detail: strings.Join(in, ", ")})
	}
	return parked, limited
}
