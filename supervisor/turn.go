package supervisor

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/prompt"
)

// RunTurn runs one turn of agent id if it has undelivered messages and is
// free. It returns once the turn's effects are durable. It is what the
// scheduler calls, and what the simulation calls step by step.
func (c *Core) RunTurn(ctx context.Context, id string) error {
	c.mu.Lock()
	n := c.nodes[id]
	if n == nil || c.down || n.terminated() || n.heldBy != "" || n.claimers > 0 || !c.claimLocked(n) {
		c.mu.Unlock()
		return nil
	}
	// The turn timeout; the time spent waiting for approvals does not
	// count (turnctx.go).
	tctx, cancel := newTurnCtx(ctx, c.settings().TurnTimeout)
	n.cancel = cancel
	c.mu.Unlock()
	defer cancel()
	defer c.release(n)
	return c.turnHeld(tctx, n)
}

// CallTool runs an agent tool on behalf of a provider process that reaches
// the daemon over RPC (the MCP bridge). The agent must be in a turn: tools
// act for a turn, and its end releases what it spawned.
func (c *Core) CallTool(ctx context.Context, agentID string, call provider.ToolCall) provider.ToolResult {
	c.mu.Lock()
	n := c.nodes[agentID]
	var t *turnTools
	if n != nil {
		t = n.turn
	}
	c.mu.Unlock()
	switch {
	case n == nil:
		return provider.ToolResult{IsError: true, Text: fmt.Sprintf("no live agent %s", agentID)}
	case t == nil:
		return provider.ToolResult{IsError: true, Text: fmt.Sprintf("agent %s is not in a turn; tools can only be called during a turn", n.s().Name)}
	}
	return t.CallTool(ctx, call)
}

// RenderPrompt is the wake prompt for a batch of messages, framed with tag
// (package prompt): a preamble, then each message between a header line
// "[<tag> message <id> from <sender>]" and an end line, its body escaped
// so that no line of it can pose as framing. A new tag for every prompt
// comes from Core.promptTag.
func RenderPrompt(tag string, msgs []*fsstore.Message) string {
	out := make([]prompt.Message, len(msgs))
	for i, m := range msgs {
		out[i] = promptMessage(m)
	}
	return prompt.Render(tag, out)
}

// promptMessage is m as a prompt shows it: from SYSTEM, from USER, or
// from an agent by its name (an agent named SYSTEM still reads as one).
func promptMessage(m *fsstore.Message) prompt.Message {
	switch m.From {
	case fsstore.System, fsstore.User:
		return prompt.Message{ID: m.ID, Sender: m.From, Text: m.Text}
	}
	name := m.FromName
	if name == "" {
		name = m.From
	}
	return prompt.Message{ID: m.ID, Sender: name, Agent: true, Text: m.Text}
}

// agentText renders s, which an agent wrote (a reminder's reason, an
// error its provider gave), inside a text of the daemon's: as a Go quoted
// string on one line, so that no part of it can pose as more of the
// daemon's text or as a line of its own.
func agentText(s string) string { return strconv.Quote(s) }

// agentName renders a name an agent chose (a tool's name) inside a text of
// the daemon's: as is if it is a plain identifier, else quoted.
func agentName(s string) string {
	if plainName.MatchString(s) {
		return s
	}
	return agentText(s)
}

var plainName = regexp.MustCompile(`^[A-Za-z0-9_.:-]+$`)

// promptTag is a new tag for a prompt (package prompt): unpredictable to
// the agents, drawn from the store's id generator so that the simulation,
// which seeds that generator, replays the same prompts.
func (c *Core) promptTag() string { return prompt.Tag(c.store.NewID()) }

// turnHeld runs a turn of n, which the caller holds. A store error after
// the turn took its messages (a commit that failed: a full or read-only
// disk, an fsync error) goes the way of a failed turn (storeFailed).
func (c *Core) turnHeld(ctx context.Context, n *node) error {
	msgs, err := c.takeTurn(ctx, n)
	if err != nil && msgs != nil {
		return c.storeFailed(ctx, n, msgs, err)
	}
	return err
}

