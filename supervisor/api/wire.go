package api

import (
	"encoding/json"
	"time"

	"github.com/substrat/substrat/internal/jsontext"
)

// RefParams name one agent (or workspace) by a ref: a name, a path or an
// id.
type RefParams struct {
	Ref string `json:"ref"`
}

// SendMessageParams are agent.send's: USER's message to the agent Ref.
// Wait streams the turn that takes it and gives its outcome; without it
// the call returns once the message is stored.
type SendMessageParams struct {
	Ref  string `json:"ref"`
	Text string `json:"text"`
	Wait bool   `json:"wait"`
}

// BudgetParams are agent.budget's: the agent's new budget (zero: none).
type BudgetParams struct {
	Ref     string  `json:"ref"`
	Tokens  int64   `json:"tokens"`
	CostUSD float64 `json:"cost_usd"`
}

// UnlinkParams are workspace.unlink's: the link of Workspace at Target
// (its mount path) to remove.
type UnlinkParams struct {
	Workspace string `json:"workspace"`
	Target    string `json:"target"`
}

// ToolRequest is a call of an agent tool, as a provider got it from its
// model (provider.ToolCall, converted).
type ToolRequest struct {
	// ID is the provider's tool-use id. The daemon uses it as the
	// idempotency key of calls that create things (spawn_agent).
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// ToolResult is what an agent tool call returned (provider.ToolResult,
// converted). Failures are results with IsError set.
type ToolResult struct {
	Text    string `json:"text"`
	IsError bool   `json:"is_error,omitempty"`
}

// ToolCallParams are tool.call's: the call, and the agent that makes it
// (on a tool socket, empty or that socket's agent).
type ToolCallParams struct {
	Agent string      `json:"agent"`
	Call  ToolRequest `json:"call"`
}

// StopResult is daemon.stop's.
type StopResult struct {
	Stopping bool `json:"stopping"`
}

// WorkspaceDeleteResult is workspace.delete's.
type WorkspaceDeleteResult struct {
	Deleted bool `json:"deleted"`
}

// WorkspaceDiffResult is workspace.diff's: the diff (or with Stat its
// summary) of the workspace's work against its base.
type WorkspaceDiffResult struct {
	Diff string `json:"diff"`
}

// WorkspacePublishResult is workspace.publish's: the commit made.
type WorkspacePublishResult struct {
	Commit string `json:"commit"`
}

// ConfigValue is one setting in force and where it came from.
type ConfigValue struct {
	Key    string `json:"key"`
	Value  any    `json:"value"`
	Source string `json:"source"`
	// Env names the environment variable that sets it, if one does.
	Env string `json:"env,omitempty"`
}

// ConfigReport is config.show's: the settings in force, and the file.
type ConfigReport struct {
	Values []ConfigValue `json:"values"`
	// Path is the file's path; FileError says why it was refused, if it
	// was (the settings then come from what was in force before).
	Path      string `json:"path"`
	FileError string `json:"file_error,omitempty"`
	// Present says whether the file exists.
	Present bool `json:"present"`
}

// WatchType is the type of a watch event: a committed event's type (the
// fsstore.Ev* names), a notification's kind (on NotifyTopic), or one of
// the constants below.
type WatchType string

// Types of watch events that are not committed events.
const (
	WatchMessage  WatchType = "message"   // a message reached the agent (data: id, from, text)
	WatchOutput   WatchType = "output"    // a piece of turn output (data: a provider.Chunk)
	WatchTool     WatchType = "tool"      // an agent tool ran
	WatchTurnDone WatchType = "turn_done" // a turn ended
	WatchReloaded WatchType = "reloaded"  // a hand edit of session.json was adopted
	WatchDetached WatchType = "detached"  // the agent's directory left agents/
	WatchAdopted  WatchType = "adopted"   // a directory was adopted into the tree
	WatchArchived WatchType = "archived"  // the agent was archived
	// Frames about the stream itself, not an agent.
	WatchSent    WatchType = "sent"    // agent.send stored the message (MessageID)
	WatchDropped WatchType = "dropped" // Count events this reader fell behind on
)

// WatchFrame is a frame of daemon.watch, agent.attach and agent.send: a
// WatchEvent with its Data as JSON, for the reader to decode by Type; or
// a frame about the stream (WatchSent, WatchDropped), which has only its
// Type and MessageID or Count.
type WatchFrame struct {
	Agent     string          `json:"agent,omitempty"`
	Name      string          `json:"name,omitempty"`
	Type      WatchType       `json:"type"`
	Seq       uint64          `json:"seq,omitempty"`
	Time      time.Time       `json:"ts,omitzero"`
	Data      json.RawMessage `json:"data,omitempty"`
	MessageID string          `json:"message_id,omitempty"`
	Count     int             `json:"count,omitempty"`
}

// Frame is e as a client reads it.
func (e WatchEvent) Frame() (WatchFrame, error) {
	f := WatchFrame{Agent: e.Agent, Name: e.Name, Type: e.Type, Seq: e.Seq, Time: e.Time}
	if e.Data != nil {
		b, err := jsontext.Marshal(e.Data)
		if err != nil {
			return f, err
		}
		f.Data = b
	}
	return f, nil
}

// Workspace is a workspace.json as the wire carries it: the fields of
// supervisor/workspace's Workspace, which the daemon converts.
type Workspace struct {
	Version       int       `json:"version"`
	Scope         string    `json:"scope"` // USER or an agent id
	Name          string    `json:"name"`
	NetworkAccess bool      `json:"network_access"`
	Links         []Link    `json:"links"`
	View          *View     `json:"view,omitempty"` // only in a view
	Git           *GitInfo  `json:"git,omitempty"`  // only in a git workspace
	CreatedAt     time.Time `json:"created_at"`
}

// Link binds a host path into a workspace's sandbox.
type Link struct {
	HostPath  string `json:"host_path"`
	MountPath string `json:"mount_path"`
	Mode      string `json:"mode"` // "ro" or "rw"
}

// View makes a workspace's root the root (or a subdirectory of
// it) of another workspace, the source.
type View struct {
	SourceScope string `json:"source_scope"`
	SourceName  string `json:"source_name"`
	Subdir      string `json:"subdir,omitempty"`
	Mode        string `json:"mode"`
}

// GitInfo says that a workspace's root is a git clone of Repo, on
// Branch, which started at Base.
type GitInfo struct {
	Repo      string `json:"repo"`
	CommonDir string `json:"common_dir"`
	Branch    string `json:"branch"`
	Base      string `json:"base"`
	HomeID    string `json:"home_id,omitempty"`
}
