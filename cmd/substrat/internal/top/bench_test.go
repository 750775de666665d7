package top

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
)

// bigTeam is n agents: ten roots, each with a tree of n/10 agents, as the
// daemon's agent.list encodes them.
func bigTeam(n int) []byte {
	agents := make([]api.AgentInfo, 0, n)
	for i := range n {
		a := api.AgentInfo{ID: fmt.Sprintf("id-%04d", i), Name: fmt.Sprintf("agent-%04d", i), Provider: "claude",
			AgentState: fsstore.AgentIdle, SessionState: fsstore.SessionActive, Pool: "default",
			Counters: fsstore.Counters{Turns: int64(i), InputTokens: int64(i) * 1000, OutputTokens: int64(i) * 100}}
		if i%(n/10) != 0 { // a root every n/10; the others hang below an earlier agent of their tree
			root := i - i%(n/10)
			a.ParentID = fmt.Sprintf("id-%04d", root+(i-root-1)/3)
		}
		a.Path = "/" + a.Name
		if i%7 == 0 {
			a.AgentState = fsstore.AgentBusy
		}
		agents = append(agents, a)
	}
	b, err := json.Marshal(agents)
	if err != nil {
		panic(err)
	}
	return b
}

func loadedModel(b *testing.B, list []byte) *Model {
	m := New(context.Background(), nil, Options{NoColor: true})
	m.width, m.height = 120, 40
	var s Snapshot
	if err := json.Unmarshal(list, &s.Agents); err != nil {
		b.Fatal(err)
	}
	m.Update(snapMsg{s: s})
	m.move(500)
	return m
}

// events are a second's worth of watch events at rate per second, spread
// over the agents.
func events(rate, agents int) []Event {
	out := make([]Event, rate)
	for i := range out {
		ch := provider.Chunk{Kind: provider.ChunkText, Text: fmt.Sprintf("line %d of the work", i)}
		if i%3 == 0 {
			ch = provider.Chunk{Kind: provider.ChunkToolCall, Text: `Bash {"command":"go test ./..."}`}
		}
		data, _ := json.Marshal(ch)
		out[i] = Event{Agent: fmt.Sprintf("id-%04d", (i*37)%agents), Type: "output", Time: time.Now(), Data: data}
	}
	return out
}

// BenchmarkFrame is the time to render one frame of 1,000 agents.
func BenchmarkFrame(b *testing.B) {
	m := loadedModel(b, bigTeam(1000))
	m.Update(eventsMsg(events(100, 1000)))
	b.ResetTimer()
	for b.Loop() {
		_ = m.View()
	}
}

// BenchmarkSecondAt100Events is one second of top's work with 1,000
// agents and 100 events a second: the events in 20 batches, each followed
// by a frame, and two snapshots of the tree (decoded from the daemon's
// JSON, indexed, flattened) with their frames. %cpu is that work's share
// of one core over the second.
func BenchmarkSecondAt100Events(b *testing.B) {
	list := bigTeam(1000)
	m := loadedModel(b, list)
	evs := events(100, 1000)
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		for i := 0; i < len(evs); i += 5 {
			m.Update(eventsMsg(evs[i : i+5]))
			_ = m.View()
		}
		for range 2 {
			var s Snapshot
			if err := json.Unmarshal(list, &s.Agents); err != nil {
				b.Fatal(err)
			}
			m.Update(snapMsg{s: s})
			_ = m.View()
		}
	}
	b.ReportMetric(float64(time.Since(start))/float64(b.N)/float64(time.Second)*100, "%cpu")
}
