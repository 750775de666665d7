package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
)

// Group commit (fsstore/group.go) cut by a power loss at every point of
// a batch: a batch of creates and a batch of sends to three inboxes are
// each crashed after every persist point they make, with the tidy crash
// (nothing unsynced survives) and with untidy ones (directories written
// back, unsynced appends partly kept). After the restart and a repairing
// scan, each operation acknowledged before the crash is there whole,
// each other one is whole or absent, and nothing half-made is left.

// batchWorld is a home with two agents, R1 and R2, to send to.
type batchWorld struct {
	fs     *FS
	store  *fsstore.Store
	r1, r2 string
}

func newBatchWorld(t *testing.T) *batchWorld {
	t.Helper()
	clock := NewClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	w := &batchWorld{fs: NewFS(clock.Now)}
	ids := NewIDs(clock.Now, 3, 1)
	s, err := fsstore.Open(Home, fsstore.Options{FS: w.fs, Now: clock.Now, NewID: ids.New})
	if err != nil {
		t.Fatal(err)
	}
	w.store = s
	for i, id := range []*string{&w.r1, &w.r2} {
		a, err := s.CreateAgent(&fsstore.Session{Name: fmt.Sprintf("r%d", i+1), Provider: "script"})
		if err != nil {
			t.Fatal(err)
		}
		*id = a.ID()
	}
	return w
}

// batchOp is one operation of the batch under test: its outcome, and
// whether it is on disk whole (found) after the restart.
type batchOp struct {
	what  string
	acked bool
	found func(s *fsstore.Store, agents map[string]bool) (bool, error)
}

// createBatch creates three agents in one batch.
func createBatch(t *testing.T, w *batchWorld) []batchOp {
	sess := []*fsstore.Session{
		{Name: "a", Provider: "script", ParentID: w.r1},
		{Name: "b", Provider: "script", ParentID: w.r1},
		{Name: "c", Provider: "script", ParentID: w.r2},
	}
	for _, s := range sess {
		s.ID = w.store.NewID()
	}
	_, errs := w.store.CreateAgents(sess)
	var ops []batchOp
	for i, s := range sess {
		id := s.ID
		ops = append(ops, batchOp{what: "create " + s.Name, acked: errs[i] == nil,
			found: func(_ *fsstore.Store, agents map[string]bool) (bool, error) { return agents[id], nil }})
	}
	return ops
}

// sendBatch sends five messages in one batch: two to R1, two to R2, one
// to USER.
func sendBatch(t *testing.T, w *batchWorld) []batchOp {
	var msgs []*fsstore.Message
	for i, to := range []string{w.r1, w.r2, fsstore.User, w.r1, w.r2} {
		msgs = append(msgs, &fsstore.Message{ID: w.store.NewID(), From: fsstore.System, To: to,
			Kind: fsstore.KindMessage, Text: fmt.Sprintf("m%d", i)})
	}
	errs := w.store.SendAll(msgs)
	var ops []batchOp
	for i, m := range msgs {
		m := m
		ops = append(ops, batchOp{what: "send " + m.Text, acked: errs[i] == nil,
			found: func(s *fsstore.Store, _ map[string]bool) (bool, error) {
				inbox := s.Layout().UserInbox()
				if m.To != fsstore.User {
					inbox = s.Layout().Agent(m.To).Inbox()
				}
				got, bad, err := fsstore.ReadInbox(s.FS(), inbox, fsstore.InboxNew)
				if err != nil || len(bad) > 0 {
					return false, fmt.Errorf("inbox of %s: %v %v", m.To, err, bad)
				}
				for _, g := range got {
					if g.ID == m.ID {
						if g.Text != m.Text {
							return false, fmt.Errorf("message %s reads %q", m.ID, g.Text)
						}
						return true, nil
					}
				}
				return false, nil
			}})
	}
	return ops
}

var batches = []struct {
	name  string
	batch func(*testing.T, *batchWorld) []batchOp
}{{"creates", createBatch}, {"sends", sendBatch}}

func TestGroupCommitCutAtEveryPoint(t *testing.T) {
	for _, tc := range batches {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range cutBatch(t, tc.batch, fsstore.BugNone) {
				t.Error(p)
			}
		})
	}
}

