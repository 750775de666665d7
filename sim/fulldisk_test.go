package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script"
	"github.com/substrat/substrat/supervisor"
)

// TestFullDisk runs the real store and core on a 2 MiB tmpfs, fills it
// until operations fail, and checks that the errors say the disk is full,
// that nothing is corrupted or lost, and that work resumes once space is
// freed.
func TestFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("TestFullDisk mounts a 2 MiB tmpfs to fill it, which needs root; run it as root to check full-disk behaviour")
	}
	mnt := filepath.Join(t.TempDir(), "disk")
	must(t, os.Mkdir(mnt, 0o700))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	home := filepath.Join(mnt, "home")
	ctx := context.Background()
	clock := NewClock(time.Now()) // failed turns are retried after a delay: let the test say when
	open := func() (*fsstore.Store, *supervisor.Core) {
		st, err := fsstore.Open(home, fsstore.Options{})
		must(t, err)
		c := supervisor.New(supervisor.Config{Store: st, Providers: provider.NewRegistry(script.New()), Clock: clock})
		_, err = c.Recover(ctx, false)
		must(t, err)
		return st, c
	}
	st, core := open()
	root, err := core.CreateAgent(api.CreateParams{Name: "root"})
	must(t, err)

	// Most of the disk goes to a file that is not ours.
	filler := filepath.Join(mnt, "filler")
	must(t, os.WriteFile(filler, make([]byte, 1600<<10), 0o600))

	// Messages, agents and turns until the disk refuses.
	isFull := func(err error) bool {
		return errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "no space left on device")
	}
	var sent []string
	var agents []string
	var full []error
	text := strings.Repeat("x", 3000)
	for i := 0; len(full) < 3 && i < 10000; i++ {
		var err error
		switch i % 3 {
		case 0:
			var m *fsstore.Message
			if m, err = core.Send(api.SendParams{To: "root", Text: fmt.Sprintf("m%d %s", i, text)}); err == nil {
				sent = append(sent, m.ID)
			}
		case 1:
			var a api.AgentInfo
			if a, err = core.CreateAgent(api.CreateParams{Name: fmt.Sprintf("a%d", i)}); err == nil {
				agents = append(agents, a.ID)
			}
		case 2:
			_, err = core.SetBudget("root", fsstore.Budget{Tokens: int64(1000000 + i)}) // one event
		}
		if err == nil {
			continue
		}
		if !isFull(err) {
			t.Fatalf("operation %d failed, but not because the disk is full: %v", i, err)
		}
		var re *api.Error
		if !errors.As(err, &re) || !strings.Contains(re.Hint, "free some space") {
			t.Errorf("the error of a full disk carries no hint about disk space: %#v", err)
		}
		full = append(full, err)
	}
	if len(full) == 0 {
		t.Fatal("the disk never filled up")
	}
	t.Logf("full after %d messages and %d agents; errors: %v", len(sent), len(agents), full)
	// An event append that finds no room fails and leaves the log whole
	// (each append above may still have fitted in the log's last page).
	appendFailed := false
	for i := 0; i < 1000 && !appendFailed; i++ {
		_, err := core.SetBudget("root", fsstore.Budget{Tokens: int64(2000000 + i)})
		if err != nil && !isFull(err) {
			t.Fatalf("budget event %d failed, but not because the disk is full: %v", i, err)
		}
		appendFailed = err != nil
	}
	if !appendFailed {
		t.Error("a thousand event appends fitted on a full disk")
	}
	// A turn on a full disk fails or succeeds, but never corrupts.
	core.RunTurn(ctx, root.ID)

	check := func(when string) {
		t.Helper()
		res, err := st.Scan(ctx, fsstore.ScanOptions{Deep: true})
		if err != nil {
			t.Fatalf("%s: scan: %v", when, err)
		}
		for _, f := range res.Findings {
			if f.Kind != fsstore.FindReplayed {
				t.Errorf("%s: scan found %s at %s: %s", when, f.Kind, f.Path, f.Detail)
			}
		}
		live := map[string]bool{}
		for _, a := range res.Agents {
			live[a.ID()] = true
			a.Close()
		}
		for _, id := range append(agents, root.ID) {
			if !live[id] {
				t.Errorf("%s: acknowledged agent %s is gone", when, id)
			}
		}
		inbox := st.Layout().Agent(root.ID).Inbox()
		for _, id := range sent {
			_, e1 := os.Stat(inbox.Path(fsstore.InboxNew, id))
			_, e2 := os.Stat(inbox.Path(fsstore.InboxCur, id))
			if e1 != nil && e2 != nil {
				t.Errorf("%s: acknowledged message %s is gone", when, id)
			}
		}
	}
	check("on the full disk")

	// Space comes back: work resumes without a restart, and after one.
	must(t, os.Remove(filler))
	clock.Set(clock.Now().Add(time.Minute))
	if _, err := core.Send(api.SendParams{To: "root", Text: "after the disk was freed\n!spawn_agent {\"name\":\"kid\",\"instructions\":\"hi\"}"}); err != nil {
		t.Fatalf("send after freeing space: %v", err)
	}
	for range 5 {
		for _, id := range core.Runnable() {
			if err := core.RunTurn(ctx, id); err != nil {
				t.Fatalf("turn after freeing space: %v", err)
			}
		}
	}
	if _, err := core.Resolve("root/kid"); err != nil {
		t.Errorf("the turn after freeing space did not spawn kid: %v", err)
	}
	info, err := core.Inspect("root")
	must(t, err)
	if info.Agent.AgentState != fsstore.AgentIdle || info.Agent.Counters.Turns == 0 {
		t.Errorf("root after the turns: %+v", info)
	}
	check("after freeing space")
	core.Shutdown(ctx, 0)
	st, core = open()
	check("after a restart")
	if _, err := core.CreateAgent(api.CreateParams{Name: "late"}); err != nil {
		t.Errorf("create after the restart: %v", err)
	}
}