// takeTurn is turnHeld's work. It returns the messages of the turn once
// it has taken them, with the error of a step that failed after that;
// a failed provider turn is handled (turnFailed) and not returned.
func (c *Core) takeTurn(ctx context.Context, n *node) ([]*fsstore.Message, error) {
	msgs, bad, err := n.agent.Pending()
	for _, b := range bad {
		c.log.Warn("skipping an unreadable inbox file", "agent", n.id(), "path", b.Path, "reason", b.Reason)
	}
	if err != nil {
		return nil, storeErr(err)
	}
	c.mu.Lock()
	n.mail = false // arrivals during the turn set it again
	c.mu.Unlock()
	if len(msgs) == 0 {
		return nil, nil
	}
	tools := newTurnTools(c, n, msgs)
	tools.done = ctx.Done()
	tools.clock = turnCtxOf(ctx)
	defer tools.releaseSpawned()

	// A live session first: the pool may need to evict another one, or,
	// if every session there is busy, the turn waits for a slot.
	live, err := c.ensureSession(ctx, n)
	if errors.Is(err, errPoolFull) {
		c.mu.Lock()
		n.mail, n.waitSlot = true, true // until some busy node is released
		c.slotWaiters++
		c.mu.Unlock()
		return nil, nil
	}
	if err != nil {
		return msgs, c.turnFailed(ctx, n, msgs, err)
	}
	if err := c.beginTurn(n, tools); err != nil {
		return msgs, err
	}
	defer func() {
		c.mu.Lock()
		n.turn = nil
		c.mu.Unlock()
	}()
	c.effects(n) // a turn run again is told what it did before
	shown := msgs
	if note := c.replayNote(n, tools.turnKey); note != "" {
		shown = append(slices.Clone(msgs), &fsstore.Message{ID: "replay-" + tools.turnKey, From: fsstore.System,
			FromName: fsstore.System, Kind: fsstore.KindSystem, Text: note})
	}
	text := RenderPrompt(c.promptTag(), shown)
	res, rec, err := c.runTurn(ctx, n, live, text, tools)
	if err != nil {
		return msgs, err
	}
	if res == nil {
		return msgs, nil // the turn failed, and turnFailed dealt with it
	}
	c.publishBranch(n.s())
	end, done := c.turnEnd(n, tools)
	ids, err := c.deliverTurn(n, msgs, tools, rec, end...)
	if err != nil {
		return msgs, err
	}
	c.forgetEffects(n, tools.turnKey)
	if done {
		if err := c.terminateHeld(n, n.s().StateReason); err != nil {
			return msgs, err
		}
	}
	c.snapshot(n)
	c.transcript(n, text, res.Text, res.Compactions)
	c.mu.Lock()
	c.publishLocked(api.WatchEvent{Agent: n.id(), Name: n.s().Name, Type: api.WatchTurnDone, Time: c.clock.Now().UTC(),
		Data: map[string]any{"text": res.Text, "usage": res.Usage}})
	n.failures, n.retryAt = nil, time.Time{}
	c.mu.Unlock()
	c.checkBudgets(n)
	c.outcomes.settle(ids, Outcome{Text: res.Text})
	return msgs, nil
}

// beginTurn makes n BUSY with tools as its turn's, after what an earlier
// turn left: a BUSY left by a store error, a permit to use up.
func (c *Core) beginTurn(n *node, tools *turnTools) error {
	if n.s().AgentState == fsstore.AgentBusy {
		// Left BUSY by a store error in an earlier turn.
		if err := c.commit(n, fsstore.StateChange{AgentState: fsstore.AgentIdle, Reason: "recovered from a store error"}); err != nil {
			return err
		}
	}
	if n.s().Gated {
		if err := c.commit(n, fsstore.GateChange{AddPermits: -1}); err != nil {
			return err
		}
	}
	c.mu.Lock()
	n.turn = tools
	n.lastUsed = c.clock.Now()
	c.mu.Unlock()
	return c.commit(n, fsstore.StateChange{AgentState: fsstore.AgentBusy})
}

