package supervisor

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/internal/jsontext"
)

// RecoveryPrompt is the message root agents get after an unclean stop.
const RecoveryPrompt = "The Substrat daemon restarted after an unclean stop (crash, kill or power loss). " +
	"Nothing acknowledged was lost, but a turn in progress may have been cut short. " +
	"Check on your team (list_children, inspect_agent) and carry on."

// RecoveredReason starts the reason of each state event recovery commits
// (an ACTIVE session suspended, a cut-short turn's BUSY undone).
const RecoveredReason = "recovered: "

// Recover loads the store into the core and runs the recovery procedure
// (SPEC "Recovery", steps 2 to 8; the daemon has taken the lock, step 1).
// unclean says whether the previous daemon died without a clean stop.
func (c *Core) Recover(ctx context.Context, unclean bool) (*api.Report, error) {
	rep := &api.Report{Version: 1, StartedAt: c.clock.Now().UTC(), Unclean: unclean,
		Findings: []fsstore.Finding{}, KeptOut: []fsstore.Finding{},
		Suspended: []api.RecoveredAgent{}, Redelivered: []api.RecoveredAgent{}, Resumed: []api.RecoveredAgent{}, Reaped: []string{},
		Parked: []api.RecoveredAgent{}, Limited: []api.RecoveredAgent{}}
	if r := c.host.Reap(); r != nil {
		rep.Reaped = r
	}
	nodes, err := c.loadTree(ctx, rep)
	if err != nil {
		return nil, err
	}
	var cut []*node // agents whose turn the stop cut short, in id order
	for _, n := range sortedNodes(nodes) {
		if CutShort(n.s()) {
			cut = append(cut, n)
		}
		if err := c.recoverAgent(n, rep); err != nil {
			return nil, fmt.Errorf("recover %s: %w", c.pathOf(n), err)
		}
	}
	// Step 7: a root whose turn the stop cut short is told so, with the
	// messages of that turn, which it reads again; children resume on
	// demand. A root that never took a turn, or that ended its last one,
	// has nothing to resume and is not sent a (paid) prompt.
	if unclean {
		for _, r := range cut {
			if r.terminated() || r.s().ParentID != "" {
				continue
			}
			m := &fsstore.Message{From: fsstore.System, FromName: fsstore.System, Kind: fsstore.KindSystem, Text: RecoveryPrompt}
			if _, err := c.send(m, r); err != nil {
				return nil, fmt.Errorf("recover %s: %w", r.s().Name, err)
			}
			rep.Resumed = append(rep.Resumed, api.RecoveredAgent{ID: r.id(), Path: c.pathOf(r), Detail: "recovery prompt queued"})
		}
	}
	// Step 8.
	rep.FinishedAt = c.clock.Now().UTC()
	rep.DurationMS = rep.FinishedAt.Sub(rep.StartedAt).Milliseconds()
	data, err := jsontext.MarshalIndent(rep, "  ")
	if err != nil {
		return nil, err
	}
	if err := fsstore.ReplaceFile(c.store.FS(), c.store.Layout().Recovery(), append(data, '\n')); err != nil {
		return nil, err
	}
	c.signal()
	if unclean {
		c.notifyUnread()
	}
	return rep, nil
}

