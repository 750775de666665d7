package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/google/uuid"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
)

// Approval requests.
//
// An agent outside a sandbox runs in its CLI's safe mode. What that mode
// would prompt a person for, the CLI asks the request_approval tool
// instead (claude: --permission-prompt-tool). The tool records the request
// in the agent's session (an approval_requested event, durable before
// anything waits), delivers a message of kind approval to the approver
// (the parent, or USER for a root), and waits for the answer, the
// request's deadline or the end of the turn, whichever comes first. The
// parent answers with the approve tool, USER with `substrat approve` or
// `substrat deny`. A request whose turn died (a kill -9, a timeout) stays
// listed and can still be answered: the answer is recorded, and a rule it
// remembers applies to the agent's later requests and sessions.

// ApprovalTool is the name of the tool a provider CLI calls for a
// permission prompt (as an MCP tool: mcp__substrat__request_approval).
const ApprovalTool = provider.ApprovalTool

// approvals are the waiters of pending requests, by request id, and the
// requests of agents archived since the start.
type approvals struct {
	mu      sync.Mutex
	waiters map[string]chan fsstore.ApprovalAnswer
	gone    map[string]string // request id -> path of its archived agent
}

func (a *approvals) wait(id string) chan fsstore.ApprovalAnswer {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.waiters == nil {
		a.waiters = map[string]chan fsstore.ApprovalAnswer{}
	}
	ch := make(chan fsstore.ApprovalAnswer, 1)
	a.waiters[id] = ch
	return ch
}

func (a *approvals) done(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.waiters, id)
}

// tell hands an answer to the request's waiter, if a turn still waits.
func (a *approvals) tell(ans fsstore.ApprovalAnswer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ch := a.waiters[ans.ID]; ch != nil {
		ch <- ans
		delete(a.waiters, ans.ID)
	}
}

func (a *approvals) archived(n *node, path string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range n.s().Approvals {
		if a.gone == nil {
			a.gone = map[string]string{}
		}
		a.gone[r.ID] = path
	}
}

func (a *approvals) archivedPath(id string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.gone[id]
}

