package fsstore

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Approval events and the message kind of a request.
const (
	EvApprovalRequested = "approval_requested" // data: Approval, a new pending request
	EvApprovalAnswered  = "approval_answered"  // data: ApprovalAnswer
	// KindApproval is a message asking its recipient to answer an approval
	// request (the request's id is in the text).
	KindApproval = "approval"
)

// Answers of an approval request.
const (
	ApprovalAllow   = "allow"
	ApprovalDeny    = "deny"
	ApprovalExpired = "expired" // no answer within the timeout: denied
)

// Approvers an agent's Permissions may name.
const (
	ApproverParent = "parent" // the parent, or USER for a root (the default)
	ApproverUser   = "user"   // always USER
	ApproverDeny   = "deny"   // nobody: what would need a prompt is denied
)

// DefaultApprovalTimeout is how long a request waits for an answer when
// the agent's Permissions set no ApprovalTimeout.
const DefaultApprovalTimeout = 10 * time.Minute

// keepAnswered is how many answered requests a session keeps (the pending
// ones are all kept); events.jsonl keeps the whole history.
const keepAnswered = 20

// Approval is a request by an agent's provider for permission to use one
// of its own tools, and its answer once given.
type Approval struct {
	ID        string          `json:"id"`
	Tool      string          `json:"tool"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	// CallKey and Batch name the call across restarts: CallKey is a
	// digest of the tool and its input (canonical JSON), Batch the id of
	// the first message of the turn that asked. That message stays in
	// the inbox until the turn ends, so a turn run again after a crash
	// (or a failure) has it too, and asks for the same call again.
	CallKey     string    `json:"call_key,omitempty"`
	Batch       string    `json:"batch,omitempty"`
	Approver    string    `json:"approver"` // an agent id, or USER
	RequestedAt time.Time `json:"requested_at"`
	Deadline    time.Time `json:"deadline"`
	// The answer; Answer is empty while the request is pending.
	Answer     string    `json:"answer,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	By         string    `json:"by,omitempty"`       // an agent id, USER or SYSTEM
	Remember   string    `json:"remember,omitempty"` // a rule kept for the rest of the agent's life
	AnsweredAt time.Time `json:"answered_at,omitzero"`
}

// Pending reports whether a is still waiting for its answer.
func (a Approval) Pending() bool { return a.Answer == "" }

// ApprovalAnswer is the data of an approval_answered event. A remembered
// rule joins the agent's allowed (or, with a denial, disallowed) tools in
// the same event.
type ApprovalAnswer struct {
	ID         string    `json:"id"`
	Answer     string    `json:"answer"`
	Reason     string    `json:"reason,omitempty"`
	By         string    `json:"by"`
	Remember   string    `json:"remember,omitempty"`
	AnsweredAt time.Time `json:"answered_at"`
}

// CheckRule checks a tool rule as the Claude Code CLI writes them: a tool
// name, optionally followed by a specifier in parentheses ("Bash(git *)",
// "Edit", "mcp__x__y").
func CheckRule(r string) error {
	name, spec, paren := strings.Cut(r, "(")
	switch {
	case strings.TrimSpace(r) != r || r == "":
		return invalidf("tool rule %q is empty or has surrounding blanks", r)
	case strings.ContainsAny(r, "\x00\n\r"):
		return invalidf("tool rule %q holds a control character", r)
	case name == "" || strings.ContainsAny(name, " )"):
		return invalidf("tool rule %q: want a tool name, optionally with a specifier: Bash(git *)", r)
	case paren && (!strings.HasSuffix(spec, ")") || len(spec) < 2):
		return invalidf("tool rule %q: the specifier must end with ')' and not be empty", r)
	}
	return nil
}

func (Approval) EventType() string { return EvApprovalRequested }

// applyTo adds a new pending request.
func (d Approval) applyTo(n *Session) error {
	if d.ID == "" || d.Tool == "" || d.Approver == "" || !d.Pending() {
		return fmt.Errorf("approval request without id, tool or approver, or already answered")
	}
	n.Approvals = append(slices.DeleteFunc(n.Approvals, func(a Approval) bool { return a.ID == d.ID }), d)
	return nil
}

func (ApprovalAnswer) EventType() string { return EvApprovalAnswered }

// applyTo answers a pending request, and adds a remembered rule to the
// agent's allowed (or, with a denial, disallowed) tools.
func (d ApprovalAnswer) applyTo(n *Session) error {
	i := slices.IndexFunc(n.Approvals, func(a Approval) bool { return a.ID == d.ID })
	if i < 0 {
		return nil // a request trimmed from the snapshot long ago: history only
	}
	a := &n.Approvals[i]
	a.Answer, a.Reason, a.By, a.Remember, a.AnsweredAt = d.Answer, d.Reason, d.By, d.Remember, d.AnsweredAt
	if d.Remember != "" && n.Permissions != nil {
		p := n.Permissions.Clone()
		list := &p.AllowedTools
		if d.Answer != ApprovalAllow {
			list = &p.DisallowedTools
		}
		if !slices.Contains(*list, d.Remember) {
			*list = append(*list, d.Remember)
		}
		n.Permissions = p
	}
	trimAnswered(n)
	return nil
}

// trimAnswered keeps the pending requests and the newest keepAnswered
// answered ones.
func trimAnswered(n *Session) {
	answered := 0
	for _, a := range n.Approvals {
		if !a.Pending() {
			answered++
		}
	}
	for i := 0; answered > keepAnswered && i < len(n.Approvals); {
		if !n.Approvals[i].Pending() {
			n.Approvals = slices.Delete(n.Approvals, i, i+1)
			answered--
			continue
		}
		i++
	}
}

// validateApprover checks who answers p's prompts and how long they wait.
func (p *Permissions) validateApprover() error {
	switch p.Approver {
	case "", ApproverParent, ApproverUser, ApproverDeny:
	default:
		return invalidf("approver %q is not one of parent, user, deny", p.Approver)
	}
	if p.ApprovalTimeout != "" {
		if d, err := time.ParseDuration(p.ApprovalTimeout); err != nil || d <= 0 {
			return invalidf("approval_timeout %q is not a positive duration such as 10m", p.ApprovalTimeout)
		}
	}
	return nil
}

// validateApprovals checks a session's approval requests.
func validateApprovals(s *Session) error {
	for _, a := range s.Approvals {
		if a.ID == "" || a.Tool == "" {
			return invalidf("an approval request without id or tool")
		}
		switch a.Answer {
		case "", ApprovalAllow, ApprovalDeny, ApprovalExpired:
		default:
			return invalidf("approval %s: answer %q is not allow, deny or expired", a.ID, a.Answer)
		}
	}
	return nil
}

// Timeout returns how long an approval request of an agent with these
// permissions waits.
func (p *Permissions) Timeout() time.Duration {
	if p != nil && p.ApprovalTimeout != "" {
		if d, err := time.ParseDuration(p.ApprovalTimeout); err == nil && d > 0 {
			return d
		}
	}
	return DefaultApprovalTimeout
}
