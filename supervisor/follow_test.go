package supervisor

import (
	"context"
	"testing"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
)

// TestFollowEventsThroughAGap: a follower that falls far behind (its
// subscription drops events) still gets every event of the log once, in
// seq order, read back from the log.
func TestFollowEventsThroughAGap(t *testing.T) {
	c, _ := newCore(t, t.TempDir(), false)
	a := mustCreate(t, c, api.CreateParams{Name: "a", WorkDir: t.TempDir()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gate := make(chan struct{})
	got := make(chan uint64, 4096)
	done := make(chan error, 1)
	go func() {
		first := true
		_, err := c.FollowEvents(ctx, api.EventsParams{Ref: a.ID}, func(e fsstore.Event) error {
			if first {
				<-gate // hold the follower while far more is committed than its subscription holds
				first = false
			}
			got <- e.Seq
			return nil
		})
		done <- err
	}()
	const n = 600
	for i := range n {
		if _, err := c.SetBudget(a.ID, fsstore.Budget{Tokens: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	last := c.nodes[a.ID].s().LastSeq
	close(gate)
	for want := uint64(1); want <= last; want++ {
		if seq := <-got; seq != want {
			t.Fatalf("event %d came where %d was due", seq, want)
		}
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("FollowEvents returned %v, want context.Canceled", err)
	}
	if len(got) != 0 {
		t.Errorf("%d events more than the log holds", len(got))
	}
}
