package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/internal/jsontext"
	"github.com/substrat/substrat/internal/termtext"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor/api"
)

// convo prints an agent's events as a conversation, one aligned line per
// thing that happened: a time, a label, then the text, with the lines of
// a long text indented under the first. Messages in ("< USER"), model
// text out ("text"), tool calls and their results, turn boundaries,
// errors, parks and approvals; the bookkeeping events are left out
// (--view events shows every one). Everything an agent or a provider
// wrote is shown as typed, its control characters escaped (termtext.Lines).
type convo struct {
	w   io.Writer
	day string // the date of the last line, to print a line when it changes
}

// convoTypes are the types of the events a conversation shows.
var convoTypes = []string{fsstore.EvCreated, fsstore.EvState, fsstore.EvTurn, fsstore.EvTurnFailed, fsstore.EvToolDenied,
	fsstore.EvSpawned, fsstore.EvParked, fsstore.EvApprovalRequested, fsstore.EvApprovalAnswered, fsstore.EvEdited,
	fsstore.EvEditRefused, fsstore.EvCompaction, fsstore.EvGate, fsstore.EvBudget, fsstore.EvLimits,
	fsstore.EvPermissions, fsstore.EvReminderSet, fsstore.EvReminderDone}

// labelWidth is the width of the label column.
const labelWidth = 12

// line prints one entry: time, label, text (multi-line text indented).
func (v *convo) line(t time.Time, label, text string) {
	t = t.Local()
	if d := t.Format("2006-01-02"); d != v.day {
		fmt.Fprintf(v.w, "-- %s --\n", d)
		v.day = d
	}
	label = strings.NewReplacer("\n", `\n`, "\t", `\t`).Replace(termtext.Lines(label)) // one line, one column
	if r := []rune(label); len(r) > labelWidth {
		label = string(r[:labelWidth-1]) + "~"
	}
	pad := strings.Repeat(" ", 8+2+labelWidth+1)
	text = strings.ReplaceAll(termtext.Lines(strings.TrimRight(text, "\n")), "\n", "\n"+pad)
	fmt.Fprintf(v.w, "%s  %-*s %s\n", t.Format("15:04:05"), labelWidth, label, text)
}

// event prints e, or nothing for an event a conversation leaves out.
func (v *convo) event(e fsstore.Event) {
	switch e.Type {
	case fsstore.EvCreated:
		var s fsstore.Session
		e.Decode(&s)
		v.line(e.Time, "created", fmt.Sprintf("%s (provider %s%s)", s.Name, s.Provider, prefixed(", model ", s.Model)))
	case fsstore.EvState:
		var d fsstore.StateChange
		e.Decode(&d)
		v.state(e.Time, d)
	case fsstore.EvTurn:
		var d fsstore.TurnRecord
		e.Decode(&d)
		v.turn(e.Time, d)
	case fsstore.EvTurnFailed:
		var d fsstore.TurnFailed
		e.Decode(&d)
		v.line(e.Time, "ERROR", fmt.Sprintf("the turn failed: %s (its %d messages stay in the inbox)", d.Error, d.Messages))
	case fsstore.EvToolDenied:
		var d fsstore.ToolDenied
		e.Decode(&d)
		v.line(e.Time, "denied", d.Tool+": "+d.Reason)
	case fsstore.EvSpawned:
		var d fsstore.Spawned
		e.Decode(&d)
		v.line(e.Time, "spawned", fmt.Sprintf("%s (%s)", d.Name, d.ChildID))
	case fsstore.EvParked:
		var d fsstore.Parked
		e.Decode(&d)
		if d.Until.IsZero() {
			v.line(e.Time, "unparked", "turns may start again")
			return
		}
		v.line(e.Time, "PARKED", fmt.Sprintf("until %s: %s", d.Until.Local().Format(time.DateTime), d.Reason))
	case fsstore.EvApprovalRequested:
		var d fsstore.Approval
		e.Decode(&d)
		v.line(e.Time, "APPROVAL?", fmt.Sprintf("%s %s (request %s, asks %s)", d.Tool, api.InputSummary(d.Input, 200), d.ID, d.Approver))
	case fsstore.EvApprovalAnswered:
		var d fsstore.ApprovalAnswer
		e.Decode(&d)
		answer := map[string]string{"allow": "allowed", "deny": "denied"}[d.Answer]
		if answer == "" {
			answer = d.Answer
		}
		v.line(e.Time, "approval", fmt.Sprintf("%s by %s%s (request %s)", answer, d.By, reasonIn(d.Reason), d.ID))
	case fsstore.EvEdited:
		var d fsstore.Edit
		e.Decode(&d)
		if d.Instructions != nil {
			v.line(e.Time, "instructions", *d.Instructions)
		}
		if d.Name != nil {
			v.line(e.Time, "renamed", *d.Name)
		}
	case fsstore.EvEditRefused:
		var d fsstore.EditRefused
		e.Decode(&d)
		v.line(e.Time, "edit refused", d.Reason)
	case fsstore.EvCompaction:
		var d fsstore.Compaction
		e.Decode(&d)
		v.line(e.Time, "compacted", fmt.Sprintf("%s replaced by a summary (%d -> %d tokens)", d.Replaced, d.TokensBefore, d.TokensAfter))
	case fsstore.EvGate, fsstore.EvBudget, fsstore.EvLimits, fsstore.EvPermissions, fsstore.EvReminderSet, fsstore.EvReminderDone:
		v.line(e.Time, e.Type, string(jsontext.Readable(e.Data)))
	}
}

