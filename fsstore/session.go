package fsstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Version is the format version of every JSON document the store writes.
const Version = 1

// SessionState is the state of an agent's provider session.
type SessionState string

const (
	SessionCreated    SessionState = "CREATED"
	SessionActive     SessionState = "ACTIVE"
	SessionSuspended  SessionState = "SUSPENDED"
	SessionTerminated SessionState = "TERMINATED"
)

func (s SessionState) valid() bool {
	switch s {
	case SessionCreated, SessionActive, SessionSuspended, SessionTerminated:
		return true
	}
	return false
}

// AgentState is the state of an agent in the tree.
type AgentState string

const (
	AgentIdle       AgentState = "IDLE"
	AgentBusy       AgentState = "BUSY"
	AgentWaiting    AgentState = "WAITING"
	AgentTerminated AgentState = "TERMINATED"
)

func (s AgentState) valid() bool {
	switch s {
	case AgentIdle, AgentBusy, AgentWaiting, AgentTerminated:
		return true
	}
	return false
}

// Counters are an agent's running totals. They only grow, but for the
// context use: ContextTokens of the model's context window ContextWindow
// (in tokens) that its conversation took after its last turn, when its
// provider reports them (zero: unknown).
type Counters struct {
	Turns         int64   `json:"turns"`
	InputTokens   int64   `json:"input_tokens"`
	OutputTokens  int64   `json:"output_tokens"`
	CostUSD       float64 `json:"cost_usd"`
	ContextTokens int64   `json:"context_tokens,omitempty"`
	ContextWindow int64   `json:"context_window,omitempty"`
}

func (Counters) EventType() string { return EvTurn }

func (d Counters) applyTo(n *Session) error {
	n.Counters = n.Counters.Add(d)
	return nil
}

// roundTrips: numbers come back from JSON exactly.
func (Counters) roundTrips() bool { return true }

// Add returns c plus d, with d's context use if d has one, else c's.
func (c Counters) Add(d Counters) Counters {
	sum := Counters{
		Turns:         c.Turns + d.Turns,
		InputTokens:   c.InputTokens + d.InputTokens,
		OutputTokens:  c.OutputTokens + d.OutputTokens,
		CostUSD:       c.CostUSD + d.CostUSD,
		ContextTokens: c.ContextTokens,
		ContextWindow: c.ContextWindow,
	}
	if d.ContextWindow > 0 {
		sum.ContextTokens, sum.ContextWindow = d.ContextTokens, d.ContextWindow
	}
	return sum
}

// Session is the content of session.json: an agent and its provider
// session, as of the event LastSeq.
type Session struct {
	Version           int               `json:"version"`
	ID                string            `json:"id"`
	Name              string            `json:"name"`
	ParentID          string            `json:"parent_id,omitempty"`
	Provider          string            `json:"provider"`
	Model             string            `json:"model,omitempty"`
	Instructions      string            `json:"instructions,omitempty"`
	Workspace         string            `json:"workspace,omitempty"`
	WorkDir           string            `json:"work_dir,omitempty"`
	Permissions       *Permissions      `json:"permissions,omitempty"`
	Limits            *Limits           `json:"limits,omitempty"`
	Executor          string            `json:"executor,omitempty"` // where its processes run: "" here, ssh://HOST, k8s://CONTEXT/NAMESPACE (executor.go)
	AgentState        AgentState        `json:"agent_state"`
	SessionState      SessionState      `json:"session_state"`
	StateReason       string            `json:"state_reason,omitempty"`
	ProviderSessionID string            `json:"provider_session_id,omitempty"`
	StateBlob         []byte            `json:"state_blob,omitempty"`
	SpawnKey          string            `json:"spawn_key,omitempty"`
	Metadata          map[string]string `json:"metadata,omitempty"`
	Counters          Counters          `json:"counters"`

	// Orchestration state, changed only by events (see apply.go).
	Pool          string         `json:"pool,omitempty"`          // slot pool of the session
	Budget        *Budget        `json:"budget,omitempty"`        // limit for the agent's subtree
	Gated         bool           `json:"gated,omitempty"`         // turns wait for a permit
	Permits       int            `json:"permits,omitempty"`       // turns granted while gated
	WaitingFor    []string       `json:"waiting_for,omitempty"`   // ids of requests awaiting a reply
	Reminders     []Reminder     `json:"reminders,omitempty"`     // pending reminders
	Subscriptions []Subscription `json:"subscriptions,omitempty"` // state changes this agent follows
	Approvals     []Approval     `json:"approvals,omitempty"`     // pending and recently answered approval requests
	Parked        *Park          `json:"parked,omitempty"`        // waiting for a provider's usage or rate limit to reset (park.go)

	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	LastSeq   uint64    `json:"last_seq"`
}

