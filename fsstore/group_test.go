package fsstore

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// syncCountFS counts the syncfs calls on the real file system, and fails
// them while fail is set.
type syncCountFS struct {
	OS
	syncfs atomic.Int64
	fail   atomic.Bool
}

var errBarrier = errors.New("injected syncfs failure")

func (c *syncCountFS) OpenFSSync(name string) (FSSync, error) {
	h, err := c.OS.OpenFSSync(name)
	if err != nil {
		return nil, err
	}
	return countingFSSync{h, c}, nil
}

type countingFSSync struct {
	FSSync
	c *syncCountFS
}

func (s countingFSSync) Sync() error {
	s.c.syncfs.Add(1)
	if s.c.fail.Load() {
		return errBarrier
	}
	return s.FSSync.Sync()
}

// forceSyncFS makes syncfs look far cheaper to s's committer than
// fsyncs, so that its batches (fewer than 16) all use it.
func forceSyncFS(s *Store) { s.group.cost[byFsyncs] = time.Hour }

// TestGroupCommitLoneOpFsyncsItsOwn: a create or a send with no company
// makes no syncfs (it fsyncs its own files), and a batch makes exactly
// one.
func TestGroupCommitLoneOpFsyncsItsOwn(t *testing.T) {
	fsys := &syncCountFS{}
	s := mustOpen(t, t.TempDir(), Options{FS: fsys})
	a, err := s.CreateAgent(&Session{Name: "a", Provider: "script"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&Message{From: User, To: a.ID(), Kind: KindMessage, Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	if n := fsys.syncfs.Load(); n != 0 {
		t.Fatalf("lone operations made %d syncfs", n)
	}
	_, errs := s.CreateAgents([]*Session{{Name: "b", Provider: "script"}, {Name: "c", Provider: "script"}})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n := fsys.syncfs.Load(); n != 1 {
		t.Fatalf("a batch of two creates made %d syncfs, want 1", n)
	}
	// A create that fails before its commit (its temporary directory is
	// there) ends too: with nothing in flight, the handle on the file
	// system is closed (it would keep it busy, and unmountable).
	if err := os.Mkdir(s.layout.TempAgentDir(idA), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateAgent(&Session{ID: idA, Name: "d", Provider: "script"}); err == nil {
		t.Fatal("create over a leftover temporary directory succeeded")
	}
	if s.group.inflight != 0 || s.group.fsys != nil {
		t.Fatalf("%d operations in flight, handle %v; want none", s.group.inflight, s.group.fsys)
	}
	res := mustScan(t, mustOpen(t, s.layout.Home, Options{}), ScanOptions{})
	defer closeAgents(res)
	if got := len(res.Agents); got != 3 || len(res.Findings) != 0 {
		t.Fatalf("%d agents, findings %v; want 3 and none", got, res.Findings)
	}
}

// TestGroupCommitFailedBarrierFailsTheBatch: when the barrier fails, no
// operation of the batch is acknowledged or published, nothing of them
// is left behind, and the store goes on working.
func TestGroupCommitFailedBarrierFailsTheBatch(t *testing.T) {
	fsys := &syncCountFS{}
	s := mustOpen(t, t.TempDir(), Options{FS: fsys})
	forceSyncFS(s)
	r, err := s.CreateAgent(&Session{Name: "r", Provider: "script"})
	if err != nil {
		t.Fatal(err)
	}
	fsys.fail.Store(true)
	as, errs := s.CreateAgents([]*Session{{Name: "b", Provider: "script"}, {Name: "c", Provider: "script"}})
	for i, err := range errs {
		if !errors.Is(err, errBarrier) || as[i] != nil {
			t.Fatalf("create %d: %v, %v; want the barrier's error", i, as[i], err)
		}
	}
	msgs := []*Message{{From: User, To: r.ID(), Text: "1"}, {From: User, To: User, Text: "2"}}
	for i, err := range s.SendAll(msgs) {
		if !errors.Is(err, errBarrier) {
			t.Fatalf("send %d: %v; want the barrier's error", i, err)
		}
	}
	for _, dir := range []string{s.layout.AgentsDir(), r.Files().Inbox().Sub(InboxTmp), r.Files().Inbox().Sub(InboxNew),
		s.layout.UserInbox().Sub(InboxTmp), s.layout.UserInbox().Sub(InboxNew)} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if dir == s.layout.AgentsDir() {
			want = 1 // r
		}
		if len(entries) != want {
			t.Errorf("%s holds %d entries after the failed batch, want %d", dir, len(entries), want)
		}
	}
	fsys.fail.Store(false)
	if _, errs := s.CreateAgents([]*Session{{Name: "b", Provider: "script"}, {Name: "c", Provider: "script"}}); errors.Join(errs...) != nil {
		t.Fatalf("after the failure: %v", errors.Join(errs...))
	}
	res := mustScan(t, mustOpen(t, s.layout.Home, Options{}), ScanOptions{})
	defer closeAgents(res)
	if got := len(res.Agents); got != 3 || len(res.Findings) != 0 {
		t.Fatalf("%d agents, findings %v; want 3 and none", got, res.Findings)
	}
}

// TestGroupCommitConcurrent: many goroutines create agents and send to
// them at once (run with -race); every acknowledged operation is on disk
// for a fresh store, and no rename of one batch is lost to another.
func TestGroupCommitConcurrent(t *testing.T) {
	const workers, each = 16, 4
	s := mustOpen(t, t.TempDir(), Options{})
	var wg sync.WaitGroup
	ids := make([][]string, workers)
	errs := make(chan error, workers*each*2)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				a, err := s.CreateAgent(&Session{Name: fmt.Sprintf("w%d-%d", w, i), Provider: "script"})
				if err != nil {
					errs <- err
					return
				}
				ids[w] = append(ids[w], a.ID())
				a.Close()
				if err := s.Send(&Message{From: User, To: a.ID(), Kind: KindMessage, Text: "hi"}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	res := mustScan(t, mustOpen(t, s.layout.Home, Options{}), ScanOptions{})
	defer closeAgents(res)
	if len(res.Agents) != workers*each || len(res.Findings) != 0 {
		t.Fatalf("%d agents (want %d), findings %v", len(res.Agents), workers*each, res.Findings)
	}
	for _, a := range res.Agents {
		if a.PendingAtLoad() != 1 {
			t.Errorf("agent %s has %d pending messages, want 1", a.ID(), a.PendingAtLoad())
		}
	}
}

// TestScanRemovesUserTmpLeftover: a message to USER that a crash left in
// inbox/tmp (a batch's syncfs made its name durable, the rename never
// came) is a leftover, removed by a repairing scan.
func TestScanRemovesUserTmpLeftover(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{})
	path := s.layout.UserInbox().Path(InboxTmp, idMsg1)
	writeFile(t, path, []byte("{}\n"))
	res := mustScan(t, s, ScanOptions{Repair: true})
	if len(res.Findings) != 1 || res.Findings[0].Kind != FindLeftover || res.Findings[0].Path != path || !res.Findings[0].Repaired {
		t.Fatalf("findings %+v; want one repaired leftover at %s", res.Findings, path)
	}
	if exists(path) {
		t.Fatalf("%s is still there", path)
	}
}

// TestGroupCommitErrorBeforeBarrierFailsEarlierOps: syncfs cannot say in
// which file a write-back error was, so an operation that began before
// a batch's syncfs reported one fails at its own barrier, even if that
// barrier succeeds; one that began after it does not.
func TestGroupCommitErrorBeforeBarrierFailsEarlierOps(t *testing.T) {
	fsys := &syncCountFS{}
	s := mustOpen(t, t.TempDir(), Options{FS: fsys})
	forceSyncFS(s)
	early, err := s.group.begin()
	if err != nil {
		t.Fatal(err)
	}
	fsys.fail.Store(true)
	if _, errs := s.CreateAgents([]*Session{{Name: "b", Provider: "script"}, {Name: "c", Provider: "script"}}); !errors.Is(errs[0], errBarrier) {
		t.Fatalf("create with a failing syncfs: %v", errs[0])
	}
	fsys.fail.Store(false)
	late, err := s.group.begin()
	if err != nil {
		t.Fatal(err)
	}
	s.group.commit(early, late)
	if !errors.Is(early.err, syscall.EIO) {
		t.Errorf("the op begun before the reported error: %v, want EIO", early.err)
	}
	if late.err != nil {
		t.Errorf("the op begun after it: %v", late.err)
	}
}

// TestGroupCommitWithoutOneFileSystem: with agents/ on another file
// system than the home (a symlink), one syncfs would not cover a batch:
// a batch then fsyncs its files and directories, and calls no syncfs.
func TestGroupCommitWithoutOneFileSystem(t *testing.T) {
	other, err := os.MkdirTemp("/dev/shm", "substrat-agents-")
	if err != nil {
		t.Skipf("no /dev/shm to put agents/ on: %v", err)
	}
	defer os.RemoveAll(other)
	home := t.TempDir()
	var a, b syscall.Stat_t
	if syscall.Stat(home, &a) != nil || syscall.Stat(other, &b) != nil || a.Dev == b.Dev {
		t.Skip("/dev/shm is on the same file system as the temporary directory")
	}
	if err := os.Symlink(other, home+"/agents"); err != nil {
		t.Fatal(err)
	}
	fsys := &syncCountFS{}
	s := mustOpen(t, home, Options{FS: fsys})
	if s.group.root != "" {
		t.Fatalf("the committer syncfs's %s though agents/ is on another file system", s.group.root)
	}
	if _, errs := s.CreateAgents([]*Session{{Name: "b", Provider: "script"}, {Name: "c", Provider: "script"}}); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	if n := fsys.syncfs.Load(); n != 0 {
		t.Fatalf("%d syncfs calls", n)
	}
	res := mustScan(t, mustOpen(t, home, Options{}), ScanOptions{})
	defer closeAgents(res)
	if len(res.Agents) != 2 {
		t.Fatalf("%d agents, want 2", len(res.Agents))
	}
}

// TestGroupCommitBarrierFollowsItsCost: a batch of several takes the
// barrier whose recent batches cost less per operation, syncfs first,
// and tries the other one every 16th batch.
func TestGroupCommitBarrierFollowsItsCost(t *testing.T) {
	c := newCommitter(OS{}, "/")
	var ways []int
	for range 3 {
		w := c.barrierWay()
		ways = append(ways, w)
		c.costs(w, map[int]time.Duration{bySyncFS: time.Millisecond, byFsyncs: 3 * time.Millisecond}[w])
	}
	if want := []int{bySyncFS, byFsyncs, bySyncFS}; fmt.Sprint(ways) != fmt.Sprint(want) {
		t.Fatalf("ways %v, want %v (syncfs, then fsyncs once to measure them, then the cheaper)", ways, want)
	}
	for c.batches < 15 {
		if w := c.barrierWay(); w != bySyncFS {
			t.Fatalf("batch %d took the dearer barrier", c.batches)
		}
	}
	if w := c.barrierWay(); w != byFsyncs {
		t.Fatalf("the 16th batch did not try the other barrier")
	}
	// syncfs grows dear (another program's writes): the fsyncs take over.
	for range 8 {
		c.costs(bySyncFS, 10*time.Millisecond)
	}
	if w := c.barrierWay(); w != byFsyncs {
		t.Fatalf("took syncfs at %v per operation over fsyncs at %v", c.cost[bySyncFS], c.cost[byFsyncs])
	}
}
