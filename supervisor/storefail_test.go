package supervisor

import (
	"context"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script"
)

// roFS is the real file system that turns read-only (EROFS on every
// write, as ext4 with errors=remount-ro does) while ro is set.
type roFS struct {
	fsstore.OS
	ro *atomic.Bool
}

type roFile struct {
	fsstore.File
	ro *atomic.Bool
}

func (f roFile) Write(p []byte) (int, error) {
	if f.ro.Load() {
		return 0, syscall.EROFS
	}
	return f.File.Write(p)
}

func (f roFile) Sync() error {
	if f.ro.Load() {
		return syscall.EROFS
	}
	return f.File.Sync()
}

func (r roFS) OpenAppend(name string) (fsstore.File, error) {
	f, err := r.OS.OpenAppend(name)
	if err != nil {
		return nil, err
	}
	return roFile{f, r.ro}, nil
}

// A store error in the middle of a turn goes the way of a failed turn: the
// client waiting on the message is told at once, the agent does not stay
// BUSY, and once the disk is back the turn is retried and takes the
// message. It used to leave the agent BUSY with the message unprocessed,
// and agent send waiting, until another message or a restart.
func TestStoreErrorInATurn(t *testing.T) {
	var ro atomic.Bool
	st, err := fsstore.Open(t.TempDir(), fsstore.Options{FS: roFS{ro: &ro}})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Now()}
	c := New(Config{Store: st, Providers: provider.NewRegistry(script.New()), Clock: clock, Log: testLog(t)})
	if _, err := c.Recover(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, c, api.CreateParams{Name: "a"})
	// The disk turns read-only while the turn runs (the script sleeps).
	m, outcome, cancel, err := c.SendAndAwait(api.SendParams{To: "a", Text: "!sleep 300ms\nhello"})
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	go func() { time.Sleep(100 * time.Millisecond); ro.Store(true) }()
	n := nodeOf(t, c, "a")
	if err := c.RunTurn(context.Background(), n.id()); err == nil {
		t.Fatal("the turn reported no error")
	}
	select {
	case o := <-outcome:
		if !strings.Contains(o.Failed, "store error") {
			t.Fatalf("outcome %+v, want the store error", o)
		}
	default:
		t.Fatal("the waiting client was not told")
	}
	if got := c.Runnable(); len(got) != 0 {
		t.Fatalf("runnable at once: %v (want a backoff)", got)
	}

	// The disk comes back; after the backoff the turn is retried.
	ro.Store(false)
	clock.Add(2 * time.Second)
	if got := c.Runnable(); len(got) != 1 {
		t.Fatalf("runnable after the backoff: %v", got)
	}
	m2, outcome2, cancel2, err := c.SendAndAwait(api.SendParams{To: "a", Text: "again"})
	if err != nil {
		t.Fatal(err)
	}
	defer cancel2()
	if err := c.RunTurn(context.Background(), n.id()); err != nil {
		t.Fatal(err)
	}
	if o := <-outcome2; o.Failed != "" || !strings.Contains(o.Text, "hello") || !strings.Contains(o.Text, "again") {
		t.Fatalf("the retry: %+v", o)
	}
	s := nodeOf(t, c, "a").s()
	if s.AgentState != fsstore.AgentIdle {
		t.Fatalf("state %s after the retry", s.AgentState)
	}
	if msgs, _, _ := nodeOf(t, c, "a").agent.Pending(); len(msgs) != 0 {
		t.Fatalf("still pending: %d (%s, %s)", len(msgs), m.ID, m2.ID)
	}
	// What the disk holds agrees with memory.
	c2, _ := newCore(t, st.Layout().Home, false)
	if d := nodeOf(t, c2, "a").s(); d.AgentState != fsstore.AgentIdle || d.Counters.Turns != s.Counters.Turns {
		t.Fatalf("on disk: %s, %d turns; in memory %d", d.AgentState, d.Counters.Turns, s.Counters.Turns)
	}
}
