package fsstore

import (
	"io/fs"
	"testing"
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
