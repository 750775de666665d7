package top

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/internal/jsontext"
	"github.com/substrat/substrat/internal/termtext"
	"github.com/substrat/substrat/provider"
)

// describe turns a watch event into a line of the agent's stream, and
// into what the agent is doing now ("" leaves that as it was).
func describe(e Event) (line, now string) {
	switch e.Type {
	case "output":
		var ch provider.Chunk
		if json.Unmarshal(e.Data, &ch) != nil {
			return "", ""
		}
		text := oneLine(ch.Text)
		switch ch.Kind {
		case provider.ChunkToolCall:
			name, _, _ := strings.Cut(text, " ")
			return "⚙ " + text, "⚙ " + name
		case provider.ChunkToolResult:
			return "← " + text, ""
		case provider.ChunkDenied:
			tool := termtext.Row(ch.Tool)
			return "✗ " + tool + " denied: " + text, "✗ " + tool + " denied"
		}
		if text == "" {
			return "", ""
		}
		return "› " + text, "› " + text
	case "tool":
		var d struct {
			Tool string `json:"tool"`
			OK   bool   `json:"ok"`
		}
		json.Unmarshal(e.Data, &d)
		d.Tool = termtext.Row(d.Tool)
		if d.OK {
			return "tool " + d.Tool, "⚙ " + d.Tool
		}
		return "tool " + d.Tool + " failed", "⚙ " + d.Tool + " failed"
	case "turn_done":
		var d struct {
			Text string `json:"text"`
		}
		json.Unmarshal(e.Data, &d)
		return "turn done: " + oneLine(d.Text), "done: " + oneLine(d.Text)
	case "message":
		var d struct {
			From string `json:"from"`
			Text string `json:"text"`
		}
		json.Unmarshal(e.Data, &d)
		return "✉ from " + termtext.Row(d.From) + ": " + oneLine(d.Text), ""
	case fsstore.EvState:
		var d fsstore.StateChange
		json.Unmarshal(e.Data, &d)
		what := strings.TrimSpace(string(d.AgentState) + " " + string(d.SessionState))
		if d.Reason != "" {
			what += " (" + oneLine(d.Reason) + ")"
		}
		now := ""
		switch d.AgentState {
		case fsstore.AgentBusy:
			now = "thinking…"
		case fsstore.AgentWaiting:
			now = "waiting for a reply"
			if strings.HasPrefix(d.Reason, "waiting for approval") {
				now = d.Reason
			}
		}
		return "state " + what, now
	case fsstore.EvCreated:
		return "created", ""
	case fsstore.EvCompaction:
		var d fsstore.Compaction
		json.Unmarshal(e.Data, &d)
		line := "context compacted: " + oneLine(d.Replaced)
		if d.TokensAfter > 0 {
			line += fmt.Sprintf(", %d → %d tokens", d.TokensBefore, d.TokensAfter)
		} else if d.TokensBefore > 0 {
			line += fmt.Sprintf(", from %d tokens", d.TokensBefore)
		}
		return line, ""
	case fsstore.EvTurnFailed:
		var d fsstore.TurnFailed
		json.Unmarshal(e.Data, &d)
		return "turn failed: " + oneLine(d.Error), "failed: " + oneLine(d.Error)
	}
	data := oneLine(string(jsontext.Readable(e.Data)))
	if data == "" || data == "null" {
		return termtext.Row(string(e.Type)), ""
	}
	return fmt.Sprintf("%s %s", termtext.Row(string(e.Type)), data), ""
}

// oneLine keeps the first line of s, without surrounding blanks, at most
// 300 characters, with what could drive the terminal escaped
// (termtext.Row): the text is an agent's.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[:i]) + " …"
	}
	if r := []rune(s); len(r) > 300 {
		s = string(r[:300]) + "…"
	}
	return termtext.Row(s)
}