// runTurn sends the prompt to the live session, streaming its output to
// watchers and recording the tools the provider's own rules refused and
// its compactions. It returns the turn's record, for deliverTurn to commit
// with the delivery. A failed turn goes to turnFailed, and runTurn
// returns a nil result and turnFailed's error.
func (c *Core) runTurn(ctx context.Context, n *node, live provider.Session, prompt string, tools *turnTools) (*provider.TurnResult, fsstore.TurnRecord, error) {
	var denied []fsstore.ToolDenied // tools the provider's own rules refused
	var kept outputLog              // what the turn event keeps of the output
	instructions := n.s().Instructions
	output := func(ch provider.Chunk) {
		c.mu.Lock()
		if ch.Kind == provider.ChunkDenied {
			denied = append(denied, fsstore.ToolDenied{Tool: ch.Tool, Reason: ch.Text})
		}
		kept.add(ch)
		c.publishLocked(api.WatchEvent{Agent: n.id(), Name: n.s().Name, Type: api.WatchOutput, Time: c.clock.Now().UTC(), Data: ch})
		c.mu.Unlock()
	}
	set := c.settings()
	res, err := live.Send(ctx, provider.Turn{Prompt: prompt, Tools: tools, ToolList: c.toolList(n.s()), Instructions: &instructions,
		ContextWindow: set.contextWindow(n.s().Provider, n.s().Model), CompactAt: set.CompactAt, Output: output})
	tools.finish() // no approval wait changes the agent's state after this
	// A limit reached during the turn is why it failed, rather than the
	// bare exit status or signal the provider saw; asked after every
	// turn, so that a turn that survived its limit is not blamed later.
	if why := c.host.LimitReached(n.id()); why != "" && err != nil {
		err = fmt.Errorf("%s: %w", why, err)
	}
	c.mu.Lock()
	refused := denied
	c.mu.Unlock()
	for _, d := range refused {
		if cerr := c.commit(n, d); cerr != nil {
			return nil, fsstore.TurnRecord{}, cerr
		}
	}
	if err != nil {
		return nil, fsstore.TurnRecord{}, c.turnFailed(ctx, n, tools.prompt(), err)
	}
	// Its compactions, then its counters (their usage includes that of the
	// summary requests).
	for _, cp := range res.Compactions {
		if err := c.commit(n, fsstore.Compaction{Provider: n.s().Provider, Reason: cp.Reason,
			Replaced: cp.Replaced, FirstTurn: cp.FirstTurn, LastTurn: cp.LastTurn, Dropped: cp.Dropped, Summary: cp.Summary,
			TokensBefore: cp.TokensBefore, TokensAfter: cp.TokensAfter, Window: res.ContextWindow}); err != nil {
			return nil, fsstore.TurnRecord{}, err
		}
	}
	c.mu.Lock()
	rec := fsstore.TurnRecord{Counters: fsstore.Counters{Turns: 1, InputTokens: res.Usage.InputTokens,
		OutputTokens: res.Usage.OutputTokens, CostUSD: res.Usage.CostUSD,
		ContextTokens: int64(res.ContextTokens), ContextWindow: int64(res.ContextWindow)}}.Keep(tools.prompt(), kept.parts)
	rec.Cut += kept.cut
	c.mu.Unlock()
	return &res, rec, nil
}

// deliverTurn records the turn (rec), delivers the prompt's messages and
// those check_inbox handed over, records end (the events that end the
// turn, turnEnd's), and returns the ids delivered. The log first, all in
// one write and one fsync; then the inbox. A crash before the delivery
// event is durable leaves a turn whose messages are taken again; one
// after it leaves the messages in inbox/new under a message_delivered
// event, and the next scan finishes the delivery (fsstore
// FindUnfinishedDelivery). So the links into cur/ need no fsync of their
// own: the event is what makes the delivery durable.
func (c *Core) deliverTurn(n *node, msgs []*fsstore.Message, tools *turnTools, rec fsstore.TurnRecord, end ...fsstore.Payload) ([]string, error) {
	ids := make([]string, 0, len(msgs))
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	ids = append(ids, tools.checkedIDs()...)
	if err := c.commit(n, append([]fsstore.Payload{rec, fsstore.Delivered{IDs: ids}}, end...)...); err != nil {
		return ids, err
	}
	if err := n.agent.MarkDelivered(ids); err != nil {
		return ids, storeErr(err)
	}
	c.mu.Lock()
	n.pending = max(0, n.pending-len(ids))
	c.mu.Unlock()
	if _, err := n.agent.SweepDelivered(c.clock.Now()); err != nil {
		c.log.Warn("delivered messages not swept from inbox/new", "agent", n.id(), "err", err)
	}
	return ids, nil
}

