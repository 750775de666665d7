package daemon

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script"
	"github.com/substrat/substrat/supervisor/rpc"
)

// ackLog records what the daemon acknowledged, in order.
type ackLog struct {
	mu     sync.Mutex
	agents []string
	msgs   map[string]string // message id -> recipient agent id
}

func (l *ackLog) snapshot() (agents []string, msgs map[string]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	msgs = make(map[string]string, len(l.msgs))
	for k, v := range l.msgs {
		msgs[k] = v
	}
	return append([]string(nil), l.agents...), msgs
}

// A backup taken with a plain `rsync -a HOME/ BACKUP/` while the daemon is
// busy gives a home that fsck --repair accepts and a daemon starts on, with
// every agent and message acknowledged before the rsync began.
func TestRsyncWhileBusy(t *testing.T) {
	rsync, err := exec.LookPath("rsync")
	if err != nil {
		t.Fatal("rsync is not installed (make test installs it: apt-get install rsync)")
	}
	home, sock := startDaemon(t)
	acks := &ackLog{msgs: map[string]string{}}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	const workers = 4
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := rpc.Dial(ctx, sock)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			var me api.AgentInfo
			if err := callInto(ctx, c, api.AgentCreate, api.CreateParams{Name: fmt.Sprintf("w%d", i)}, &me); err != nil {
				t.Error(err)
				return
			}
			acks.mu.Lock()
			acks.agents = append(acks.agents, me.ID)
			acks.mu.Unlock()
			for j := 0; ctx.Err() == nil; j++ {
				text := fmt.Sprintf("note %d", j)
				switch j % 3 {
				case 1: // messages between the roots, through the script provider
					text = fmt.Sprintf(`!send_message {"recipient":"w%d","text":"hello %d"}`, (i+1)%workers, j)
				case 2:
					text = fmt.Sprintf(`!spawn_agent {"name":"c%d","instructions":"child work"}`, j)
				}
				var res api.SendResult
				if err := streamInto(ctx, c, api.AgentSend, api.SendMessageParams{Ref: me.ID, Text: text}, &res); err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				acks.mu.Lock()
				acks.msgs[res.MessageID] = me.ID
				acks.mu.Unlock()
			}
		}()
	}
	defer func() { stop(); wg.Wait() }()

	for round := range 3 {
		time.Sleep(300 * time.Millisecond) // let the load build up
		agents, msgs := acks.snapshot()    // acknowledged before the rsync began
		backup := filepath.Join(t.TempDir(), "backup")
		out, err := exec.Command(rsync, "-a", home+"/", backup+"/").CombinedOutput()
		if err != nil {
			// 24 is rsync's "some files vanished": expected on a live home.
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 24 {
				t.Fatalf("rsync: %v\n%s", err, out)
			}
		}
		checkBackup(t, round, backup, agents, msgs)
	}
}

func checkBackup(t *testing.T, round int, backup string, agents []string, msgs map[string]string) {
	t.Helper()
	// substrat fsck --repair
	st, err := fsstore.Open(backup, fsstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.Scan(context.Background(), fsstore.ScanOptions{Repair: true, Deep: true, RebuildSnapshots: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Findings {
		if f.Kind == fsstore.FindKeptOut || f.Kind == fsstore.FindBadMessage || (!f.Repaired && f.Kind != fsstore.FindOrphan && f.Kind != fsstore.FindNotAgent) {
			t.Errorf("round %d: fsck of the backup: %+v", round, f)
		}
	}
	live := map[string]bool{}
	for _, a := range res.Agents {
		live[a.ID()] = true
		a.Close()
	}
	for _, id := range agents {
		if !live[id] {
			t.Errorf("round %d: agent %s acknowledged before the rsync is not in the backup", round, id)
		}
	}
	for id, to := range msgs {
		box := st.Layout().Agent(to).Inbox()
		_, errNew := os.Stat(box.Path(fsstore.InboxNew, id))
		_, errCur := os.Stat(box.Path(fsstore.InboxCur, id))
		if errNew != nil && errCur != nil {
			t.Errorf("round %d: message %s acknowledged before the rsync is in neither new/ nor cur/ of the backup", round, id)
		}
	}
	// Then a daemon starts on it.
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Home: backup, Providers: provider.NewRegistry(script.New()), LogOutput: testWriter{t},
			Ready: func() { close(ready) }, Grace: time.Second})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("round %d: daemon on the backup: %v", round, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("round %d: daemon on the backup: %v", round, err)
	}
	kinds := map[fsstore.FindingKind]int{}
	for _, f := range res.Findings {
		kinds[f.Kind]++
	}
	t.Logf("round %d: backup with %d agents, %d acknowledged messages checked, findings %v", round, len(res.Agents), len(msgs), kinds)
}
