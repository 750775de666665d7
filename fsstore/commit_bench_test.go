package fsstore

import (
	"io/fs"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
)

// BenchmarkCommitCPU measures the CPU time and the allocations of
// Agent.Commit without the disk: the log is written to a real file whose
// fsync is skipped, so what is left is the store's own work per event (the
// write system call included). Run with -benchmem:
//
//	go test ./fsstore -run '^$' -bench CommitCPU -benchmem
//
// History-only events (message_sent) leave the snapshot as it is; state
// and turn events change it.
func BenchmarkCommitCPU(b *testing.B) {
	cases := []struct {
		name string
		typ  string
		data any
	}{
		{"sent", EvSent, MessageRef{ID: "019a6f1e-7c2b-7d3e-9a1b-2c3d4e5f6b01", To: User}},
		{"state", EvState, StateChange{AgentState: AgentBusy, SessionState: SessionActive, Reason: "turn"}},
		{"turn", EvTurn, Counters{Turns: 1, InputTokens: 1234, OutputTokens: 567, CostUSD: 0.0123}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s := mustOpen(b, b.TempDir(), Options{FS: noFsyncFS{OS{}}})
			a, err := s.CreateAgent(&Session{Name: "bench", Provider: "script",
				Instructions: "Work on the task you are given and report back.", Metadata: map[string]string{"team": "a"}})
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			data := c.data // boxed once, as a caller holding an any would
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.Commit(c.typ, data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// noFsyncFS is the OS file system with File.Sync and SyncDir skipped: for
// measuring the CPU cost of the store, never for durability tests.
type noFsyncFS struct{ FS }

func (n noFsyncFS) Create(name string, perm fs.FileMode) (File, error) {
	f, err := n.FS.Create(name, perm)
	if err != nil {
		return nil, err
	}
	return noFsyncFile{f}, nil
}

func (n noFsyncFS) OpenAppend(name string) (File, error) {
	f, err := n.FS.OpenAppend(name)
	if err != nil {
		return nil, err
	}
	return noFsyncFile{f}, nil
}

func (noFsyncFS) SyncDir(string) error { return nil }

type noFsyncFile struct{ File }

func (noFsyncFile) Sync() error { return nil }

// BenchmarkScan1k scans a home of 1,000 agents with 100 events each and a
// snapshot up to date, with a warm cache. For profiling the start-up:
//
//	go test ./fsstore -run '^$' -bench Scan1k -benchmem -cpuprofile cpu.out
//
// BareRead is the floor: reading every session.json and events.jsonl once
// with os.ReadFile and as many workers as a scan.
func BenchmarkScan1k(b *testing.B) {
	home, err := buildScanFixture(1000)
	if home != "" {
		b.Cleanup(func() { os.RemoveAll(home) })
	}
	if err != nil {
		b.Fatal(err)
	}
	s := mustOpen(b, home, Options{})
	closeAgents(mustScan(b, s, ScanOptions{Repair: true})) // warm the cache
	// CPU time (user and system, all threads) tells more than wall time
	// on a shared machine.
	cpuMetric := func(b *testing.B, f func()) {
		b.ReportAllocs()
		cpu0 := cpuTime()
		for b.Loop() {
			f()
		}
		b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
	}
	b.Run("Scan", func(b *testing.B) {
		cpuMetric(b, func() {
			res := mustScan(b, s, ScanOptions{Repair: true})
			if len(res.Agents) != 1000 || len(res.Findings) != 0 {
				b.Fatalf("scan: %d agents, %d findings", len(res.Agents), len(res.Findings))
			}
			closeAgents(res)
		})
	})
	b.Run("BareRead", func(b *testing.B) {
		entries, err := os.ReadDir(s.layout.AgentsDir())
		if err != nil {
			b.Fatal(err)
		}
		cpuMetric(b, func() {
			var g errgroup.Group
			g.SetLimit(4 * runtime.GOMAXPROCS(0))
			for _, e := range entries {
				g.Go(func() error {
					files := s.layout.Agent(e.Name())
					for _, p := range []string{files.Session(), files.Events()} {
						if _, err := os.ReadFile(p); err != nil {
							return err
						}
					}
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// cpuTime is the CPU time the process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
