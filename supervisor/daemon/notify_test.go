package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/rpc"
)

// TestNotifyFlood: a root sends 400 messages to USER in one turn, with a
// notify_command that takes a second. At most notify_concurrency (2)
// commands run at once, a handful run in all, each says how many messages
// it stands for (SUBSTRAT_COALESCED, and "coalesced" in the JSON on stdin), the
// counts add up to 400 in the log and in daemon.status (a run a
// message, as before, would be 400 runs at once), and every message
// is stored in USER's inbox.
func TestNotifyFlood(t *testing.T) {
	const messages = 400
	home := shortDir(t)
	log := filepath.Join(home, "notify.log")
	// One short write per line, O_APPEND: the lines of concurrent runs
	// do not mix.
	script := `first=$(head -n 1); echo "+ $SUBSTRAT_COALESCED $first" >> ` + log + `; sleep 1; echo "-" >> ` + log
	cfg := fmt.Sprintf(`{"version": 1, "notify_command": ["sh", "-c", %q]}`, script)
	if err := os.WriteFile(fsstore.Layout{Home: home}.Config(), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := startDaemonAt(t, home)
	ctx := context.Background()
	c, err := rpc.Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := callInto(ctx, c, api.AgentCreate, api.CreateParams{Name: "r"}, nil); err != nil {
		t.Fatal(err)
	}
	var prompt strings.Builder
	for i := range messages {
		fmt.Fprintf(&prompt, "!send_message {\"recipient\":\"USER\",\"text\":\"message %d\"}\n", i)
	}
	// The daemon runs in this process: its open files are ours. Watch
	// them through the flood (400 commands at once held some 1,200 pipes).
	fds := func() int { e, _ := os.ReadDir("/proc/self/fd"); return len(e) }
	base, most := fds(), 0
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			most = max(most, fds())
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	var res api.SendResult
	if err := streamInto(ctx, c, api.AgentSend, api.SendMessageParams{Ref: "r", Wait: true, Text: prompt.String()}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Failed != "" || strings.Count(res.Text, "send_message -> error") > 0 {
		t.Fatalf("the turn: %+v", res)
	}
	var st api.StatusResult
	eventually(t, "the notifications to end", func() bool {
		st = api.StatusResult{}
		if err := callInto(ctx, c, api.DaemonStatus, struct{}{}, &st); err != nil {
			t.Fatal(err)
		}
		n := st.Notify
		return n != nil && n.Messages == messages && n.Running == 0 && n.Waiting == 0
	})
	close(stop)
	<-watched
	if most > base+40 {
		t.Errorf("open files went from %d to %d during the flood", base, most)
	}
	n := st.Notify
	if n.Limit != 2 || n.Failures != 0 || n.Runs+n.Coalesced != messages || n.Runs > 25 {
		t.Errorf("daemon.status notify: %+v", n)
	}

	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	running, most, runs, covered := 0, 0, 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "-" {
			running--
			continue
		}
		var k int
		var first string
		if _, err := fmt.Sscanf(line, "+ %d", &k); err != nil {
			t.Fatalf("log line %q", line)
		}
		_, first, _ = strings.Cut(strings.TrimPrefix(line, "+ "+strconv.Itoa(k)), " ")
		var note api.Notification
		if err := json.Unmarshal([]byte(first), &note); err != nil || note.Coalesced != k || note.Kind != api.NotifyMessage ||
			!strings.HasPrefix(note.Text, "message ") {
			t.Errorf("a run standing for %d more messages read %q (%v)", k, first, err)
		}
		running++
		most = max(most, running)
		runs++
		covered += k + 1
	}
	if most > 2 || runs != n.Runs || covered != messages {
		t.Errorf("notify runs: at most %d at once (want <= 2), %d runs (status says %d), standing for %d messages (want %d)",
			most, runs, n.Runs, covered, messages)
	}
	t.Logf("%d messages: %d notifications, %d coalesced", messages, n.Runs, n.Coalesced)

	var inbox []api.InboxMessage
	if err := callInto(ctx, c, api.InboxList, api.InboxListParams{All: true}, &inbox); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range inbox {
		seen[m.Text] = true
	}
	for i := range messages {
		if !seen[fmt.Sprintf("message %d", i)] {
			t.Fatalf("message %d is not in USER's inbox (%d there)", i, len(inbox))
		}
	}
}

// TestNotifyFailure: a notify command that fails is counted and its
// error shown in daemon.status; the message is stored all the same.
func TestNotifyFailure(t *testing.T) {
	home := shortDir(t)
	cfg := `{"version": 1, "notify_command": ["sh", "-c", "echo no display >&2; exit 3"]}`
	if err := os.WriteFile(fsstore.Layout{Home: home}.Config(), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := startDaemonAt(t, home)
	ctx := context.Background()
	c, err := rpc.Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := callInto(ctx, c, api.AgentCreate, api.CreateParams{Name: "r"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := streamInto(ctx, c, api.AgentSend, api.SendMessageParams{Ref: "r", Wait: true, Text: `!send_message {"recipient":"USER","text":"all done"}`}, nil); err != nil {
		t.Fatal(err)
	}
	var st api.StatusResult
	eventually(t, "the failure counted", func() bool {
		st = api.StatusResult{}
		callInto(ctx, c, api.DaemonStatus, struct{}{}, &st)
		return st.Notify != nil && st.Notify.Failures == 1
	})
	if n := st.Notify; n.Runs != 1 || !strings.Contains(n.LastError, "exit status 3") || n.LastFailureAt.IsZero() {
		t.Errorf("daemon.status notify: %+v", n)
	}
	var inbox []api.InboxMessage
	if err := callInto(ctx, c, api.InboxList, api.InboxListParams{All: true}, &inbox); err != nil || len(inbox) != 1 {
		t.Fatalf("USER's inbox: %v %+v", err, inbox)
	}
}
