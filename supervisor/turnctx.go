package supervisor

import (
	"context"
	"sync"
	"time"
)

// turnCtx is the context of a turn: cancelled with its parent, or with
// context.DeadlineExceeded when the turn timeout runs out. The time the
// turn spends waiting for an approval does not count: pause stops the
// clock and resume starts it again with what was left, so that a person
// who takes 20 minutes to answer does not fail a turn bounded to 10
// (the request's own deadline, the approval timeout, governs the wait).
//
// It has no Deadline, since the deadline moves.
type turnCtx struct {
	parent context.Context
	done   chan struct{}
	stop   func() bool // stops the watch of parent

	mu       sync.Mutex // guards the fields below
	err      error
	timer    *time.Timer
	deadline time.Time     // while the clock runs
	left     time.Duration // while it is paused
	paused   int
}

type turnCtxKey struct{}

// newTurnCtx returns a turn context bounded to timeout of running time.
func newTurnCtx(parent context.Context, timeout time.Duration) (*turnCtx, context.CancelFunc) {
	t := &turnCtx{parent: parent, done: make(chan struct{})}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.deadline = time.Now().Add(timeout)
	t.timer = time.AfterFunc(timeout, func() { t.cancel(context.DeadlineExceeded) })
	t.stop = context.AfterFunc(parent, func() { t.cancel(parent.Err()) })
	return t, func() { t.cancel(context.Canceled) }
}

// turnCtxOf returns the turn context ctx is or derives from, or nil.
func turnCtxOf(ctx context.Context) *turnCtx {
	t, _ := ctx.Value(turnCtxKey{}).(*turnCtx)
	return t
}

func (t *turnCtx) cancel(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return
	}
	t.err = err
	t.timer.Stop()
	close(t.done)
	if t.stop != nil {
		t.stop()
	}
}

// pause stops the turn's clock; calls nest, and the clock runs again
// after as many resumes.
func (t *turnCtx) pause() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.paused++
	if t.paused == 1 && t.err == nil && t.timer.Stop() {
		t.left = max(0, time.Until(t.deadline))
	}
}

// resume starts the clock again with the time that was left.
func (t *turnCtx) resume() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.paused--
	if t.paused == 0 && t.err == nil {
		t.deadline = time.Now().Add(t.left)
		t.timer = time.AfterFunc(t.left, func() { t.cancel(context.DeadlineExceeded) })
	}
}

// Deadline implements context.Context: none, since it moves.
func (t *turnCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done implements context.Context.
func (t *turnCtx) Done() <-chan struct{} { return t.done }

// Err implements context.Context.
func (t *turnCtx) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Value implements context.Context.
func (t *turnCtx) Value(key any) any {
	if key == (turnCtxKey{}) {
		return t
	}
	return t.parent.Value(key)
}