// loadTree is recovery's steps 2-4: sweep, repair torn tails, load and
// replay, orphans; it puts the agents in the tree and returns them, and
// adds its findings to rep. A session.json that cannot be read (a bad
// hand edit made while the daemon was stopped, or refused while it ran)
// is rebuilt from a valid events.jsonl, as fsck --repair does; the old
// file is kept as session.json.N.broken and the finding says so.
func (c *Core) loadTree(ctx context.Context, rep *api.Report) ([]*node, error) {
	res, err := c.store.Scan(ctx, fsstore.ScanOptions{Repair: true, RebuildSnapshots: true})
	if err != nil {
		return nil, err
	}
	for _, f := range res.Findings {
		if f.Kind == fsstore.FindKeptOut {
			rep.KeptOut = append(rep.KeptOut, f)
			c.log.Error("agent kept out of the live tree", "path", f.Path, "reason", f.Detail)
		} else {
			rep.Findings = append(rep.Findings, f)
		}
	}
	if swept, err := c.ws.Sweep(); err != nil {
		c.log.Warn("workspace sweep failed", "err", err)
	} else {
		for _, p := range swept {
			rep.Findings = append(rep.Findings, fsstore.Finding{Kind: fsstore.FindLeftover, Path: p,
				Detail: "workspace under construction that never committed", Repaired: true})
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range res.Agents {
		c.insertLocked(a)
	}
	c.linkChildrenLocked()
	nodes := make([]*node, 0, len(c.nodes))
	for _, n := range c.nodes {
		nodes = append(nodes, n)
	}
	rep.Agents = len(nodes)
	return nodes, nil
}

// recoverAgent is recovery's steps 5 and 6 for one agent: what the stop
// left ACTIVE or BUSY is put back (one commit), and what waits in its
// inbox is noticed; then its governance, migrations and snapshot.
func (c *Core) recoverAgent(n *node, rep *api.Report) error {
	// Step 5: no provider process survived, so ACTIVE is stale; and a
	// BUSY agent's turn was cut short.
	var ch fsstore.StateChange
	var why []string
	if n.s().SessionState == fsstore.SessionActive {
		ch.SessionState = fsstore.SessionSuspended
		why = append(why, "the daemon stopped while the session was active")
		rep.Suspended = append(rep.Suspended, api.RecoveredAgent{ID: n.id(), Path: c.pathOf(n), Detail: "ACTIVE -> SUSPENDED"})
	}
	if n.s().AgentState == fsstore.AgentBusy {
		ch.AgentState = fsstore.AgentIdle
		why = append(why, "a turn was cut short; its messages are delivered again")
	}
	if len(why) > 0 {
		ch.Reason = RecoveredReason + strings.Join(why, "; ")
		if err := c.commit(n, ch); err != nil {
			return err
		}
	}
	// Step 6: what is still in inbox/new (and not in cur/) is
	// undelivered. The scan counted it as it loaded the agent, so the
	// inbox is not listed again; the turn reads it. A message that
	// arrived since is noticed as any other: the daemon's sends mark
	// their recipient, the watcher the inboxes it is told of. (Delivered
	// names left in new/ are swept at turn ends.)
	if pending := n.agent.PendingAtLoad(); pending > 0 && !n.terminated() {
		c.mu.Lock()
		n.mail = true
		c.mu.Unlock()
		rep.Redelivered = append(rep.Redelivered, api.RecoveredAgent{ID: n.id(), Path: c.pathOf(n), Messages: pending})
	}
	rep.Parked, rep.Limited = c.governed(n, rep.Parked, rep.Limited)
	// Agents from before working directories and permission settings get
	// the ones they run with, recorded.
	if err := c.migrateWork(n); err != nil {
		return err
	}
	if n.agent.SnapshotSeq() != n.s().LastSeq {
		c.snapshot(n)
	}
	return nil
}

// CutShort reports whether s, as its events leave it after a stop, was in
// the middle of a turn: a turn begins with a state event to BUSY and ends
// with one to IDLE, WAITING or TERMINATED (endTurn, turnFailed), so BUSY
// means a turn began and never ended. A turn that waits for an approval
// is WAITING with that request pending in its own session (a WAITING left
// by a finished turn waits for replies and has no pending request). The
// messages of such a turn were not yet recorded as delivered: delivery is
// recorded at the turn's end, and they are still in inbox/new.
func CutShort(s *fsstore.Session) bool {
	switch s.AgentState {
	case fsstore.AgentBusy:
		return true
	case fsstore.AgentWaiting:
		for _, a := range s.Approvals {
			if a.Pending() {
				return true
			}
		}
	}
	return false
}

func (c *Core) pathOf(n *node) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pathLocked(n)
}

func sortedNodes(ns []*node) []*node {
	out := append([]*node(nil), ns...)
	sort.Slice(out, func(i, j int) bool { return out[i].id() < out[j].id() })
	return out
}
