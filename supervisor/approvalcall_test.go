package supervisor

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
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

// deadFS is the real file system until dead is set, and then refuses
// every write, as after a power cut: nothing a crashed core still does
// reaches the disk.
type deadFS struct {
	fsstore.OS
	dead *atomic.Bool
}

type deadFile struct {
	fsstore.File
	dead *atomic.Bool
}

func (f deadFile) Write(p []byte) (int, error) {
	if f.dead.Load() {
		return 0, syscall.EIO
	}
	return f.File.Write(p)
}

func (f deadFile) Sync() error {
	if f.dead.Load() {
		return syscall.EIO
	}
	return f.File.Sync()
}

func (d deadFS) check() error {
	if d.dead.Load() {
		return syscall.EIO
	}
	return nil
}

func (d deadFS) Create(name string, perm fs.FileMode) (fsstore.File, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	f, err := d.OS.Create(name, perm)
	if err != nil {
		return nil, err
	}
	return deadFile{f, d.dead}, nil
}

func (d deadFS) OpenAppend(name string) (fsstore.File, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	f, err := d.OS.OpenAppend(name)
	if err != nil {
		return nil, err
	}
	return deadFile{f, d.dead}, nil
}

func (d deadFS) WriteFileAtomic(name string, data []byte, perm fs.FileMode) error {
	if err := d.check(); err != nil {
		return err
	}
	return d.OS.WriteFileAtomic(name, data, perm)
}

func (d deadFS) Mkdir(name string, perm fs.FileMode) error {
	if err := d.check(); err != nil {
		return err
	}
	return d.OS.Mkdir(name, perm)
}

func (d deadFS) Rename(a, b string) error {
	if err := d.check(); err != nil {
		return err
	}
	return d.OS.Rename(a, b)
}

func (d deadFS) Exchange(a, b string) error {
	if err := d.check(); err != nil {
		return err
	}
	return d.OS.Exchange(a, b)
}

func (d deadFS) RenameNoReplace(a, b string) error {
	if err := d.check(); err != nil {
		return err
	}
	return d.OS.RenameNoReplace(a, b)
}

func (d deadFS) Link(a, b string) error {
	if err := d.check(); err != nil {
		return err
	}
	return d.OS.Link(a, b)
}

func (d deadFS) Remove(name string) error {
	if err := d.check(); err != nil {
		return err
	}
	return d.OS.Remove(name)
}

func (d deadFS) RemoveAll(name string) error {
	if err := d.check(); err != nil {
		return err
	}
	return d.OS.RemoveAll(name)
}

func (d deadFS) SyncDir(name string) error {
	if err := d.check(); err != nil {
		return err
	}
	return d.OS.SyncDir(name)
}

// crashable is a core on home whose disk can die under it.
type crashable struct {
	*Core
	dead  atomic.Bool
	turns chan error
}

func newCrashable(t *testing.T, home string) *crashable {
	t.Helper()
	k := &crashable{turns: make(chan error, 8)}
	st, err := fsstore.Open(home, fsstore.Options{FS: deadFS{dead: &k.dead}})
	if err != nil {
		t.Fatal(err)
	}
	k.Core = New(Config{Store: st, Providers: provider.NewRegistry(script.New()), Log: testLog(t)})
	if _, err := k.Recover(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.crash)
	return k
}

// runTurn runs a turn of id in the background.
func (k *crashable) runTurn(ctx context.Context, id string) {
	go func() { k.turns <- k.RunTurn(ctx, id) }()
}

// crash kills the disk: nothing the core does after that is on disk.
func (k *crashable) crash() { k.dead.Store(true) }

// waitersOf counts the turns that wait for request id.
func waitersOf(c *Core, id string) int {
	c.approvals.mu.Lock()
	defer c.approvals.mu.Unlock()
	return len(c.approvals.waiters[id])
}

