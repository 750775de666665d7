package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/substrat/substrat/fsstore"
)

// One approval request per tool call, across restarts.
//
// A turn cut short (a kill -9 of the daemon, a failed provider turn) runs
// again with the same messages, and its provider asks again for the same
// calls, often under new tool-use ids. A request is therefore keyed by the
// call: the tool and its input in canonical JSON (call_key), and the
// first message of the turn that asked (batch), which stays in the inbox
// until that turn ends. A turn that asks for a call whose request its
// prompt's batch already holds gets that request: a pending one is waited
// for (until its own deadline, set when it was first asked), an answered
// one answers at once. So the approver sees one request, and its answer,
// given before or after the restart, releases the turn that asks again.
//
// While a turn waits for an approval, its agent is WAITING (an event,
// with the request in the reason), and the turn's clock stops: the
// approval timeout, not the turn timeout, bounds the wait.

// approvalCall is one request_approval call, once the rules had no say.
type approvalCall struct {
	tool      string
	input     json.RawMessage
	toolUseID string
	approver  string
	timeout   time.Duration
}

// callKey names a use of tool with input: a digest of the tool's name and
// the input as canonical JSON (keys sorted, no blanks), so that the same
// call asked again matches however its JSON was spelled.
func callKey(tool string, input json.RawMessage) string {
	canon := []byte(input)
	var v any
	if err := json.Unmarshal(input, &v); err == nil {
		if b, err := json.Marshal(v); err == nil {
			canon = b
		}
	}
	h := sha256.New()
	h.Write([]byte(tool))
	h.Write([]byte{0})
	h.Write(canon)
	return hex.EncodeToString(h.Sum(nil))
}

// sameCallLocked returns n's request for the call with key asked by a
// turn with this prompt (the newest, if several), if there is one.
func (t *turnTools) sameCallLocked(key string) (fsstore.Approval, bool) {
	ap := t.n.s().Approvals
	for i := len(ap) - 1; i >= 0; i-- {
		if a := ap[i]; a.CallKey == key && a.Batch != "" && t.inTurn[a.Batch] {
			return a, true
		}
	}
	return fsstore.Approval{}, false
}

// askOnce gets call approved or denied: by the request for the same call
// if there is one, else by a new request. why says why it was denied.
func (t *turnTools) askOnce(ctx context.Context, call approvalCall) (allowed bool, why string, err error) {
	c := t.c
	req, answer, done, err := t.findOrAsk(callKey(call.tool, call.input), call)
	switch {
	case err != nil:
		return false, "", err
	case done:
		return answered(fsstore.ApprovalAnswer{Answer: req.Answer, Reason: req.Reason, By: req.By})
	}
	defer c.approvals.done(req.ID, answer)
	t.approvalWait(req.ID, true)
	defer t.approvalWait(req.ID, false)
	wait := req.Deadline.Sub(c.clock.Now())
	timer := time.NewTimer(max(wait, 0))
	defer timer.Stop()
	select {
	case ans := <-answer:
		return answered(ans)
	case <-timer.C:
		why := fmt.Sprintf("no answer within %s: denied", req.Deadline.Sub(req.RequestedAt).Round(time.Millisecond))
		got, err := c.answer(fsstore.ApprovalAnswer{ID: req.ID, Answer: fsstore.ApprovalExpired, Reason: why, By: fsstore.System}, "")
		switch {
		case err != nil && got.Answer != "" && got.Answer != fsstore.ApprovalExpired: // answered just before
			return answered(fsstore.ApprovalAnswer{Answer: got.Answer, Reason: got.Reason, By: got.By})
		case err != nil && got.Answer == "":
			return false, "", err
		}
		return false, why, nil
	case <-ctx.Done():
		return false, "", ctx.Err()
	case <-t.done:
		return false, "", fmt.Errorf("the turn ended while approval request %s waited; it stays listed", req.ID)
	}
}

