package fsstore

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
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
		data Payload
		meta map[string]string // the agent's metadata
	}{
		{"sent", MessageRef{ID: "019a6f1e-7c2b-7d3e-9a1b-2c3d4e5f6b01", To: User}, map[string]string{"team": "a"}},
		{"state", StateChange{AgentState: AgentBusy, SessionState: SessionActive, Reason: "turn"}, map[string]string{"team": "a"}},
		{"turn", Counters{Turns: 1, InputTokens: 1234, OutputTokens: 567, CostUSD: 0.0123}, map[string]string{"team": "a"}},
		// As substrat bench appends: an agent without metadata.
		{"sent-nometa", MessageRef{ID: "019a6f1e-7c2b-7d3e-9a1b-2c3d4e5f6b01", To: User}, nil},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s := mustOpen(b, b.TempDir(), Options{FS: noFsyncFS{OS{}}})
			a, err := s.CreateAgent(&Session{Name: "bench", Provider: "script",
				Instructions: "Work on the task you are given and report back.", Metadata: c.meta})
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			data := c.data // boxed once, as a caller holding an any would
			b.ReportAllocs()
			for b.Loop() {
				if _, err := a.Commit(data); err != nil {
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

func (noFsyncFS) OpenFSSync(string) (FSSync, error) { return noFSSync{}, nil }

type noFSSync struct{}

func (noFSSync) Sync() error  { return nil }
func (noFSSync) Close() error { return nil }

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

// BenchmarkAppend64 appends history events from 64 agents at once, each
// its own goroutine, against 64 bare write+fsync loops on files next to
// them: the disk's 64-writer limit. Compare their ns/op (lower is better).
func BenchmarkAppend64(b *testing.B) {
	const writers = 64
	s := mustOpen(b, b.TempDir(), Options{})
	var as []*Agent
	for i := range writers {
		a, err := s.CreateAgent(&Session{Name: "w" + strconv.Itoa(i), Provider: "script",
			Instructions: "Work on the task you are given, report back to your parent, and keep your notes short."})
		if err != nil {
			b.Fatal(err)
		}
		defer a.Close()
		as = append(as, a)
	}
	ref := MessageRef{ID: NewID(), To: User}
	line := benchLine(b)
	run := func(b *testing.B, op func(w int) error) {
		var next atomic.Int64
		b.SetParallelism(writers / runtime.GOMAXPROCS(0))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			w := int(next.Add(1)-1) % writers
			for pb.Next() {
				if err := op(w); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.Run("Commit", func(b *testing.B) {
		run(b, func(w int) error {
			_, err := as[w].Commit(ref)
			return err
		})
	})
	b.Run("Bare", func(b *testing.B) {
		files := make([]*os.File, writers)
		for w := range files {
			f, err := os.OpenFile(filepath.Join(as[w].Files().Dir, "bare.jsonl"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			files[w] = f
		}
		run(b, func(w int) error {
			if _, err := files[w].Write(line); err != nil {
				return err
			}
			return files[w].Sync()
		})
	})
}

// BenchmarkGroupCommit measures agent creation and message sends with 64
// goroutines at once on the real disk, with group commit ("group") and
// with every operation paying its own fsyncs ("alone", as before group
// commit, but with an operation's fsyncs in parallel). The two run in
// turn in the same process; compare their ops/s:
//
//	go test ./fsstore -run '^$' -bench GroupCommit -benchtime 2s
func BenchmarkGroupCommit(b *testing.B) {
	const workers = 64
	for _, op := range []string{"create", "send"} {
		for _, mode := range []string{"group", "alone"} {
			b.Run(op+"/"+mode, func(b *testing.B) {
				s := mustOpen(b, b.TempDir(), Options{})
				s.group.alone = mode == "alone"
				var ids []string
				for w := range workers {
					a, err := s.CreateAgent(&Session{Name: "r" + strconv.Itoa(w), Provider: "script"})
					if err != nil {
						b.Fatal(err)
					}
					ids = append(ids, a.ID())
					a.Close()
				}
				var next atomic.Int64
				b.ResetTimer()
				start := time.Now()
				var g errgroup.Group
				for w := range workers {
					g.Go(func() error {
						for next.Add(1) <= int64(b.N) {
							var err error
							if op == "create" {
								var a *Agent
								if a, err = s.CreateAgent(&Session{Name: "x", Provider: "script"}); err == nil {
									a.Close()
								}
							} else {
								err = s.Send(&Message{From: User, To: ids[w], Kind: KindMessage, Text: "hello"})
							}
							if err != nil {
								return err
							}
						}
						return nil
					})
				}
				if err := g.Wait(); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
			})
		}
	}
}