func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// requestsIn counts the approval_requested events in the agent's log.
func requestsIn(t *testing.T, c *Core, ref string) int {
	t.Helper()
	n := nodeOf(t, c, ref)
	count := 0
	if err := fsstore.ReadEventsOfType(c.store.FS(), n.agent.Files().Events(), fsstore.EvApprovalRequested, func(fsstore.Event) error {
		count++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return count
}

func stateOf(t *testing.T, c *Core, name string) fsstore.AgentState {
	t.Helper()
	for _, a := range c.List() {
		if a.Name == name {
			return a.AgentState
		}
	}
	t.Fatalf("no agent %s", name)
	return ""
}

func transcriptOf(t *testing.T, c *Core, ref string) string {
	t.Helper()
	b, _ := os.ReadFile(nodeOf(t, c, ref).agent.Files().Transcript())
	return string(b)
}

const askMake = `!request_approval {"tool_name":"Bash","input":{"command":"make install","description":"install"},"tool_use_id":"toolu_make"}`

// TestApprovalOncePerCallAcrossCrash: a turn asks for approval and the
// daemon dies (its disk cut off) while the request waits. After the
// restart the turn runs again and asks again for the same call: it gets
// the same request, not a second one, whether the answer came before the
// crash, between the restart and the new turn, or while the new turn
// waits; and the answer releases it. The agent is WAITING while it waits.
func TestApprovalOncePerCallAcrossCrash(t *testing.T) {
	for _, when := range []string{"before the crash", "after the restart, before the turn asks again", "while the new turn waits"} {
		t.Run(when, func(t *testing.T) {
			home := t.TempDir()
			k := newCrashable(t, home)
			mustCreate(t, k.Core, api.CreateParams{Name: "solo", Permissions: &fsstore.Permissions{Mode: fsstore.ModeDefault, ApprovalTimeout: "1m"}})
			// The sleep keeps the turn going after an answer: the crash
			// comes before it ends.
			send(t, k.Core, "solo", askMake+"\n!sleep 3s\n!send_message {\"recipient\":\"USER\",\"text\":\"finished\"}")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			k.runTurn(ctx, nodeOf(t, k.Core, "solo").id())
			req := waitPending(t, k.Core, 1)[0]
			until(t, "WAITING", func() bool { return stateOf(t, k.Core, "solo") == fsstore.AgentWaiting })
			if when == "before the crash" {
				if _, err := k.Answer(ctx, api.AnswerParams{ID: req.ID, Allow: true, By: fsstore.User}); err != nil {
					t.Fatal(err)
				}
				until(t, "BUSY again", func() bool { return stateOf(t, k.Core, "solo") == fsstore.AgentBusy })
			}
			k.crash()
			cancel()
			<-k.turns

			c, _ := newCore(t, home, true)
			switch p := c.PendingApprovals(); {
			case when == "before the crash" && len(p) != 0:
				t.Fatalf("after the restart, pending: %+v", p)
			case when != "before the crash" && (len(p) != 1 || p[0].ID != req.ID):
				t.Fatalf("after the restart, pending: %+v, want %s", p, req.ID)
			}
			if when == "after the restart, before the turn asks again" {
				if _, err := c.Answer(context.Background(), api.AnswerParams{ID: req.ID, Allow: true, By: fsstore.User}); err != nil {
					t.Fatal(err)
				}
			}
			// The turn runs again.
			send(t, c, "solo", "and go on")
			n := nodeOf(t, c, "solo")
			done := make(chan error, 1)
			go func() { done <- c.RunTurn(context.Background(), n.id()) }()
			if when == "while the new turn waits" {
				until(t, "the new turn to wait for the same request", func() bool { return waitersOf(c, req.ID) == 1 })
				if p := c.PendingApprovals(); len(p) != 1 || p[0].ID != req.ID {
					t.Fatalf("the turn run again made another request: %+v", p)
				}
				until(t, "WAITING", func() bool { return stateOf(t, c, "solo") == fsstore.AgentWaiting })
				if _, err := c.Answer(context.Background(), api.AnswerParams{ID: req.ID, Allow: true, By: fsstore.User}); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(90 * time.Second):
				t.Fatal("the turn run again was not released")
			}
			if tr := transcriptOf(t, c, "solo"); !strings.Contains(tr, `request_approval -> {"behavior":"allow"`) {
				t.Errorf("the turn run again did not get the answer:\n%s", tr)
			}
			if got := requestsIn(t, c, "solo"); got != 1 {
				t.Errorf("%d approval requests in the log, want 1", got)
			}
			if ap := n.s().Approvals; len(ap) != 1 || ap[0].ID != req.ID || ap[0].Answer != fsstore.ApprovalAllow {
				t.Errorf("the agent's requests: %+v", ap)
			}
			if s := stateOf(t, c, "solo"); s != fsstore.AgentIdle {
				t.Errorf("after the turn, the agent is %s", s)
			}
			inbox, err := c.UserInbox(true)
			if err != nil {
				t.Fatal(err)
			}
			asks := 0
			for _, m := range inbox {
				if m.Kind == fsstore.KindApproval {
					asks++
				}
			}
			if asks != 1 {
				t.Errorf("USER was asked %d times, want once: %+v", asks, inbox)
			}
		})
	}
}

// TestApprovalSuspendsTurnTimeout: a turn timeout shorter than the time
// an approval takes does not fail the turn; the approval timeout bounds
// the wait, and the turn's clock runs again after it.
func TestApprovalSuspendsTurnTimeout(t *testing.T) {
	c, _ := newCore(t, t.TempDir(), false)
	set := c.Settings()
	set.TurnTimeout = 300 * time.Millisecond
	if err := c.SetSettings(set); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, c, api.CreateParams{Name: "solo", Permissions: &fsstore.Permissions{Mode: fsstore.ModeDefault, ApprovalTimeout: "1m"}})
	send(t, c, "solo", askMake)
	done := make(chan error, 1)
	go func() { done <- c.RunTurn(context.Background(), nodeOf(t, c, "solo").id()) }()
	req := waitPending(t, c, 1)[0]
	until(t, "WAITING", func() bool { return stateOf(t, c, "solo") == fsstore.AgentWaiting })
	time.Sleep(time.Second) // three turn timeouts
	if _, err := c.Answer(context.Background(), api.AnswerParams{ID: req.ID, Allow: true, By: fsstore.User}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	n := nodeOf(t, c, "solo")
	if tr := transcriptOf(t, c, "solo"); !strings.Contains(tr, `request_approval -> {"behavior":"allow"`) {
		t.Errorf("the turn did not get the answer:\n%s", tr)
	}
	if s := n.s(); s.Counters.Turns != 1 || s.AgentState != fsstore.AgentIdle {
		t.Errorf("after the approval: %d turns, %s", s.Counters.Turns, s.AgentState)
	}

	// The clock still runs outside the wait: a turn longer than the
	// timeout fails.
	send(t, c, "solo", "!sleep 2s")
	if err := c.RunTurn(context.Background(), n.id()); err != nil {
		t.Fatal(err)
	}
	if s := n.s(); s.Counters.Turns != 1 {
		t.Errorf("a turn longer than the timeout succeeded: %d turns", s.Counters.Turns)
	}
}

func TestCallKey(t *testing.T) {
	a := callKey("Bash", json.RawMessage(`{"command":"make","description":"x"}`))
	if b := callKey("Bash", json.RawMessage(`{ "description": "x", "command": "make" }`)); a != b {
		t.Error("the same input spelled otherwise is another call")
	}
	for _, other := range []string{callKey("Bash", json.RawMessage(`{"command":"make "}`)), callKey("Shell", json.RawMessage(`{"command":"make","description":"x"}`))} {
		if other == a {
			t.Error("another call has the same key")
		}
	}
}

// TestApprovalMessageAfterCrash: a crash between a request and its
// message to the approver: the turn run again asks for the same call,
// finds the request, and delivers the message it lacks, once.
func TestApprovalMessageAfterCrash(t *testing.T) {
	c, _ := newCore(t, t.TempDir(), false)
	mustCreate(t, c, api.CreateParams{Name: "solo", Permissions: &fsstore.Permissions{Mode: fsstore.ModeDefault, ApprovalTimeout: "1m"}})
	send(t, c, "solo", askMake)
	n := nodeOf(t, c, "solo")
	msgs, _, err := n.agent.Pending()
	if err != nil || len(msgs) != 1 {
		t.Fatalf("pending: %v %v", msgs, err)
	}
	// What the crashed daemon left: the request, and no message.
	input := json.RawMessage(`{"command":"make install","description":"install"}`)
	now := time.Now().UTC()
	req := fsstore.Approval{ID: "01a212d9-1627-7c10-aea7-35d4b05c64d6", Tool: "Bash", Input: input, CallKey: callKey("Bash", input),
		Batch: msgs[0].ID, Approver: fsstore.User, RequestedAt: now, Deadline: now.Add(time.Minute)}
	if err := c.commit(n, req); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.RunTurn(context.Background(), n.id()) }()
	until(t, "the turn to wait for the request", func() bool { return waitersOf(c, req.ID) == 1 })
	until(t, "WAITING", func() bool { return stateOf(t, c, "solo") == fsstore.AgentWaiting }) // after the message
	inbox, err := c.UserInbox(true)
	if err != nil || len(inbox) != 1 || inbox[0].ID != req.ID || inbox[0].Kind != fsstore.KindApproval {
		t.Fatalf("USER's inbox: %v %+v", err, inbox)
	}
	if _, err := c.Answer(context.Background(), api.AnswerParams{ID: req.ID, Allow: true, By: fsstore.User}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := requestsIn(t, c, "solo"); got != 1 {
		t.Errorf("%d approval requests in the log, want 1", got)
	}
}
