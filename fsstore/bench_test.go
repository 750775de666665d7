package fsstore

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
)

// Benchmarks of the durable operations against the disk's limit (one
// write and one fsync), and of a start-up scan of 10,000 agents.
//
//	go test ./fsstore -run '^$' -bench . -benchtime 2s

// benchLineSize is the length of a typical event line.
const benchLineSize = 200

// benchState returns a state change whose event line is benchLineSize
// bytes long.
func benchState(tb testing.TB) StateChange {
	d := StateChange{AgentState: AgentBusy, SessionState: SessionActive}
	for {
		raw, err := json.Marshal(d)
		if err != nil {
			tb.Fatal(err)
		}
		line := mustEncodeEvent(tb, Event{Seq: 1000, Time: time.Now(), Type: EvState, Data: raw})
		if len(line) >= benchLineSize {
			return d
		}
		d.Reason += "x"
	}
}

func benchLine(tb testing.TB) []byte {
	raw, err := json.Marshal(benchState(tb))
	if err != nil {
		tb.Fatal(err)
	}
	return mustEncodeEvent(tb, Event{Seq: 1000, Time: time.Now(), Type: EvState, Data: raw})
}

func benchAgent(b *testing.B) (*Store, *Agent) {
	s := mustOpen(b, b.TempDir(), Options{})
	a, err := s.CreateAgent(&Session{Name: "bench", Provider: "script"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	return s, a
}

// BenchmarkBareWriteFsync is the disk's limit: one write of a typical line
// and an fsync, on a plain file.
func BenchmarkBareWriteFsync(b *testing.B) {
	line := benchLine(b)
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "bare.jsonl"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	b.SetBytes(int64(len(line)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := f.Write(line); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppend appends events of the same size through the Log and
// through Agent.Commit (which also applies the event to the session).
// VsBare interleaves Log.Append with a bare write+fsync on a file next to
// it, so that both see the same disk, and reports their ratio.
func BenchmarkAppend(b *testing.B) {
	d := benchState(b)
	b.Run("Log", func(b *testing.B) {
		_, a := benchAgent(b)
		b.SetBytes(benchLineSize)
		for b.Loop() {
			if _, err := a.Log().Append(EvState, d); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Commit", func(b *testing.B) {
		_, a := benchAgent(b)
		b.SetBytes(benchLineSize)
		for b.Loop() {
			if _, err := a.Commit(d); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("VsBare", func(b *testing.B) {
		_, a := benchAgent(b)
		line := benchLine(b)
		f, err := os.OpenFile(filepath.Join(a.Files().Dir, "bare.jsonl"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		var bare, appends time.Duration
		for b.Loop() {
			t0 := time.Now()
			if _, err := f.Write(line); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if _, err := a.Log().Append(EvState, d); err != nil {
				b.Fatal(err)
			}
			bare += t1.Sub(t0)
			appends += time.Since(t1)
		}
		b.ReportMetric(float64(bare.Nanoseconds())/float64(b.N), "bare-ns/op")
		b.ReportMetric(float64(appends.Nanoseconds())/float64(b.N), "append-ns/op")
		b.ReportMetric(float64(appends)/float64(bare), "append/bare")
	})
}

// BenchmarkSnapshot replaces session.json after a commit: temp file, write,
// fsync, rename, directory fsync. Only the Snapshot is timed.
func BenchmarkSnapshot(b *testing.B) {
	_, a := benchAgent(b)
	d := benchState(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if _, err := a.Commit(d); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := a.Snapshot(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCreateAgent(b *testing.B) {
	s := mustOpen(b, b.TempDir(), Options{})
	for b.Loop() {
		a, err := s.CreateAgent(&Session{Name: "bench", Provider: "script", Instructions: "You are a benchmark."})
		if err != nil {
			b.Fatal(err)
		}
		a.Close()
	}
}

func BenchmarkSend(b *testing.B) {
	s, a := benchAgent(b)
	text := strings.Repeat("Please look at the failing test. ", 5)
	for b.Loop() {
		if err := s.Send(&Message{From: User, To: a.ID(), Kind: KindMessage, Text: text}); err != nil {
			b.Fatal(err)
		}
	}
}

const (
	scanAgents = 10_000
	scanEvents = 100
)

var scanFixture struct {
	once sync.Once
	home string
	err  error
}

// BenchmarkScan10k scans a home of 10,000 agents with 100 events each and
// a snapshot up to date, with a warm cache: the daemon's start-up.
func BenchmarkScan10k(b *testing.B) {
	scanFixture.once.Do(func() {
		start := time.Now()
		scanFixture.home, scanFixture.err = buildScanFixture(scanAgents)
		b.Logf("fixture of %d agents built in %v", scanAgents, time.Since(start))
	})
	if scanFixture.err != nil {
		b.Fatal(scanFixture.err)
	}
	s := mustOpen(b, scanFixture.home, Options{})
	check := func() {
		res := mustScan(b, s, ScanOptions{Repair: true})
		if len(res.Agents) != scanAgents || len(res.Findings) != 0 {
			b.Fatalf("scan: %d agents, findings:\n%s", len(res.Agents), fmtFindings(res.Findings[:min(len(res.Findings), 10)]))
		}
		closeAgents(res)
	}
	check() // warm the cache
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		check()
	}
	b.ReportMetric(float64(scanAgents*b.N)/b.Elapsed().Seconds(), "agents/s")
	b.ReportMetric(b.Elapsed().Seconds()*1000/float64(b.N), "ms/scan")
}

func removeScanFixture() {
	if scanFixture.home != "" {
		os.RemoveAll(scanFixture.home)
	}
}

// buildScanFixture writes a home of the given number of agents directly, without
// fsync. Every agent has the same events 2 to scanEvents; its first event
// and its session.json carry its id.
func buildScanFixture(agents int) (string, error) {
	home, err := os.MkdirTemp("", "fsstore-scan10k-")
	if err != nil {
		return "", err
	}
	l := Layout{Home: home}
	for _, d := range []string{l.AgentsDir(), l.ArchiveDir()} {
		if err := os.Mkdir(d, dirPerm); err != nil {
			return home, err
		}
	}
	t0 := epoch
	tmpl := &Session{Version: Version, ID: idA, Name: "worker", Provider: "claude", Model: "opus",
		Instructions: "Work on the task you are given and report back.", Workspace: "proj/main",
		AgentState: AgentIdle, SessionState: SessionCreated, CreatedAt: t0, UpdatedAt: t0}
	var rest []byte // events 2..scanEvents
	cur, err := Apply(nil, mustEvent(1, t0, EvCreated, tmpl))
	if err != nil {
		return home, err
	}
	for seq := uint64(2); seq <= scanEvents; seq++ {
		ts := t0.Add(time.Duration(seq) * time.Second)
		var e Event
		switch seq % 4 {
		case 0:
			e = mustEvent(seq, ts, EvState, StateChange{AgentState: AgentBusy, SessionState: SessionActive, Reason: "turn"})
		case 1:
			e = mustEvent(seq, ts, EvTurn, Counters{Turns: 1, InputTokens: 1234, OutputTokens: 567, CostUSD: 0.0123})
		case 2:
			e = mustEvent(seq, ts, EvSent, MessageRef{ID: "019a6f1e-7c2b-7d3e-9a1b-2c3d4e5f6b01", To: User})
		case 3:
			e = mustEvent(seq, ts, EvState, StateChange{AgentState: AgentIdle, Reason: "turn done"})
		}
		if cur, err = Apply(cur, e); err != nil {
			return home, err
		}
		line, err := EncodeEvent(e)
		if err != nil {
			return home, err
		}
		rest = append(rest, line...)
	}

	var g errgroup.Group
	g.SetLimit(8)
	for i := 0; i < agents; i++ {
		g.Go(func() error {
			id := NewID()
			a := l.Agent(id)
			first := tmpl.Clone()
			first.ID, first.Name = id, fmt.Sprintf("worker-%d", i)
			line, err := EncodeEvent(mustEvent(1, t0, EvCreated, first))
			if err != nil {
				return err
			}
			snap := cur.Clone()
			snap.ID, snap.Name = id, first.Name
			data, err := EncodeSession(snap)
			if err != nil {
				return err
			}
			for _, d := range []string{a.Dir, a.Inbox().Dir, a.Inbox().Sub(InboxTmp), a.Inbox().Sub(InboxNew), a.Inbox().Sub(InboxCur)} {
				if err := os.Mkdir(d, dirPerm); err != nil {
					return err
				}
			}
			if err := os.WriteFile(a.Events(), append(line, rest...), filePerm); err != nil {
				return err
			}
			return os.WriteFile(a.Session(), data, filePerm)
		})
	}
	return home, g.Wait()
}

func mustEvent(seq uint64, ts time.Time, typ string, data any) Event {
	raw, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	return Event{Seq: seq, Time: ts, Type: typ, Data: raw}
}