// Permissions say what an agent's provider lets it do with its own tools
// (the agent tools over MCP are always allowed).
type Permissions struct {
	// Mode is a permission mode as the Claude Code CLI names them (see
	// PermissionModes); other providers map it onto their own settings.
	Mode string `json:"mode"`
	// AllowedTools and DisallowedTools are passed through as rules
	// ("Bash(git *)", "Edit").
	AllowedTools    []string `json:"allowed_tools,omitempty"`
	DisallowedTools []string `json:"disallowed_tools,omitempty"`
	// Approver answers what the mode would prompt for: "parent" (the
	// parent, or USER for a root; the default when empty), "user" or
	// "deny" (nobody: it is denied). See approval.go.
	Approver string `json:"approver,omitempty"`
	// ApprovalTimeout is how long a request waits before it is denied
	// ("10m" when empty).
	ApprovalTimeout string `json:"approval_timeout,omitempty"`
}

func (Permissions) EventType() string { return EvPermissions }

func (d Permissions) applyTo(n *Session) error {
	n.Permissions = &d
	return nil
}

// Permission modes. ModeFull (bypassPermissions) is what an agent in a
// bwrap sandbox gets by default, where the sandbox is the boundary;
// ModeDefault, the CLI's safe mode, what an agent outside one gets.
const (
	ModeDefault     = "default"
	ModeAcceptEdits = "acceptEdits"
	ModePlan        = "plan"
	ModeDontAsk     = "dontAsk"
	ModeFull        = "bypassPermissions"
)

// PermissionModes are the modes a Permissions may name.
var PermissionModes = []string{ModeDefault, ModeAcceptEdits, ModePlan, ModeDontAsk, ModeFull}

// Validate checks the mode and the rules.
func (p *Permissions) Validate() error {
	if !slices.Contains(PermissionModes, p.Mode) {
		return invalidf("permission mode %q is not one of %s", p.Mode, strings.Join(PermissionModes, ", "))
	}
	for _, r := range slices.Concat(p.AllowedTools, p.DisallowedTools) {
		if strings.TrimSpace(r) == "" || strings.ContainsAny(r, "\x00\n\r") {
			return invalidf("tool rule %q is empty or holds a control character", r)
		}
	}
	return p.validateApprover()
}

// Clone returns a deep copy of p (nil for nil).
func (p *Permissions) Clone() *Permissions {
	if p == nil {
		return nil
	}
	return &Permissions{Mode: p.Mode, AllowedTools: slices.Clone(p.AllowedTools), DisallowedTools: slices.Clone(p.DisallowedTools),
		Approver: p.Approver, ApprovalTimeout: p.ApprovalTimeout}
}

// Equal reports whether p and q say the same.
func (p *Permissions) Equal(q *Permissions) bool {
	if p == nil || q == nil {
		return p == q
	}
	return p.Mode == q.Mode && slices.Equal(p.AllowedTools, q.AllowedTools) && slices.Equal(p.DisallowedTools, q.DisallowedTools) &&
		p.Approver == q.Approver && p.ApprovalTimeout == q.ApprovalTimeout
}

// Budget limits what an agent's subtree may spend. Zero means no limit.
type Budget struct {
	Tokens  int64   `json:"tokens,omitempty"` // input plus output tokens
	CostUSD float64 `json:"cost_usd,omitempty"`
}

func (Budget) EventType() string { return EvBudget }

// applyTo sets the budget; a zero one removes it.
func (d Budget) applyTo(n *Session) error {
	n.Budget = &d
	if d.Tokens == 0 && d.CostUSD == 0 {
		n.Budget = nil
	}
	return nil
}

// Exceeded reports whether c is over the budget.
func (b *Budget) Exceeded(c Counters) bool {
	if b == nil {
		return false
	}
	return (b.Tokens > 0 && c.InputTokens+c.OutputTokens > b.Tokens) || (b.CostUSD > 0 && c.CostUSD > b.CostUSD)
}

