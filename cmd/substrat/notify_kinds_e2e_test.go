package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider/fakeapi"
	wire "github.com/substrat/substrat/supervisor/api"
)

// daemonWithConfig starts a daemon whose home has config.json cfg from
// the start, with env besides.
func daemonWithConfig(t *testing.T, cfg string, env ...string) *e2eDaemon {
	t.Helper()
	d := &e2eDaemon{t: t, home: shortHome(t), env: append(append(os.Environ(), "SUBSTRAT_HOME="), env...)}
	if err := os.WriteFile(fsstore.Layout{Home: d.home}.Config(), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d.start()
	t.Cleanup(d.kill)
	return d
}

// waitFor polls cond (each call is a real query of the daemon or a file)
// until it holds, for up to a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestNotifyKindsE2E: notify_command reads one line of valid JSON on its
// stdin for each kind of notification: a message to USER (its text as the
// agent wrote it, control characters and <&> included, in a JSON string:
// nothing of it in the command line), an approval request that waits, an
// agent gated by its parent, an agent parked on its provider's 429 and
// unparked at the reset, and a root that completes.
func TestNotifyKindsE2E(t *testing.T) {
	log := filepath.Join(t.TempDir(), "notes.jsonl")
	var mu sync.Mutex
	var reset time.Time
	api := fakeapi.NewOpenAI(func(r fakeapi.OpenAIRequest) fakeapi.OpenAIOut {
		mu.Lock()
		defer mu.Unlock()
		if reset.IsZero() {
			reset = time.Now().Add(6 * time.Second)
		}
		if left := time.Until(reset); left > 0 {
			h := http.Header{}
			h.Set("Retry-After", fmt.Sprint(int(left.Seconds())+1))
			return fakeapi.OpenAIOut{Status: http.StatusTooManyRequests, Header: h}
		}
		return fakeapi.OpenAIOut{Text: "answered after the reset"}
	})
	t.Cleanup(api.Close)
	cfg := fmt.Sprintf(`{"version": 1, "notify_concurrency": 4, "notify_command": ["sh", "-c", "cat >> %s"]}`, log)
	d := daemonWithConfig(t, cfg, "OPENAI_BASE_URL="+api.URL, "OPENAI_API_KEY=sk-fake", "OPENAI_MODEL=fake-model")

	hostile := "done \x1b[31mred\x1b[0m <b>&amp; \"quoted\" $(touch /tmp/pwned)\nsecond line"
	text, _ := json.Marshal(map[string]string{"recipient": "USER", "text": hostile})
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "r"}, nil)
	d.send("r", "!send_message "+string(text))

	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "asker", WorkDir: t.TempDir(),
		Permissions: &fsstore.Permissions{Mode: fsstore.ModeDefault, ApprovalTimeout: "10m"}}, nil)
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "asker", Wait: false, Text: `!request_approval {"tool_name":"Bash","input":{"command":"rm -rf build"}}`}, nil)

	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "boss"}, nil)
	d.send("boss", `!spawn_agent {"name":"kid","instructions":"wait"}`)
	waitFor(t, "kid", func() bool { _, ok := d.agents()["boss/kid"]; return ok })
	d.send("boss", `!gate {"agent_name":"kid"}`)

	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "fin"}, nil)
	d.send("fin", `!complete {"result":"all built"}`)

	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "w", Provider: "openai"}, nil)
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "w", Text: "hello", Wait: false}, nil)

	want := []string{wire.NotifyMessage, wire.NotifyApproval, wire.NotifyGated, wire.NotifyCompleted, wire.NotifyParked, wire.NotifyUnparked}
	got := map[string]wire.Notification{}
	var raw string
	waitFor(t, "a notification of each kind", func() bool {
		b, _ := os.ReadFile(log)
		raw = string(b)
		sc := bufio.NewScanner(strings.NewReader(raw))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var n wire.Notification
			if err := json.Unmarshal(sc.Bytes(), &n); err != nil {
				t.Fatalf("notify_command read a line that is not JSON: %v: %q", err, sc.Text())
			}
			if _, ok := got[n.Kind]; !ok || n.Kind == wire.NotifyMessage && n.AgentName == "r" {
				got[n.Kind] = n
			}
		}
		for _, k := range want {
			if _, ok := got[k]; !ok {
				return false
			}
		}
		return true
	})
	for _, n := range got {
		if n.Version != 1 || n.Time.IsZero() {
			t.Errorf("notification %+v", n)
		}
	}
	if m := got[wire.NotifyMessage]; m.Text != hostile || m.AgentPath != "r" || m.MessageID == "" || m.From != "r" {
		t.Errorf("message: %+v", m)
	}
	if !strings.Contains(raw, `<b>&amp;`) || !strings.Contains(raw, `\u001b[31m`) {
		t.Errorf("the JSON escapes HTML, or passes control characters raw:\n%s", raw)
	}
	if a := got[wire.NotifyApproval]; a.RequestID == "" || a.AgentPath != "asker" || !strings.Contains(a.Text, "rm -rf build") {
		t.Errorf("approval: %+v", a)
	}
	if g := got[wire.NotifyGated]; g.AgentPath != "boss/kid" {
		t.Errorf("gated: %+v", g)
	}
	if c := got[wire.NotifyCompleted]; c.AgentPath != "fin" || !strings.Contains(c.Text, "all built") || c.MessageID == "" {
		t.Errorf("completed: %+v", c)
	}
	mu.Lock()
	until := reset
	mu.Unlock()
	if p := got[wire.NotifyParked]; p.AgentPath != "w" || p.Until == nil || p.Until.Before(until.Add(-time.Second)) {
		t.Errorf("parked: %+v (the reset is %s)", p, until)
	}
	if u := got[wire.NotifyUnparked]; u.AgentPath != "w" || u.Time.Before(until.Add(-time.Second)) {
		t.Errorf("unparked: %+v (the reset is %s)", u, until)
	}
	if _, err := os.Stat("/tmp/pwned"); err == nil {
		t.Errorf("a command in a message ran")
	}
}

// TestNotifyHangNeverBlocksE2E: a notify_command that hangs (one slot)
// holds no turn back: three turns, each sending USER a message, end while
// it hangs, and the messages are all in USER's inbox.
func TestNotifyHangNeverBlocksE2E(t *testing.T) {
	d := daemonWithConfig(t, `{"version": 1, "notify_concurrency": 1, "notify_command": ["sleep", "1000"]}`)
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "r"}, nil)
	for i := range 3 {
		d.send("r", fmt.Sprintf(`!send_message {"recipient":"USER","text":"note %d"}`, i))
	}
	var st wire.StatusResult
	mustCall(d, wire.DaemonStatus, struct{}{}, &st)
	if st.Notify == nil || st.Notify.Running != 1 || st.Notify.Messages != 3 {
		t.Errorf("daemon status notify: %+v (want the one command still hanging, 3 notifications)", st.Notify)
	}
	var inbox []wire.InboxMessage
	mustCall(d, wire.InboxList, wire.InboxListParams{}, &inbox)
	if len(inbox) != 3 {
		t.Errorf("USER's inbox has %d messages, want 3", len(inbox))
	}
}