// state prints an agent or session state change; BUSY begins a turn.
func (v *convo) state(t time.Time, d fsstore.StateChange) {
	switch d.AgentState {
	case fsstore.AgentBusy:
		v.line(t, "-- turn", "begins ----------------------------------------")
	case fsstore.AgentTerminated:
		v.line(t, "TERMINATED", d.Reason)
	case fsstore.AgentIdle:
		v.line(t, "idle", d.Reason)
	case fsstore.AgentWaiting:
		if d.Reason == "" {
			d.Reason = "for replies"
		}
		v.line(t, "waiting", d.Reason)
	}
	if d.SessionState != "" {
		v.line(t, "session", strings.ToLower(string(d.SessionState))+reasonIn(d.Reason))
	}
}

// turn prints what a turn took and gave: its messages, its output, and
// what it used.
func (v *convo) turn(t time.Time, d fsstore.TurnRecord) {
	for _, m := range d.Messages {
		from := m.FromName
		if from == "" {
			from = m.From
		}
		v.line(t, "< "+from, m.Text)
	}
	for _, p := range d.Output {
		v.chunk(t, provider.Chunk{Kind: p.Kind, Tool: p.Tool, Text: p.Text}, false)
	}
	used := fmt.Sprintf("%d tokens in, %d out, $%s", d.InputTokens, d.OutputTokens, jsontext.Float(d.CostUSD))
	if d.Cut > 0 {
		used += fmt.Sprintf("; %d bytes of its text not kept in the log", d.Cut)
	}
	v.line(t, "-- turn", "done: "+used)
}

// chunk prints one piece of a turn's output. A denied tool is printed
// from its tool_denied event, unless denied is set (a live stream).
func (v *convo) chunk(t time.Time, c provider.Chunk, denied bool) {
	switch c.Kind {
	case provider.ChunkText:
		v.line(t, "text", c.Text)
	case provider.ChunkToolCall:
		name, args, _ := strings.Cut(c.Text, " ")
		v.line(t, "tool", name+" "+toolInput(args, 300))
	case provider.ChunkToolResult:
		v.line(t, "result", firstLines(c.Text, 4))
	case provider.ChunkDenied:
		if denied {
			v.line(t, "denied", c.Tool+": "+c.Text)
		}
	default:
		v.line(t, c.Kind, c.Text)
	}
}

// toolInput is a tool's input as one line: its command if it has one,
// else its JSON (api.InputText), cut to about n characters.
func toolInput(args string, n int) string {
	var in struct {
		Command *string `json:"command"`
	}
	text := api.InputText(json.RawMessage(args))
	if json.Unmarshal([]byte(args), &in) == nil && in.Command != nil {
		text = *in.Command
	}
	if r := []rune(text); len(r) > n {
		text = string(r[:n]) + fmt.Sprintf("... (+%d characters)", len(r)-n)
	}
	return text
}

// firstLines is the first n lines of s, and how many more there are.
func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) <= n {
		return s
	}
	return strings.Join(lines[:n], "\n") + fmt.Sprintf("\n[... %d more lines]", len(lines)-n)
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

// eventLine is an event as --view events prints it: seq, time, type and
// its data as JSON (its control characters are \u escapes).
func eventLine(e fsstore.Event) string {
	data := string(jsontext.Readable(e.Data))
	if len(data) > 300 {
		data = data[:300] + "..."
	}
	return fmt.Sprintf("%5d %s %-18s %s", e.Seq, e.Time.Local().Format("2006-01-02 15:04:05.000"), e.Type, data)
}

// decodeEvent decodes one frame of agent.events.
func decodeEvent(raw json.RawMessage) (fsstore.Event, error) {
	var e fsstore.Event
	err := json.Unmarshal(raw, &e)
	return e, err
}
