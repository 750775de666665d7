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

// BenchmarkSecondAt100Events is one second of top's work with 1,000 and
// with 10,000 agents and 100 events a second (a third of them state or
// usage changes that make top read the agent back): the events in ten
// batches (batchGap), each followed by a frame, and ten partial reads
// (the agents touched, their ancestors, and the rows on screen once),
// each answered as the daemon would (JSON encoded and decoded), applied
// and drawn. %cpu is that work's share of one core over the second; it
// should not grow with the tree.
func BenchmarkSecondAt100Events(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("agents=%d", n), func(b *testing.B) {
			f := &fake{}
			if err := json.Unmarshal(bigTeam(n), &f.snap.Agents); err != nil {
				b.Fatal(err)
			}
			m := New(context.Background(), f, Options{NoColor: true})
			m.width, m.height = 120, 40
			s, err := ReadSnapshot(context.Background(), f)
			if err != nil {
				b.Fatal(err)
			}
			m.Update(snapMsg{s: s})
			m.move(500)
			evs := events(100, n)
			for i := range evs {
				if i%3 == 1 {
					evs[i].Type = fsstore.EvTurn
				}
			}
			b.ResetTimer()
			var spent time.Duration // top's work; the fake daemon's answers are not counted
			for b.Loop() {
				for i := 0; i < len(evs); i += 10 {
					t := time.Now()
					m.Update(eventsMsg(evs[i : i+10]))
					_ = m.View()
					cmd := m.fetchPart()
					spent += time.Since(t)
					msg := cmd()
					t = time.Now()
					if p, ok := msg.(partMsg); ok { // decoded as if it came over the socket
						raw, _ := json.Marshal(p.page)
						p.page = api.ListPage{}
						json.Unmarshal(raw, &p.page)
						msg = p
					}
					m.Update(msg)
					_ = m.View()
					spent += time.Since(t)
				}
			}
			b.ReportMetric(float64(spent)/float64(b.N)/float64(time.Second)*100, "%cpu")
			b.ReportMetric(float64(m.readAgents)/float64(m.reads), "agents/read")
		})
	}
}
