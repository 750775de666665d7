package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/substrat/substrat/internal/jsontext"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/permrule"

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
	waiters map[string][]chan fsstore.ApprovalAnswer // a call asked twice waits twice
	gone    map[string]string                        // request id -> path of its archived agent
}

func (a *approvals) wait(id string) chan fsstore.ApprovalAnswer {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.waiters == nil {
		a.waiters = map[string][]chan fsstore.ApprovalAnswer{}
	}
	ch := make(chan fsstore.ApprovalAnswer, 1)
	a.waiters[id] = append(a.waiters[id], ch)
	return ch
}

func (a *approvals) done(id string, ch chan fsstore.ApprovalAnswer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.waiters[id] = slices.DeleteFunc(a.waiters[id], func(c chan fsstore.ApprovalAnswer) bool { return c == ch }); len(a.waiters[id]) == 0 {
		delete(a.waiters, id)
	}
}

// tell hands an answer to the request's waiters, if turns still wait.
func (a *approvals) tell(ans fsstore.ApprovalAnswer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ch := range a.waiters[ans.ID] {
		ch <- ans
	}
	delete(a.waiters, ans.ID)
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
			"a reason, and optionally a rule to remember for the rest of its life, such as \"Bash(git status *)\" "+
			"(a Bash rule allows a command only when it allows each of its simple commands; $(...), subshells, redirections outside the workspace "+
			"and the like need rules that name them, such as \"Bash(!subst)\"). No rule can be remembered for an input too long to show whole.", (*turnTools).approve),
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
		b, err := jsontext.Marshal(promptAnswer{Behavior: "allow", UpdatedInput: a.Input})
		return string(b), err
	}
	deny := func(why string) (string, error) {
		b, err := jsontext.Marshal(promptAnswer{Behavior: "deny", Message: why})
		return string(b), err
	}
	c, n := t.c, t.n
	c.mu.Lock()
	perm := effectivePermissions(n.s())
	opts := ruleOptions(n.s())
	approver := c.approverLocked(n, perm.Approver)
	c.mu.Unlock()
	if r := permrule.Deny(perm.DisallowedTools, a.ToolName, a.Input, opts); r != "" {
		return deny("denied by the agent's rule " + r)
	}
	// An input too long to show in full is never allowed by a rule: its
	// approver reads only its head and tail.
	if !api.InputTooLong(a.Input) {
		if _, ok := permrule.Allow(perm.AllowedTools, a.ToolName, a.Input, opts); ok {
			return allow()
		}
	}
	if approver == "" {
		return deny("this agent's approver is deny: what its permission mode would prompt for is denied")
	}
	ok, why, err := t.askOnce(ctx, approvalCall{tool: a.ToolName, input: a.Input, toolUseID: a.ToolUseID,
		approver: approver, timeout: c.approvalTimeout(perm)})
	switch {
	case err != nil:
		return "", err
	case ok:
		return allow()
	}
	return deny(why)
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

// askApprover delivers the request's message to its approver: the whole
// input (or, above api.MaxApprovalInput, its head and tail and why no
// rule can be remembered for it), the parts of a Bash command as the
// rules see them, and how to answer.
func (c *Core) askApprover(n *node, req fsstore.Approval) error {
	c.mu.Lock()
	who := c.pathLocked(n)
	to := c.nodes[req.Approver]
	opts := ruleOptions(n.s())
	c.mu.Unlock()
	text := approvalText(req, who, opts, to == nil)
	m := &fsstore.Message{ID: req.ID, From: fsstore.System, FromName: fsstore.System, Kind: fsstore.KindApproval, Text: text}
	if to == nil {
		return c.sendUserAs(m, api.NotifyApproval, n)
	}
	_, err := c.send(m, to)
	return err
}