// findOrAsk finds the request for the call with key, or makes it and
// tells its approver, one call at a time within the turn (so that the
// same call asked twice at once makes one request and one message). It
// returns the request and a channel that gets its answer, or, with done,
// the request already answered.
func (t *turnTools) findOrAsk(key string, call approvalCall) (req fsstore.Approval, answer chan fsstore.ApprovalAnswer, done bool, err error) {
	c, n := t.c, t.n
	t.askMu.Lock()
	defer t.askMu.Unlock()
	c.mu.Lock()
	req, found := t.sameCallLocked(key)
	c.mu.Unlock()
	if found {
		answer = c.approvals.wait(req.ID)
		// Answered meanwhile, before the waiter was there?
		c.mu.Lock()
		if _, cur := c.findApprovalLocked(req.ID); cur.ID != "" {
			req = cur
		}
		c.mu.Unlock()
		if !req.Pending() {
			c.approvals.done(req.ID, answer)
			c.log.Info("approval request asked again: answered already", "agent", n.id(), "request", req.ID, "answer", req.Answer)
			return req, nil, true, nil
		}
		c.log.Info("approval request asked again: still waiting", "agent", n.id(), "request", req.ID)
		c.tellApproverAgain(n, req)
		return req, answer, false, nil
	}
	now := c.clock.Now().UTC()
	req = fsstore.Approval{ID: uuid.Must(uuid.NewV7()).String(), Tool: call.tool, Input: call.input, ToolUseID: call.toolUseID,
		CallKey: key, Batch: t.turnKey, Approver: call.approver, RequestedAt: now, Deadline: now.Add(call.timeout)}
	answer = c.approvals.wait(req.ID)
	if err := c.commit(n, req); err != nil {
		c.approvals.done(req.ID, answer)
		return req, nil, true, err
	}
	if err := c.askApprover(n, req); err != nil {
		c.log.Error("approval request not sent", "agent", n.id(), "request", req.ID, "err", err)
	}
	return req, answer, false, nil
}

// answered is what an answer means for the call.
func answered(ans fsstore.ApprovalAnswer) (bool, string, error) {
	if ans.Answer == fsstore.ApprovalAllow {
		return true, "", nil
	}
	return false, firstNonEmpty(ans.Reason, "denied by "+ans.By), nil
}

// tellApproverAgain delivers the message of a pending request asked again
// if its approver does not have it: the daemon may have died between the
// request and its message. The message's id is the request's.
func (c *Core) tellApproverAgain(n *node, req fsstore.Approval) {
	c.mu.Lock()
	to := c.nodes[req.Approver]
	c.mu.Unlock()
	if c.hasMessage(to, req.ID) {
		return
	}
	if err := c.askApprover(n, req); err != nil {
		c.log.Error("approval request not sent", "agent", n.id(), "request", req.ID, "err", err)
	}
}

// approvalWait marks the start (begin) or the end of a wait for request
// id. While any wait of the turn lasts, the turn's clock is stopped and
// the agent is WAITING; after the last, BUSY again. Once the provider's
// turn has returned (finish), the turn's end sets the state instead.
func (t *turnTools) approvalWait(id string, begin bool) {
	t.waitMu.Lock()
	defer t.waitMu.Unlock()
	if begin {
		t.waits++
	} else {
		t.waits--
	}
	if t.clock != nil {
		if begin {
			t.clock.pause()
		} else {
			t.clock.resume()
		}
	}
	if t.ended || (begin && t.waits != 1) || (!begin && t.waits != 0) {
		return
	}
	c, n := t.c, t.n
	c.mu.Lock()
	state := n.s().AgentState
	inTurn := n.turn == t
	c.mu.Unlock()
	var ch fsstore.StateChange
	switch {
	case !inTurn:
		return
	case begin && state == fsstore.AgentBusy:
		ch = fsstore.StateChange{AgentState: fsstore.AgentWaiting, Reason: "waiting for approval request " + id}
		t.markedWaiting = true
	case !begin && t.markedWaiting && state == fsstore.AgentWaiting:
		ch = fsstore.StateChange{AgentState: fsstore.AgentBusy, Reason: "approval request " + id + " answered"}
		t.markedWaiting = false
	default:
		return
	}
	if err := c.commit(n, ch); err != nil {
		c.log.Warn("agent state not changed for an approval wait", "agent", n.id(), "state", ch.AgentState, "err", err)
	}
}

// finish marks the end of the provider's turn: from now on the turn's end
// sets the agent's state, and approval waits no longer do.
func (t *turnTools) finish() {
	t.waitMu.Lock()
	defer t.waitMu.Unlock()
	t.ended = true
}