// String describes the budget: "1000 tokens, $0.5000".
func (b Budget) String() string {
	var parts []string
	if b.Tokens > 0 {
		parts = append(parts, fmt.Sprintf("%d tokens", b.Tokens))
	}
	if b.CostUSD > 0 {
		parts = append(parts, fmt.Sprintf("$%.4f", b.CostUSD))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Reminder is a message the agent asked to get later.
type Reminder struct {
	ID     string    `json:"id"`
	Reason string    `json:"reason"`
	Due    time.Time `json:"due"`
	// EverySeconds, if positive, makes the reminder repeat.
	EverySeconds int64 `json:"every_seconds,omitempty"`
}

func (Reminder) EventType() string { return EvReminderSet }

func (d Reminder) applyTo(n *Session) error {
	if d.ID == "" {
		return fmt.Errorf("reminder without id")
	}
	n.Reminders = append(slices.DeleteFunc(n.Reminders, func(r Reminder) bool { return r.ID == d.ID }), d)
	return nil
}

// Subscription asks for a SYSTEM message when agent Target moves from
// state From to state To ("*" matches any state).
type Subscription struct {
	ID     string `json:"id"`
	Target string `json:"target"`
	From   string `json:"from"`
	To     string `json:"to"`
	Once   bool   `json:"once,omitempty"`
}

func (Subscription) EventType() string { return EvSubscribed }

func (d Subscription) applyTo(n *Session) error {
	if d.ID == "" {
		return fmt.Errorf("subscription without id")
	}
	n.Subscriptions = append(slices.DeleteFunc(n.Subscriptions, func(x Subscription) bool { return x.ID == d.ID }), d)
	return nil
}

// MaxNameLen is the longest agent name accepted.
const MaxNameLen = 64

// ValidateName checks an agent name: not empty, at most MaxNameLen bytes,
// no '/', not "." or "..", no control or space characters.
func ValidateName(name string) error {
	switch {
	case name == "":
		return invalidf("agent name is empty")
	case len(name) > MaxNameLen:
		return invalidf("agent name is %d bytes long, limit %d", len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return invalidf("agent name is not valid UTF-8")
	case name == "." || name == ".." || strings.Contains(name, ".."):
		return invalidf("agent name %q contains '..'", name)
	case strings.ContainsRune(name, '/') || strings.ContainsRune(name, '\\'):
		return invalidf("agent name %q contains a path separator", name)
	}
	for _, r := range name {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return invalidf("agent name %q contains a control or space character", name)
		}
	}
	return nil
}

// reservedNames are what routing and messages already mean: an agent may
// not take them as its name.
var reservedNames = []string{User, System, "parent"}

// CheckNewName checks the name of an agent being created or renamed: the
// rules of ValidateName, and no name that imitates something else: USER,
// SYSTEM or "parent" (in any case), an agent id (a UUID in any spelling),
// invisible or direction-changing characters (zero-width, bidi controls),
// or letters of more than one script ("pаypal" with a Cyrillic а). Names
// already on disk are loaded by ValidateName alone.
func CheckNewName(name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	for _, r := range reservedNames {
		if strings.EqualFold(name, r) {
			return invalidf("agent name %q is reserved: messages and routing already use %s", name, r)
		}
	}
	if _, err := uuid.Parse(name); err == nil {
		return invalidf("agent name %q is a UUID and would read as an agent id", name)
	}
	script := ""
	for _, r := range name {
		if unicode.Is(unicode.Cf, r) {
			return invalidf("agent name %q contains the invisible or direction-changing character %U", name, r)
		}
		if !unicode.IsLetter(r) {
			continue
		}
		sc := scriptOf(r)
		if sc == "" {
			continue
		}
		if script == "" {
			script = sc
		} else if sc != script {
			return invalidf("agent name %q mixes %s and %s letters, as names made to look like others do", name, script, sc)
		}
	}
	return nil
}

// scriptOf names the script of a letter ("" for Common and Inherited).
func scriptOf(r rune) string {
	if unicode.Is(unicode.Latin, r) {
		return "Latin"
	}
	for name, table := range unicode.Scripts {
		if name != "Common" && name != "Inherited" && unicode.Is(table, r) {
			return name
		}
	}
	return ""
}

// Validate checks a session's fields, not its history.
func (s *Session) Validate() error {
	if s.Version != Version {
		return fmt.Errorf("%w: version %d, this substrat reads version %d", ErrUnknownVersion, s.Version, Version)
	}
	if !IsID(s.ID) {
		return invalidf("id %q is not a canonical UUIDv7", s.ID)
	}
	if err := ValidateName(s.Name); err != nil {
		return err
	}
	if s.ParentID != "" && (!IsID(s.ParentID) || s.ParentID == s.ID) {
		return invalidf("parent_id %q is not another agent's UUIDv7", s.ParentID)
	}
	if s.Provider == "" {
		return invalidf("provider is empty")
	}
	if !s.AgentState.valid() {
		return invalidf("agent_state %q is not one of IDLE, BUSY, WAITING, TERMINATED", s.AgentState)
	}
	if !s.SessionState.valid() {
		return invalidf("session_state %q is not one of CREATED, ACTIVE, SUSPENDED, TERMINATED", s.SessionState)
	}
	if s.Permits < 0 {
		return invalidf("negative permits")
	}
	if s.WorkDir != "" && (!filepath.IsAbs(s.WorkDir) || filepath.Clean(s.WorkDir) != s.WorkDir || strings.ContainsRune(s.WorkDir, 0)) {
		return invalidf("work_dir %q is not an absolute, clean path", s.WorkDir)
	}
	if s.Permissions != nil {
		if err := s.Permissions.Validate(); err != nil {
			return err
		}
	}
	if s.Limits != nil {
		if err := s.Limits.Validate(); err != nil {
			return err
		}
	}
	if err := ValidateExecutor(s.Executor); err != nil {
		return err
	}
	if err := validateApprovals(s); err != nil {
		return err
	}
	c := s.Counters
	if c.Turns < 0 || c.InputTokens < 0 || c.OutputTokens < 0 || c.CostUSD < 0 || c.ContextTokens < 0 || c.ContextWindow < 0 {
		return invalidf("negative counter")
	}
	return nil
}

// Clone returns a deep copy of s.
func (s *Session) Clone() *Session {
	c := *s
	c.StateBlob = bytes.Clone(s.StateBlob)
	c.WaitingFor = slices.Clone(s.WaitingFor)
	c.Reminders = slices.Clone(s.Reminders)
	c.Subscriptions = slices.Clone(s.Subscriptions)
	c.Approvals = slices.Clone(s.Approvals)
	if s.Budget != nil {
		b := *s.Budget
		c.Budget = &b
	}
	if s.Parked != nil {
		p := *s.Parked
		c.Parked = &p
	}
	c.Permissions = s.Permissions.Clone()
	if s.Limits != nil {
		l := *s.Limits
		c.Limits = &l
	}
	if s.Metadata != nil {
		c.Metadata = make(map[string]string, len(s.Metadata))
		for k, v := range s.Metadata {
			c.Metadata[k] = v
		}
	}
	return &c
}

// EncodeSession returns the session.json bytes for s: indented JSON and a
// trailing newline, so that it reads well with cat.
func EncodeSession(s *Session) ([]byte, error) {
	b, err := marshal(s, true)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// DecodeSession parses and validates session.json bytes. Unknown fields are
// refused, so that a misspelt hand edit is not silently ignored.
func DecodeSession(data []byte) (*Session, error) {
	// The common case in one strict parse; anything else takes the slow
	// path below, which names what is wrong.
	if s, err := decodeStrict(data); err == nil && s.Version == Version {
		if err := s.Validate(); err != nil {
			return nil, err
		}
		return s, nil
	}
	var probe struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, invalidf("invalid JSON: %v", err)
	}
	if probe.Version == nil {
		return nil, invalidf("no version field")
	}
	if *probe.Version != Version {
		return nil, fmt.Errorf("%w: version %d, this substrat reads version %d", ErrUnknownVersion, *probe.Version, Version)
	}
	s, err := decodeStrict(data)
	if err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// decodeStrict decodes one JSON object with no unknown fields and nothing
// after it.
func decodeStrict(data []byte) (*Session, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Session
	if err := dec.Decode(&s); err != nil {
		return nil, invalidf("%v", err)
	}
	if dec.More() {
		return nil, invalidf("data after the JSON object")
	}
	return &s, nil
}