func approvalTools() []tool {
	return []tool{
		{api.ToolSpec{Name: ApprovalTool, Description: "Ask for permission to use a tool (called by the provider CLI when its permission mode would prompt). " +
			"The request goes to the agent's approver; the answer is JSON {\"behavior\":\"allow\"|\"deny\",...}.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"tool_name":{"type":"string"},"input":{"type":"object"},"tool_use_id":{"type":"string"}},"required":["tool_name"]}`)},
			(*turnTools).requestApproval},
		newTool("approve", "Answer an approval request of one of your children (its id is in the approval message): allow true or false, "+
			"a reason, and optionally a rule to remember for the rest of its life, such as \"Bash(git *)\".", (*turnTools).approve),
	}
}

// promptAnswer is what the CLI reads back from request_approval.
type promptAnswer struct {
	Behavior     string          `json:"behavior"`
	UpdatedInput json.RawMessage `json:"updatedInput,omitempty"`
	Message      string          `json:"message,omitempty"`
}

func (t *turnTools) requestApproval(ctx context.Context, call provider.ToolCall) (string, error) {
	var a struct {
		ToolName  string          `json:"tool_name"`
		Input     json.RawMessage `json:"input"`
		ToolUseID string          `json:"tool_use_id"`
	}
	if err := json.Unmarshal(orEmpty(call.Args), &a); err != nil || a.ToolName == "" {
		return "", fmt.Errorf("bad arguments: want tool_name and input")
	}
	if len(a.Input) == 0 || string(a.Input) == "null" {
		a.Input = json.RawMessage(`{}`)
	}
	allow := func() (string, error) {
		b, err := json.Marshal(promptAnswer{Behavior: "allow", UpdatedInput: a.Input})
		return string(b), err
	}
	deny := func(why string) (string, error) {
		b, err := json.Marshal(promptAnswer{Behavior: "deny", Message: why})
		return string(b), err
	}
	c, n := t.c, t.n
	c.mu.Lock()
	perm := effectivePermissions(n.s())
	approver := c.approverLocked(n, perm.Approver)
	c.mu.Unlock()
	if r := matchRule(perm.DisallowedTools, a.ToolName, a.Input); r != "" {
		return deny("denied by the agent's rule " + r)
	}
	if r := matchRule(perm.AllowedTools, a.ToolName, a.Input); r != "" {
		return allow()
	}
	if approver == "" {
		return deny("this agent's approver is deny: what its permission mode would prompt for is denied")
	}
	now := c.clock.Now().UTC()
	req := fsstore.Approval{ID: uuid.Must(uuid.NewV7()).String(), Tool: a.ToolName, Input: a.Input, ToolUseID: a.ToolUseID,
		Approver: approver, RequestedAt: now, Deadline: now.Add(c.approvalTimeout(perm))}
	answer := c.approvals.wait(req.ID)
	defer c.approvals.done(req.ID)
	if err := c.commit(n, fsstore.EvApprovalRequested, req); err != nil {
		return "", err
	}
	if err := c.askApprover(n, req); err != nil {
		c.log.Error("approval request not delivered", "agent", n.id(), "request", req.ID, "err", err)
	}
	timer := time.NewTimer(c.approvalTimeout(perm))
	defer timer.Stop()
	select {
	case ans := <-answer:
		if ans.Answer == fsstore.ApprovalAllow {
			return allow()
		}
		return deny(firstNonEmpty(ans.Reason, "denied by "+ans.By))
	case <-timer.C:
		why := fmt.Sprintf("no answer within %s: denied", c.approvalTimeout(perm))
		got, err := c.answer(fsstore.ApprovalAnswer{ID: req.ID, Answer: fsstore.ApprovalExpired, Reason: why, By: fsstore.System}, "")
		switch {
		case err != nil && got.Answer == fsstore.ApprovalAllow: // answered just before
			return allow()
		case err != nil && got.Answer == "":
			return "", err
		}
		return deny(why)
	case <-ctx.Done():
		return "", ctx.Err()
	case <-t.done:
		return "", fmt.Errorf("the turn ended while approval request %s waited; it stays listed", req.ID)
	}
}

// approverLocked returns who answers n's requests: its parent's id, USER,
// or "" for nobody.
func (c *Core) approverLocked(n *node, setting string) string {
	switch setting {
	case fsstore.ApproverDeny:
		return ""
	case fsstore.ApproverUser:
		return fsstore.User
	}
	if p := c.nodes[n.s().ParentID]; p != nil && !p.terminated() {
		return p.id()
	}
	return fsstore.User
}

// askApprover delivers the request's message to its approver.
func (c *Core) askApprover(n *node, req fsstore.Approval) error {
	c.mu.Lock()
	who := c.pathLocked(n)
	to := c.nodes[req.Approver]
	c.mu.Unlock()
	// What the agent wrote (the tool's name and input) is shown so that it
	// cannot pose as more of this text: on one line, delimited.
	input := agentJSON(req.Input)
	if len(input) > 2000 {
		input = input[:2000] + "…"
	}
	how := fmt.Sprintf("Answer with the approve tool: request_id %q, allow true or false, a reason, and optionally a rule to remember (such as %q).",
		req.ID, ruleFor(req.Tool, req.Input))
	if to == nil {
		how = fmt.Sprintf("Answer with: substrat approve %s [--remember %q]   or   substrat deny %s --reason WHY", req.ID, ruleFor(req.Tool, req.Input), req.ID)
	}
	text := fmt.Sprintf("Approval request %s: %s wants to use %s with %s. It waits until %s, then it is denied.\n%s",
		req.ID, who, agentName(req.Tool), input, req.Deadline.Local().Format("15:04:05"), how)
	m := &fsstore.Message{From: fsstore.System, FromName: fsstore.System, Kind: fsstore.KindApproval, Text: text}
	if to == nil {
		return c.sendUser(m)
	}
	_, err := c.deliver(m, to)
	return err
}

func (t *turnTools) approve(ctx context.Context, call provider.ToolCall, a approveArgs) (string, error) {
	req, err := t.c.Answer(ctx, api.AnswerParams{ID: a.RequestID, Allow: a.Allow, Reason: a.Reason, Remember: a.Remember, By: t.n.id()})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("request %s: %s", req.ID, req.Answer), nil
}

// Answer answers an approval request: the first answer wins; the turn
// that waits for it (if any) goes on with it.
func (c *Core) Answer(ctx context.Context, p api.AnswerParams) (fsstore.Approval, error) {
	if p.Remember != "" {
		if err := fsstore.CheckRule(p.Remember); err != nil {
			return fsstore.Approval{}, api.Errorf(api.CodeInvalidParams, "%v", err)
		}
	}
	ans := fsstore.ApprovalAnswer{ID: p.ID, Answer: fsstore.ApprovalDeny, Reason: p.Reason, By: p.By, Remember: p.Remember}
	if p.Allow {
		ans.Answer = fsstore.ApprovalAllow
	}
	return c.answer(ans, p.By)
}

// answer records ans on the request's agent, checking that by (unless
// empty: the daemon itself) is its approver.
func (c *Core) answer(ans fsstore.ApprovalAnswer, by string) (fsstore.Approval, error) {
	c.mu.Lock()
	n, req := c.findApprovalLocked(ans.ID)
	var approverPath string
	if n != nil {
		approverPath = fsstore.User
		if a := c.nodes[req.Approver]; a != nil {
			approverPath = c.pathLocked(a)
		}
	}
	c.mu.Unlock()
	switch {
	case n == nil && c.approvals.archivedPath(ans.ID) != "":
		return req, api.Errorf(api.CodeNotFound, "approval request %s belongs to %s, which was archived: it can no longer be answered",
			ans.ID, c.approvals.archivedPath(ans.ID))
	case n == nil:
		return req, api.Errorf(api.CodeNotFound, "no approval request %s among the live agents (see substrat inbox, or agent inspect)", ans.ID)
	case !req.Pending():
		return req, api.Errorf(api.CodeConflict, "approval request %s was already answered: %s by %s at %s%s", ans.ID, req.Answer,
			c.nameOf(req.By), req.AnsweredAt.Local().Format(time.DateTime), reasonOf(req.Reason))
	case by != "" && by != req.Approver:
		return req, api.Errorf(api.CodeInvalidRequest, "approval request %s is for %s to answer, not %s", ans.ID, approverPath, c.nameOf(by))
	}
	ans.AnsweredAt = c.clock.Now().UTC()
	if err := c.commit(n, fsstore.EvApprovalAnswered, ans); err != nil {
		return req, err
	}
	c.approvals.tell(ans)
	req.Answer, req.Reason, req.By, req.Remember, req.AnsweredAt = ans.Answer, ans.Reason, ans.By, ans.Remember, ans.AnsweredAt
	c.log.Info("approval answered", "agent", n.id(), "request", ans.ID, "answer", ans.Answer, "by", ans.By)
	return req, nil
}

func reasonOf(r string) string {
	if r == "" {
		return ""
	}
	return " (" + r + ")"
}

func (c *Core) nameOf(id string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.nodes[id]; n != nil {
		return c.pathLocked(n)
	}
	return id
}

// findApprovalLocked finds the live agent that holds request id.
func (c *Core) findApprovalLocked(id string) (*node, fsstore.Approval) {
	for _, n := range c.nodes {
		for _, a := range n.s().Approvals {
			if a.ID == id {
				return n, a
			}
		}
	}
	return nil, fsstore.Approval{}
}

// PendingApprovals lists every request still waiting, oldest first.
func (c *Core) PendingApprovals() []api.PendingApproval {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := []api.PendingApproval{}
	for _, n := range c.nodes {
		for _, a := range n.s().Approvals {
			if a.Pending() {
				out = append(out, api.PendingApproval{Approval: a, Agent: c.pathLocked(n)})
			}
		}
	}
	slices.SortFunc(out, func(a, b api.PendingApproval) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// matchRule returns the first rule of rules that covers a use of tool
// with input, or "". A rule is a tool name ("Edit"), or a name with a
// pattern in parentheses matched against the command (Bash) or the file
// path or URL the input names, where * matches any run of characters
// ("Bash(git *)", "Write(/tmp/*)").
func matchRule(rules []string, tool string, input json.RawMessage) string {
	var in map[string]any
	json.Unmarshal(input, &in)
	subject := ""
	for _, k := range []string{"command", "file_path", "path", "notebook_path", "url", "pattern"} {
		if s, ok := in[k].(string); ok {
			subject = s
			break
		}
	}
	for _, r := range rules {
		name, spec, paren := strings.Cut(r, "(")
		if name != tool {
			continue
		}
		if !paren {
			return r
		}
		if glob(strings.TrimSuffix(spec, ")"), subject) {
			return r
		}
	}
	return ""
}

// glob matches s against pattern, where * is any run of characters
// (slashes and blanks included) and everything else is literal.
func glob(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return s == pattern
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return strings.HasSuffix(s, parts[len(parts)-1])
}

// ruleFor suggests a rule that would cover this use again: for a command,
// its first word; for a file, its directory.
func ruleFor(tool string, input json.RawMessage) string {
	var in map[string]any
	json.Unmarshal(input, &in)
	if cmd, ok := in["command"].(string); ok {
		first, _, _ := strings.Cut(strings.TrimSpace(cmd), " ")
		return tool + "(" + first + " *)"
	}
	if p, ok := in["file_path"].(string); ok && strings.HasPrefix(p, "/") {
		return tool + "(" + path.Dir(p) + "/*)"
	}
	return tool
}

func orEmpty(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage(`{}`)
	}
	return b
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// approveArgs are the arguments of approve.
type approveArgs struct {
	RequestID string `json:"request_id"`
	Allow     bool   `json:"allow"`
	Reason    string `json:"reason,omitempty"`
	Remember  string `json:"remember,omitempty"`
}