// turnEnd returns the events that end n's turn: WAITING if a request it
// sent awaits a reply, else IDLE. If it completed (done), there are none:
// the caller terminates it (terminateHeld).
func (c *Core) turnEnd(n *node, tools *turnTools) (end []fsstore.Payload, done bool) {
	c.mu.Lock()
	done = n.terminated()
	waiting := n.s().WaitingFor
	c.mu.Unlock()
	if done {
		return nil, true
	}
	if requests := tools.requestsSent(); len(requests) > 0 {
		waiting = addWaiting(waiting, requests)
		end = append(end, fsstore.Waiting{IDs: waiting})
	}
	if len(waiting) > 0 {
		// A request is outstanding: WAITING until the reply wakes it.
		return append(end, fsstore.StateChange{AgentState: fsstore.AgentWaiting}), false
	}
	return append(end, fsstore.StateChange{AgentState: fsstore.AgentIdle}), false
}

// turnFailed handles a turn that did not finish: the messages stay in the
// inbox, the provider session is put aside (it resumes on the next turn),
// and the agent goes back to IDLE. The turn is retried after a backoff
// that doubles with each failure (1 s, 2 s, 4 s...); Settings.RetryLimit
// failures within Settings.RetryWindow gate the agent with the reason recorded. Its parent
// (or USER, for a root) is told at the first failure and at the limit.
func (c *Core) turnFailed(ctx context.Context, n *node, msgs []*fsstore.Message, cause error) error {
	if rl := isRateLimited(cause); rl != nil && ctx.Err() == nil {
		return c.parkTurn(n, msgs, rl) // not a failure: park.go
	}
	c.log.Warn("turn failed", "agent", n.id(), "name", n.s().Name, "err", cause)
	pending := len(msgs)
	// The clients waiting for the turn are told once it is on record (a
	// client that reads the log next finds the turn_failed event).
	defer c.outcomes.settle(messageIDs(msgs), Outcome{Failed: "turn failed: " + cause.Error()})
	cancelled := ctx.Err() != nil && errors.Is(cause, context.Canceled)
	now := c.clock.Now()
	set := c.settings()
	restartLimit, restartWindow, restartBase := set.RetryLimit, set.RetryWindow, set.RetryBase
	c.mu.Lock()
	live := n.live
	n.live = nil
	var streak int
	if !cancelled {
		kept := n.failures[:0]
		for _, t := range n.failures {
			if now.Sub(t) < restartWindow {
				kept = append(kept, t)
			}
		}
		n.failures = append(kept, now)
		streak = len(n.failures)
		n.retryAt = now.Add(restartBase << (streak - 1))
		n.mail = pending > 0 // kept for the retry
	}
	c.mu.Unlock()
	if live != nil {
		live.Stop()
	}
	if n.s().SessionState == fsstore.SessionActive {
		if err := c.commit(n, fsstore.StateChange{SessionState: fsstore.SessionSuspended, Reason: "turn failed"}); err != nil {
			return err
		}
	}
	if err := c.commit(n, fsstore.TurnFailed{Error: cause.Error(), Messages: pending}); err != nil {
		return err
	}
	if !n.terminated() {
		reason := "turn failed: " + cause.Error()
		if err := c.commit(n, fsstore.StateChange{AgentState: fsstore.AgentIdle, Reason: reason}); err != nil {
			return err
		}
	}
	limit := streak >= restartLimit
	if limit {
		yes := true
		reason := fmt.Sprintf("restart limit: %d failed turns within %s, the last: %v", streak, restartWindow, cause)
		if err := c.commit(n, fsstore.GateChange{Gated: &yes, Reason: reason}); err != nil {
			return err
		}
		c.log.Error("agent gated after repeated failures", "agent", n.id(), "reason", reason)
		defer c.notifyAbout(api.NotifyGated, n, reason, time.Time{})
	}
	c.snapshot(n)
	if cancelled || (streak != 1 && !limit) {
		return nil // terminated or shutting down; or already told
	}
	c.mu.Lock()
	path := c.pathLocked(n)
	parent := c.nodes[n.s().ParentID]
	c.mu.Unlock()
	text := fmt.Sprintf("The turn of %s failed: %s. Its %d message(s) are kept in its inbox; "+
		"it is retried with a growing delay, and gated after %d failures within %s.", path, agentText(fmt.Sprint(cause)), pending, restartLimit, restartWindow)
	if limit {
		text = fmt.Sprintf("%s failed %d times within %s (the last: %s) and is now gated; its %d message(s) are kept. "+
			"Fix the cause, then ungate it (from the CLI: substrat agent ungate %s).", path, streak, restartWindow, agentText(fmt.Sprint(cause)), pending, path)
	}
	m := &fsstore.Message{From: fsstore.System, FromName: fsstore.System, Kind: fsstore.KindSystem, Text: text}
	if parent != nil && !parent.terminated() {
		_, err := c.send(m, parent)
		return err
	}
	return c.sendUser(m)
}