// approvalText is the message that asks for an answer to req; user says
// whether USER answers (with the CLI) or an agent (with the approve tool).
func approvalText(req fsstore.Approval, who string, opts permrule.Options, user bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Approval request %s: %s wants to use %s. It waits until %s, then it is denied.\n",
		req.ID, who, agentName(req.Tool), req.Deadline.Local().Format("15:04:05"))
	input, whole := api.InputHeadTail(req.Input, api.MaxApprovalInput)
	size := len(api.InputText(req.Input))
	if whole {
		fmt.Fprintf(&b, "Its input, whole, as JSON (%d bytes):\n%s\n", size, input)
	} else {
		fmt.Fprintf(&b, "Its input is %d bytes of JSON, more than the %d a message shows: its first and last %d bytes are\n%s\n",
			size, api.MaxApprovalInput, api.MaxApprovalInput/2, input)
	}
	rule := permrule.Suggest(req.Tool, req.Input, opts)
	if req.Tool == permrule.BashTool {
		b.WriteString(describeCommand(req.Input, opts, whole))
		if rule == "" {
			rule = "-"
		}
	}
	var how string
	switch {
	case !whole:
		how = "You cannot read all of it here, so no rule can be remembered for it: allow it once, or deny it. "
		if user {
			how += fmt.Sprintf("Read it whole with: substrat approvals show %s\nAnswer with: substrat approve %s   or   substrat deny %s --reason WHY", req.ID, req.ID, req.ID)
		} else {
			how += fmt.Sprintf("Answer with the approve tool: request_id %q, allow true or false, and a reason (no rule).", req.ID)
		}
	case user && rule != "-":
		how = fmt.Sprintf("Answer with: substrat approve %s [--remember %s]   or   substrat deny %s --reason WHY", req.ID, shellQuote(rule), req.ID)
	case user:
		how = fmt.Sprintf("No rule is suggested for a command of more than one part (a rule allows a command only when it allows each part).\n"+
			"Answer with: substrat approve %s   or   substrat deny %s --reason WHY", req.ID, req.ID)
	case rule != "-":
		how = fmt.Sprintf("Answer with the approve tool: request_id %q, allow true or false, a reason, and optionally a rule to remember (such as \"%s\").", req.ID, rule)
	default:
		how = fmt.Sprintf("Answer with the approve tool: request_id %q, allow true or false, and a reason. No rule is suggested for a command of more than one part "+
			"(a rule allows a command only when it allows each part).", req.ID)
	}
	b.WriteString(how)
	return b.String()
}

// describeCommand says how the rules see a Bash input: its parts, or
// that it does not parse.
func describeCommand(input json.RawMessage, opts permrule.Options, whole bool) string {
	var in struct {
		Command *string `json:"command"`
	}
	if json.Unmarshal(input, &in) != nil || in.Command == nil {
		return "It has no command.\n"
	}
	parts, err := permrule.Parts(*in.Command, opts)
	switch {
	case err != nil:
		return "It does not parse as a shell command, so no rule can allow it.\n"
	case !whole || len(parts) > 50:
		return fmt.Sprintf("As the rules see it, it has %d part%s (commands and constructs), not listed here.\n", len(parts), plural(len(parts)))
	case len(parts) == 0:
		return "It runs nothing.\n"
	}
	quoted := make([]string, len(parts))
	for i, p := range parts {
		quoted[i] = strconv.QuoteToGraphic(p)
	}
	return fmt.Sprintf("It runs %d command%s, as the rules see %s: %s.\n", len(parts), plural(len(parts)), them(len(parts)), strings.Join(quoted, ", "))
}

// shellQuote quotes s for a person to paste into a shell: in single
// quotes, where nothing expands (a rule is made from an agent's command,
// and "$(...)" in double quotes would run in the person's shell).
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func them(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
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
		if err := permrule.Check(p.Remember); err != nil {
			return fsstore.Approval{}, api.Errorf(api.CodeInvalidParams, "%v (see the rule language in the README)", err)
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
	case ans.Remember != "" && ans.Answer == fsstore.ApprovalAllow && api.InputTooLong(req.Input):
		return req, api.Errorf(api.CodeInvalidParams, "approval request %s: its input (%d bytes) is larger than the %d an approval message shows, "+
			"so no rule can be remembered for it: allow it without one, or deny it", ans.ID, len(api.InputText(req.Input)), api.MaxApprovalInput)
	}
	ans.AnsweredAt = c.clock.Now().UTC()
	if err := c.commit(n, ans); err != nil {
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

// ruleOptions say where an agent's commands run, for its rules: a
// redirection into its own directory needs no rule.
func ruleOptions(s *fsstore.Session) permrule.Options {
	if s.WorkDir == "" {
		return permrule.Options{}
	}
	return permrule.Options{Workspace: []string{s.WorkDir}}
}

// ShowApproval returns one request of a live agent, pending or answered,
// with what its approver is offered.
func (c *Core) ShowApproval(id string) (api.ApprovalDetail, error) {
	c.mu.Lock()
	n, req := c.findApprovalLocked(id)
	var d api.ApprovalDetail
	if n != nil {
		d.PendingApproval = api.PendingApproval{Approval: req, Agent: c.pathLocked(n)}
		opts := ruleOptions(n.s())
		c.mu.Unlock()
		d.Size, d.TooLong = len(api.InputText(req.Input)), api.InputTooLong(req.Input)
		if !d.TooLong {
			d.Rule = permrule.Suggest(req.Tool, req.Input, opts)
		}
		if req.Tool == permrule.BashTool {
			var in struct {
				Command string `json:"command"`
			}
			if json.Unmarshal(req.Input, &in) == nil {
				d.Commands, _ = permrule.Parts(in.Command, opts)
			}
		}
		return d, nil
	}
	c.mu.Unlock()
	if p := c.approvals.archivedPath(id); p != "" {
		return d, api.Errorf(api.CodeNotFound, "approval request %s belongs to %s, which was archived", id, p)
	}
	return d, api.Errorf(api.CodeNotFound, "no approval request %s among the live agents (see substrat approvals)", id)
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
