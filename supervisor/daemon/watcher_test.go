package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor"
	"github.com/substrat/substrat/supervisor/api"

	"github.com/fsnotify/fsnotify"

	"github.com/substrat/substrat/fsstore"
)

// watched starts a core with a running watcher on a fresh home.
func watched(t *testing.T) (*supervisor.Core, *Watcher, string) {
	t.Helper()
	home := t.TempDir()
	st, err := fsstore.Open(home, fsstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := supervisor.New(supervisor.Config{Store: st, Providers: testProviders(), Log: testLog(t)})
	w, err := NewWatcher(c, st.Layout().AgentsDir(), testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Recover(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return c, w, home
}

// eventually waits (generously: the machine may be slow) until cond holds.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// settled reports whether the daemon has written out the adopted state
// (a person edits again only after that): session.json on disk is the
// state in memory.
func settled(t *testing.T, c *supervisor.Core, home, ref string) bool {
	mem := sessionOf(c, ref)
	if mem == nil {
		return false
	}
	disk, err := fsstore.DecodeSession(must(os.ReadFile(agentFiles(t, c, home, ref).Session())))
	return err == nil && disk.LastSeq == mem.LastSeq
}

// edited returns session.json of agent ref with f applied, as a user with
// jq would make it.
func edited(t *testing.T, c *supervisor.Core, home, ref string, f func(m map[string]any)) (path string, data []byte) {
	t.Helper()
	path = agentFiles(t, c, home, ref).Session()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	data, _ = json.MarshalIndent(m, "", "  ")
	return path, data
}

func hasEvent(t *testing.T, c *supervisor.Core, ref, typ string) bool {
	found := false
	c.Events(api.EventsParams{Ref: ref}, func(e fsstore.Event) error {
		found = found || e.Type == typ
		return nil
	})
	return found
}

func TestHandEditPatterns(t *testing.T) {
	c, _, home := watched(t)
	mustCreate(t, c, api.CreateParams{Name: "a", Instructions: "old"})
	send(t, c, "a", "warm up")
	drain(t, c)

	// jq '...' session.json > tmp && mv tmp session.json
	path, data := edited(t, c, home, "a", func(m map[string]any) { m["instructions"] = "by rename" })
	tmp := filepath.Join(filepath.Dir(path), "tmp.json")
	os.WriteFile(tmp, data, 0o600)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the renamed edit", func() bool { return sessionOf(c, "a").Instructions == "by rename" && settled(t, c, home, "a") })
	if !hasEvent(t, c, "a", fsstore.EvEdited) {
		t.Fatal("no edited event")
	}

	// An editor that writes in place (truncate, write).
	path, data = edited(t, c, home, "a", func(m map[string]any) { m["model"] = "in-place" })
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(data[:10])
	f.Sync()
	f.Write(data[10:])
	f.Close()
	eventually(t, "the in-place edit", func() bool { return sessionOf(c, "a").Model == "in-place" && settled(t, c, home, "a") })

	// vim's default: rename the original to a backup, write anew, remove the backup.
	path, data = edited(t, c, home, "a", func(m map[string]any) { m["metadata"] = map[string]any{"owner": "vim"} })
	os.Rename(path, path+"~")
	os.WriteFile(path, data, 0o600)
	os.Remove(path + "~")
	eventually(t, "the vim-style edit", func() bool { return sessionOf(c, "a").Metadata["owner"] == "vim" && settled(t, c, home, "a") })

	// A rename of the agent itself.
	path, data = edited(t, c, home, "a", func(m map[string]any) { m["name"] = "renamed" })
	os.WriteFile(path+".new", data, 0o600)
	os.Rename(path+".new", path)
	eventually(t, "the new name", func() bool {
		if sessionOf(c, "renamed") != nil {
			return true
		}
		if why := invalidOf(t, c, "a"); why != "" {
			t.Logf("disk invalid: %s", why)
		}
		return false
	})

	// The daemon's own snapshots are not mistaken for edits, and the
	// merged state is what is on disk now.
	send(t, c, "renamed", "after the edits")
	drain(t, c)
	disk, err := fsstore.DecodeSession(must(os.ReadFile(path)))
	if err != nil || disk.Name != "renamed" || disk.Model != "in-place" || disk.Counters.Turns != 2 {
		t.Fatalf("session.json after edits and a turn: %+v, %v", disk, err)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestInvalidHandEditRefused(t *testing.T) {
	c, _, home := watched(t)
	mustCreate(t, c, api.CreateParams{Name: "a", Instructions: "good"})
	path := agentFiles(t, c, home, "a").Session()
	garbage := []byte(`{"version": 1, "name": "a", oops`)
	if err := os.WriteFile(path, garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the refusal", func() bool { return invalidOf(t, c, "a") != "" })
	info, _ := c.Inspect("a")
	if !strings.Contains(info.Agent.DiskInvalid, "invalid JSON") {
		t.Errorf("inspect says %q", info.Agent.DiskInvalid)
	}
	// The event follows the refusal (it is appended just after).
	eventually(t, "the edit_refused event", func() bool { return hasEvent(t, c, "a", fsstore.EvEditRefused) })
	// The daemon carries on with the last good state and does not
	// overwrite the user's file.
	send(t, c, "a", "still working")
	drain(t, c)
	if s := sessionOf(c, "a"); s.Instructions != "good" || s.Counters.Turns != 1 {
		t.Fatalf("state after the refused edit: %+v", s)
	}
	if got := must(os.ReadFile(path)); string(got) != string(garbage) {
		t.Fatalf("the daemon overwrote the user's file: %s", got)
	}
	// An identity change is refused too.
	good, _ := fsstore.EncodeSession(sessionOf(c, "a"))
	var m map[string]any
	json.Unmarshal(good, &m)
	m["provider"] = "claude"
	bad, _ := json.MarshalIndent(m, "", "  ")
	os.WriteFile(path, bad, 0o600)
	eventually(t, "the provider refusal", func() bool { return strings.Contains(invalidOf(t, c, "a"), "provider cannot be changed") })
	// Fixing the file: adopted, and the daemon writes it again.
	m["provider"] = "script"
	m["instructions"] = "fixed"
	fixed, _ := json.MarshalIndent(m, "", "  ")
	os.WriteFile(path, fixed, 0o600)
	eventually(t, "the fix", func() bool { return sessionOf(c, "a").Instructions == "fixed" && invalidOf(t, c, "a") == "" })
	send(t, c, "a", "again")
	drain(t, c)
	disk, err := fsstore.DecodeSession(must(os.ReadFile(path)))
	if err != nil || disk.Counters.Turns != 2 || disk.Instructions != "fixed" {
		t.Fatalf("session.json after the fix: %+v %v", disk, err)
	}
}

func TestMoveOutAndBack(t *testing.T) {
	c, _, home := watched(t)
	mustCreate(t, c, api.CreateParams{Name: "p"})
	send(t, c, "p", `!spawn_agent {"name":"kid","instructions":"hi"}`)
	drain(t, c)
	if res, _ := c.Inspect("p"); !res.Agent.Live {
		t.Fatal("p has no live session to stop")
	}
	live := c.Status().LiveSessions
	dir := agentFiles(t, c, home, "p").Dir
	away := filepath.Join(t.TempDir(), "away")
	if err := os.Rename(dir, away); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the detach", func() bool { return sessionOf(c, "p") == nil })
	if now := c.Status().LiveSessions; now != live-1 {
		t.Errorf("live sessions %d after the detach, want %d: the detached agent's provider session was not stopped", now, live-1)
	}
	// The child stays live, cut off from its parent.
	_, outcome, cancel, err := c.SendAndAwait(api.SendParams{To: "kid", Text: `!send_message {"recipient":"p","text":"hi"}`})
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	drain(t, c)
	if o := <-outcome; !strings.Contains(o.Text, "send_message -> error") {
		t.Errorf("message to a detached parent: %+v", o)
	}
	if err := os.Rename(away, dir); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the adoption", func() bool { return sessionOf(c, "p") != nil })
	back := sessionOf(c, "p")
	if back.Counters.Turns != 1 || back.SessionState != fsstore.SessionSuspended {
		t.Fatalf("adopted p: %+v", back)
	}
	if info, _ := c.Inspect("p"); len(info.Agent.Children) != 1 || info.Agent.Children[0] != "kid" {
		t.Fatalf("p's children after adoption: %v", info.Agent.Children)
	}
	send(t, c, "p", "welcome back")
	drain(t, c)
	if n := sessionOf(c, "p").Counters.Turns; n != 2 {
		t.Fatalf("p after its return: %d turns", n)
	}
}

// Thousands of events while the loop is held overflow the kernel queue;
// the watcher then rescans, and a hand edit made meanwhile is adopted.
func TestWatchOverflowRescans(t *testing.T) {
	if os.Getuid() != 0 {
		t.Log("not root: cannot shrink fs.inotify.max_queued_events; using 40000 events instead")
	}
	restore := shrinkInotifyQueue(t, 64)
	c, w, home := watched(t)
	restore()
	mustCreate(t, c, api.CreateParams{Name: "a"})
	dir := agentFiles(t, c, home, "a").Dir
	eventually(t, "the watch on a's directory", func() bool { w.mu.Lock(); defer w.mu.Unlock(); return w.watched[dir] })
	w.mu.Lock()
	gate, parked := make(chan struct{}), make(chan struct{})
	w.pause, w.parked = gate, parked
	w.mu.Unlock()
	w.mark("")
	<-parked // the loop holds; the kernel queue fills
	n := 2000
	if os.Getuid() != 0 {
		n = 40000
	}
	for i := range n {
		f := filepath.Join(dir, fmt.Sprintf("junk-%d", i))
		os.WriteFile(f, nil, 0o600)
		os.Remove(f)
	}
	path, data := edited(t, c, home, "a", func(m map[string]any) { m["instructions"] = "during the storm" })
	os.WriteFile(path, data, 0o600)
	w.mu.Lock()
	w.pause, w.parked = nil, nil
	w.mu.Unlock()
	close(gate)
	eventually(t, "the overflow", func() bool { w.mu.Lock(); defer w.mu.Unlock(); return w.overflows > 0 })
	eventually(t, "the edit after the overflow", func() bool { return sessionOf(c, "a").Instructions == "during the storm" })
}

// shrinkInotifyQueue lowers the kernel's per-instance event queue for
// instances created before restore is called (root only).
func shrinkInotifyQueue(t *testing.T, size int) (restore func()) {
	const p = "/proc/sys/fs/inotify/max_queued_events"
	old, err := os.ReadFile(p)
	if err != nil || os.Getuid() != 0 {
		return func() {}
	}
	if err := os.WriteFile(p, []byte(fmt.Sprint(size)), 0o644); err != nil {
		return func() {}
	}
	return func() { os.WriteFile(p, old, 0o644) }
}

// At the watch limit the watcher polls, and still adopts what arrives.
func TestWatchLimitFallsBackToPolling(t *testing.T) {
	oldAdd, oldPoll := addWatch, pollEvery
	addWatch = func(w *fsnotify.Watcher, path string) error { return syscall.ENOSPC }
	pollEvery = 50 * time.Millisecond
	t.Cleanup(func() { addWatch, pollEvery = oldAdd, oldPoll })
	c, w, home := watched(t)
	if !w.Polling() {
		t.Fatal("not polling after ENOSPC")
	}
	mustCreate(t, c, api.CreateParams{Name: "a"})
	path, data := edited(t, c, home, "a", func(m map[string]any) { m["instructions"] = "seen by polling" })
	os.WriteFile(path, data, 0o600)
	eventually(t, "the polled edit", func() bool { return sessionOf(c, "a").Instructions == "seen by polling" })
}

func invalidOf(t *testing.T, c *supervisor.Core, ref string) string {
	res, err := c.Inspect(ref)
	if err != nil {
		t.Fatal(err)
	}
	return res.Agent.DiskInvalid
}

// An events.jsonl replaced by hand while the daemon runs (a copy moved
// over it) is noticed: the agent is read again, and later events go to the
// file on disk. They used to go to the replaced file, unlinked, and were
// gone at the next start.
func TestReplacedLogIsReloaded(t *testing.T) {
	c, _, home := watched(t)
	mustCreate(t, c, api.CreateParams{Name: "a"})
	send(t, c, "a", "first")
	drain(t, c)
	path := agentFiles(t, c, home, "a").Events()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := c.Resolve("a")
	sub := c.Subscribe(id)
	defer sub.Close()
	tmp := path + ".copy"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	reloaded := false
	eventually(t, "the reload", func() bool {
		for len(sub.C) > 0 {
			reloaded = reloaded || (<-sub.C).Type == "reloaded"
		}
		return reloaded
	})
	time.Sleep(100 * time.Millisecond)
	send(t, c, "a", "second")
	drain(t, c)
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) <= len(data) {
		t.Fatalf("events.jsonl did not grow after the replace: %d -> %d bytes", len(data), len(after))
	}
	c2, _ := newCore(t, home)
	if got := sessionOf(c2, "a").Counters.Turns; got != 2 {
		t.Fatalf("turns on disk %d, want 2", got)
	}
}
