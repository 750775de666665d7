package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
)

// A copy made with the real rsync, slowed down as a remote or busy target
// would be, while the daemon archives the agents it copies, and spawns,
// sends and completes around them: every agent and message acknowledged
// before the copy began is in the copy, whole, after fsck --repair, and a
// daemon starts on it. An archive used to be a rename, and rsync, having
// listed archive/ first, found an empty skeleton in agents/ (61 to 85 of
// 150 agents were missing in three runs). The copy holds copy.lock, as
// substrat backup does (and flock -s by hand), so that archives leave
// agents/<id> for it.
func TestBackupWhileArchiving(t *testing.T) {
	rsync, err := exec.LookPath("rsync")
	if err != nil {
		t.Fatal("rsync is not installed (make test installs it)")
	}
	d := runDaemon(t)

	// The ledger: what the daemon acknowledged before the copy began.
	const roots = 60
	agents := map[string]bool{}
	msgs := map[string]string{} // message id -> agent id
	var ids []string
	for i := range roots {
		var a api.AgentInfo
		mustCall(d, api.AgentCreate, api.CreateParams{Name: fmt.Sprintf("r%d", i)}, &a)
		var res api.SendResult
		mustStream(d, api.AgentSend, api.SendMessageParams{Ref: a.ID, Text: strings.Repeat("payload ", 200), Wait: false}, &res)
		agents[a.ID], msgs[res.MessageID] = true, a.ID
		ids = append(ids, a.ID)
	}
	copyDir := filepath.Join(t.TempDir(), "copy")
	release, err := fsstore.CopyLock(d.home)
	if err != nil {
		t.Fatal(err)
	}
	rs := exec.Command(rsync, "-a", "--bwlimit=40", d.home+"/", copyDir+"/")
	out := &strings.Builder{}
	rs.Stdout, rs.Stderr = out, out
	if err := rs.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rs.Wait() }()

	// While it copies: archive what it copies, and keep the tree busy.
	var wg sync.WaitGroup
	var archived atomic.Int64 // archives acknowledged while the copy ran
	stop := make(chan struct{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		for _, id := range ids {
			select {
			case <-stop:
				return
			default:
			}
			var res []api.AgentInfo
			mustCall(d, api.AgentArchive, api.RefParams{Ref: id}, &res)
			archived.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var a api.AgentInfo
			mustCall(d, api.AgentCreate, api.CreateParams{Name: fmt.Sprintf("n%d", i)}, &a)
			d.send(a.ID, `!spawn_agent {"name":"kid","instructions":"!complete {\"result\":\"done\"}"}`)
			var res api.SendResult
			mustStream(d, api.AgentSend, api.SendMessageParams{Ref: a.ID, Text: "more", Wait: false}, &res)
		}
	}()
	var ee *exec.ExitError
	select {
	case err = <-done:
	case <-time.After(5 * time.Minute):
		rs.Process.Kill()
		t.Fatal("rsync took more than 5 minutes")
	}
	release()
	duringCopy := archived.Load()
	close(stop)
	wg.Wait()
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 24) {
		t.Fatalf("rsync: %v\n%s", err, out)
	}
	t.Logf("rsync: %v", err)

	// The copy repairs cleanly...
	if b, err := exec.Command("substrat", "--home", copyDir, "fsck", "--repair").CombinedOutput(); err != nil {
		t.Fatalf("fsck --repair on the copy: %v\n%s", err, b)
	}
	// ...and holds every acknowledged agent whole, with its messages.
	l := fsstore.Layout{Home: copyDir}
	missing, inArchive := 0, 0
	for id := range agents {
		dir := l.AgentDir(id)
		if _, err := os.Stat(l.ArchivedAgentDir(id)); err == nil {
			dir, inArchive = l.ArchivedAgentDir(id), inArchive+1
		}
		for _, f := range []string{fsstore.SessionName, fsstore.EventsName} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Errorf("agent %s: %v", id, err)
				missing++
			}
		}
	}
	for mid, id := range msgs {
		found := false
		for _, dir := range []string{l.AgentDir(id), l.ArchivedAgentDir(id)} {
			for _, sub := range []string{fsstore.InboxNew, fsstore.InboxCur} {
				if _, err := os.Stat(fsstore.AgentFiles{Dir: dir}.Inbox().Path(sub, mid)); err == nil {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("message %s to %s is not in the copy", mid, id)
			missing++
		}
	}
	t.Logf("%d agents and %d messages acknowledged before the copy; %d of the agents were in archive/ in the copy; %d missing",
		len(agents), len(msgs), inArchive, missing)
	if duringCopy == 0 {
		t.Errorf("no archive was acknowledged while the copy ran; the test proves nothing")
	}
	t.Logf("%d archives acknowledged while the copy ran", duringCopy)

	// A daemon starts on the copy.
	c := &e2eDaemon{t: t, home: copyDir, env: append(os.Environ(), "SUBSTRAT_HOME=")}
	c.start()
	defer c.kill()
	var st api.StatusResult
	mustCall(c, api.DaemonStatus, struct{}{}, &st)
}
