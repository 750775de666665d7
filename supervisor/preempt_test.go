package supervisor

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor/api"
)

// TestNoTurnAheadOfAClaim: while a session operation waits to hold an
// agent (acquire, preempt), no turn starts on it, even when it is free
// and has mail: that is the moment after a cancelled turn's end, when
// the scheduler would start the next turn (for the messages the
// cancelled one left) ahead of the terminate that cancelled it, which
// then waited for that turn to end by itself (a model that ran for 300 s
// made `agent terminate` take 300 s).
func TestNoTurnAheadOfAClaim(t *testing.T) {
	home := t.TempDir()
	c, _ := newCore(t, home, false)
	a := mustCreate(t, c, api.CreateParams{Name: "a"})
	if _, err := c.Send(api.SendParams{To: "a", Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	n := nodeOf(t, c, "a")
	if !slices.Contains(c.Runnable(), a.ID) {
		t.Fatal("a is not runnable with mail")
	}
	events := func() int64 {
		fi, err := os.Stat(c.store.Layout().Agent(a.ID).Events())
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	// As between a cancelled turn's release and the claim of the
	// operation that waits for it.
	c.mu.Lock()
	n.claimers++
	c.mu.Unlock()
	if slices.Contains(c.Runnable(), a.ID) {
		t.Error("a is runnable while an operation waits to hold it")
	}
	before := events()
	if err := c.RunTurn(context.Background(), a.ID); err != nil {
		t.Fatal(err)
	}
	if events() != before {
		t.Error("a turn ran ahead of the operation waiting to hold the agent")
	}
	c.unclaim(n)
	if !slices.Contains(c.Runnable(), a.ID) {
		t.Error("a is not runnable again once nothing waits to hold it")
	}
}

// TestTerminateCancelsOnce: Terminate of an agent whose turn runs
// cancels it and ends the agent once the turn ends, with the scheduler
// trying to start turns all the while: no deadlock between the claim
// and the turns it holds off.
func TestTerminateCancelsOnce(t *testing.T) {
	c, _ := newCore(t, t.TempDir(), false)
	a := mustCreate(t, c, api.CreateParams{Name: "a"})
	if _, err := c.Send(api.SendParams{To: "a", Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	n := nodeOf(t, c, "a")
	// A turn holds a.
	canceled := make(chan struct{})
	c.mu.Lock()
	if !c.claimLocked(n) {
		t.Fatal("a is busy")
	}
	n.cancel = func() { close(canceled) }
	c.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := c.Terminate(context.Background(), api.TerminateParams{Ref: "a"})
		done <- err
	}()
	<-canceled
	// The scheduler, racing the turn's end.
	turns := make(chan error, 1)
	go func() {
		for range 1000 {
			if err := c.RunTurn(context.Background(), a.ID); err != nil {
				turns <- err
				return
			}
		}
		turns <- nil
	}()
	c.mu.Lock()
	n.cancel = nil
	c.mu.Unlock()
	c.release(n)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Terminate still waits")
	}
	if err := <-turns; err != nil {
		t.Fatal(err)
	}
	if s := n.s(); s.AgentState != "TERMINATED" {
		t.Fatalf("a is %s", s.AgentState)
	}
}
