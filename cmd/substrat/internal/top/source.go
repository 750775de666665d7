// Package top is `substrat top`: a full-screen view of the agent tree that
// follows the daemon live, and steers it.
//
// The view is a Bubble Tea program (model.go: state and updates; view.go:
// the frame). It reads the daemon through Source, a client of daemon.sock
// (daemon.go): a snapshot of the tree at most twice a second while events
// arrive, and the daemon.watch stream in between, so what an agent is
// doing right now shows without polling. When the daemon goes away the
// view says so, keeps the last tree, reconnects, and shows what the
// recovery of the new daemon did.
package top

import (
	"context"
	"encoding/json"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
)

// Source is what top reads and asks of the daemon.
type Source interface {
	// Snapshot returns the daemon's status, every agent, the unread
	// messages to USER (left unread) and the approval requests that wait.
	Snapshot(ctx context.Context) (Snapshot, error)
	// Recovery returns the report of the daemon's last start.
	Recovery(ctx context.Context) (api.Report, error)
	// Detail returns one agent's inspection and its last events.
	Detail(ctx context.Context, id string, tail int) (Detail, error)
	// Watch calls fn for each event of every agent until ctx ends or the
	// connection is lost; it returns nil only when ctx ended.
	Watch(ctx context.Context, fn func(Event)) error
	// Act carries out an action on an agent (or the USER inbox).
	Act(ctx context.Context, a Action) error
}

// Snapshot is the whole tree at one moment.
type Snapshot struct {
	Status api.StatusResult   `json:"status"`
	Agents []api.AgentInfo    `json:"agents"`
	Inbox  []api.InboxMessage `json:"inbox"`
	// Approvals wait for an answer; their inputs are whole.
	Approvals []api.PendingApproval `json:"approvals"`
	Taken     time.Time             `json:"taken"`
}

// Detail is the selected agent, read in full.
type Detail struct {
	Inspect api.InspectResult `json:"inspect"`
	Events  []fsstore.Event   `json:"events"`
}

// Event is one frame of daemon.watch.
type Event struct {
	Agent string          `json:"agent"`
	Name  string          `json:"name"`
	Type  string          `json:"type"`
	Seq   uint64          `json:"seq"`
	Time  time.Time       `json:"ts"`
	Data  json.RawMessage `json:"data"`
	Count int             `json:"count"` // of a "dropped" marker
}

// Action kinds.
const (
	ActSend      = "send"
	ActGate      = "gate"
	ActUngate    = "ungate"
	ActPermit    = "permit"
	ActSuspend   = "suspend"
	ActResume    = "resume"
	ActTerminate = "terminate"
	ActArchive   = "archive"
	ActReadInbox = "read_inbox" // mark the USER inbox read
)

// Action is something the user asked of an agent.
type Action struct {
	Kind string
	ID   string // the agent
	Text string // of a message
}