// TestGroupCommitCutCatchesPlantedBugs: the scenarios above fail with a
// batch that publishes before its barrier, or does not fsync agents/.
func TestGroupCommitCutCatchesPlantedBugs(t *testing.T) {
	for _, bug := range []fsstore.Bug{fsstore.BugNoBarrier, fsstore.BugNoDirSyncAfterRename} {
		t.Run(bug.String(), func(t *testing.T) {
			problems := cutBatch(t, createBatch, bug)
			if len(problems) == 0 {
				t.Fatalf("bug %s planted, and no crash point of a batch found it", bug)
			}
			t.Logf("caught: %s (and %d more)", problems[0], len(problems)-1)
		})
	}
}

// cutBatch runs the batch once without a crash, then crashes it after
// each of its persist points, tidily and with three untidy crashes, and
// returns what each restart found wrong. bug is planted during the
// batch; with none, it also checks that the batch made one syncfs and
// that a crash point fell between a rename and the fsync of its
// directory.
func cutBatch(t *testing.T, run func(*testing.T, *batchWorld) []batchOp, bug fsstore.Bug) []string {
	shape := bug == fsstore.BugNone
	batch := func(t *testing.T, w *batchWorld) []batchOp {
		defer fsstore.PlantBug(bug)()
		return run(t, w)
	}
	w := newBatchWorld(t)
	start := w.fs.Ops()
	var trace []string
	w.fs.SetHook(func(done int64, op string) { trace = append(trace, op) })
	for _, op := range batch(t, w) {
		if !op.acked {
			t.Fatalf("%s failed without a crash", op.what)
		}
	}
	w.fs.SetHook(nil)
	end := w.fs.Ops()
	if shape && count(trace, "syncfs") != 1 {
		t.Fatalf("the batch made %d syncfs, not one: %q", count(trace, "syncfs"), trace)
	}
	var problems []string
	betweenRenameAndSync := false
	for k := start; k <= end; k++ {
		next := ""
		if k < end {
			next = trace[k-start]
		}
		if k > start && strings.HasPrefix(next, "syncdir") && strings.HasPrefix(trace[k-start-1], "rename") {
			betweenRenameAndSync = true
		}
		for seed := uint64(0); seed < 4; seed++ {
			w := newBatchWorld(t)
			w.fs.CrashAfter(k)
			ops := batch(t, w)
			var r *rand.Rand
			if seed > 0 {
				r = rand.New(rand.NewPCG(seed, uint64(k)))
			}
			w.fs.Crash(r)
			for _, p := range checkBatch(t, w, ops) {
				problems = append(problems, fmt.Sprintf("crash after point %d (before %q), seed %d: %s", k, next, seed, p))
			}
		}
	}
	if shape && !betweenRenameAndSync {
		t.Fatalf("no crash point fell between a rename and its directory fsync: %q", trace)
	}
	return problems
}

// count returns how many ops of trace start with prefix.
func count(trace []string, prefix string) int {
	n := 0
	for _, op := range trace {
		if strings.HasPrefix(op, prefix) {
			n++
		}
	}
	return n
}

// checkBatch restarts the store after a crash and returns what is wrong
// with the operations of the batch.
func checkBatch(t *testing.T, w *batchWorld, ops []batchOp) []string {
	t.Helper()
	s, err := fsstore.Open(Home, fsstore.Options{FS: w.fs})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	res, err := s.Scan(context.Background(), fsstore.ScanOptions{Repair: true, Deep: true})
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	var problems []string
	for _, f := range res.Findings {
		if f.Problem() {
			problems = append(problems, fmt.Sprintf("%+v", f))
		}
	}
	agents := map[string]bool{}
	for _, a := range res.Agents {
		agents[a.ID()] = true
	}
	if !agents[w.r1] || !agents[w.r2] {
		return append(problems, "an agent made before the batch is lost")
	}
	for _, op := range ops {
		found, err := op.found(s, agents)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", op.what, err))
		}
		if op.acked && !found {
			problems = append(problems, op.what+" was acknowledged and is lost")
		}
	}
	// A second scan finds nothing left to repair: no .tmp-* directory,
	// no message in an agent's inbox/tmp.
	res, err = s.Scan(context.Background(), fsstore.ScanOptions{})
	if err != nil {
		t.Fatalf("second scan: %v", err)
	}
	for _, f := range res.Findings {
		problems = append(problems, fmt.Sprintf("left after the repairing scan: %+v", f))
	}
	return problems
}