// transcript appends a readable record of a turn to transcript.txt. It is
// for people only and not fsynced; failures are logged.
func (c *Core) transcript(n *node, prompt, out string, compactions []provider.Compaction) {
	var b strings.Builder
	for _, cp := range compactions {
		// The transcript keeps the whole conversation; this says what the
		// model sees no more.
		fmt.Fprintf(&b, "=== context compacted (%s): %s replaced by a summary, %d -> %d tokens\n", cp.Reason, cp.Replaced, cp.TokensBefore, cp.TokensAfter)
	}
	fmt.Fprintf(&b, "=== %s turn %d\n%s--- %s\n%s\n\n", c.clock.Now().UTC().Format("2006-01-02T15:04:05Z"),
		n.s().Counters.Turns, prompt, n.s().Name, strings.TrimRight(out, "\n"))
	if err := n.agent.AppendTranscript(b.String()); err != nil {
		c.log.Warn("transcript not written", "agent", n.id(), "err", err)
	}
}

// storeFailed handles a store error in the middle of a turn (a commit that
// failed after the turn took its messages): the agent's state is read
// again from disk, since after a failed write or fsync the file holds the
// event or not and only a re-read tells (an fsync is never retried), and
// the turn goes the way of a failed turn: its messages stay in the inbox,
// the waiting clients are told, and it is retried with backoff, then
// gated. If the disk still refuses, the agent is left to the retry, which
// first puts it back to IDLE.
func (c *Core) storeFailed(ctx context.Context, n *node, msgs []*fsstore.Message, cause error) error {
	c.log.Error("store error in a turn; re-reading the agent from disk", "agent", n.id(), "err", cause)
	if a, findings := c.store.Load(n.id(), false); a != nil {
		c.mu.Lock()
		old := n.agent
		n.agent = a
		n.state.Store(a.Session())
		c.mu.Unlock()
		old.Close()
	} else {
		c.log.Error("the agent could not be read again; keeping its last state", "agent", n.id(), "findings", findings)
	}
	err := c.turnFailed(ctx, n, msgs, fmt.Errorf("store error: %w", cause))
	c.mu.Lock()
	n.mail = true // its messages are still in the inbox
	if n.retryAt.IsZero() {
		n.retryAt = c.clock.Now().Add(c.settings().RetryBase)
	}
	c.mu.Unlock()
	c.signal()
	if err != nil {
		c.log.Error("the failed turn could not be recorded; it is retried", "agent", n.id(), "err", err)
	}
	return cause
}

// outputLog gathers a turn's output for its turn event, in bounded
// memory: consecutive text chunks are joined, and once the bound of
// fsstore.TurnRecord is reached what follows is only counted
// (TurnRecord.Keep cuts the last part kept).
type outputLog struct {
	parts []fsstore.OutputPart
	size  int // bytes of text kept
	cut   int // bytes left out
}

func (l *outputLog) add(ch provider.Chunk) {
	if l.size >= fsstore.MaxTurnOutput || len(l.parts) >= 256 {
		l.cut += len(ch.Text)
		return
	}
	l.size += len(ch.Text)
	if last := len(l.parts) - 1; last >= 0 && ch.Kind == provider.ChunkText && l.parts[last].Kind == provider.ChunkText {
		l.parts[last].Text += ch.Text
		return
	}
	l.parts = append(l.parts, fsstore.OutputPart{Kind: ch.Kind, Tool: ch.Tool, Text: ch.Text})
}
