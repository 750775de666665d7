// Package top is `substrat top`: a full-screen view of the agent tree that
// follows the daemon live, and steers it.
//
// The view is a Bubble Tea program (model.go: state and updates; view.go:
// the frame). It reads the daemon through Source, a client of daemon.sock
// (daemon.go). It reads the whole tree once, a page at a time, when it
// starts and when it reconnects; after that it follows the daemon.watch
// stream, and every 100 ms at most (sync.go) reads back only the agents
// that events touched, and every few seconds the rows on screen, so that
// its work per event does not grow with the tree. When the daemon goes
// away the view says so, keeps the last tree and the selection,
// reconnects, and shows what the recovery of the new daemon did.
package top

import (
	"context"
	"errors"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
)

// Source is what top reads and asks of the daemon.
type Source interface {
	// Status returns the daemon's status.
	Status(ctx context.Context) (api.StatusResult, error)
	// Agents returns a page of the agents p selects (agent.query).
	Agents(ctx context.Context, p api.ListParams) (api.ListPage, error)
	// Inbox returns the messages to USER, left unread.
	Inbox(ctx context.Context) ([]api.InboxMessage, error)
	// Approvals returns the approval requests that wait, inputs whole.
	Approvals(ctx context.Context) ([]api.PendingApproval, error)
	// Recovery returns the report of the daemon's last start.
	Recovery(ctx context.Context) (api.Report, error)
	// Detail returns one agent's inspection and its last events.
	Detail(ctx context.Context, id string, tail int) (Detail, error)
	// Watch calls fn for each event of every agent until ctx ends or the
	// connection is lost; it returns nil only when ctx ended.
	Watch(ctx context.Context, fn func(Event)) error
	// Act carries out an action on an agent (or the USER inbox, or an
	// approval request).
	Act(ctx context.Context, a Action) error
}

// pageSize is how many agents one agent.query page of a whole read holds.
const pageSize = 2000

// ReadSnapshot reads the whole tree, a page at a time, with the status,
// the inbox and the approval requests.
func ReadSnapshot(ctx context.Context, src Source) (Snapshot, error) {
	var s Snapshot
	var err error
	if s.Status, err = src.Status(ctx); err != nil {
		return s, err
	}
	p := api.ListParams{Limit: pageSize}
	for tries := 0; ; {
		page, err := src.Agents(ctx, p)
		var ae *api.Error
		if p.After != "" && errors.As(err, &ae) && ae.Code == api.CodeNotFound && tries < 3 {
			// The agent the page was to start after has gone: read again.
			tries++
			p.After, s.Agents = "", nil
			continue
		}
		if err != nil {
			return s, err
		}
		s.Agents = append(s.Agents, page.Agents...)
		if page.Next == "" {
			break
		}
		p.After = page.Next
	}
	if s.Inbox, err = src.Inbox(ctx); err != nil {
		return s, err
	}
	if s.Approvals, err = src.Approvals(ctx); err != nil {
		return s, err
	}
	s.Taken = time.Now()
	return s, nil
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
type Event = api.WatchFrame

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
	ActApprove   = "approve"    // an approval request (ID is its id)
	ActDeny      = "deny"
)

// Action is something the user asked of an agent.
type Action struct {
	Kind string
	ID   string // the agent, or the approval request
	Text string // of a message
}
