package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	wire "github.com/substrat/substrat/supervisor/api"
)

// TestInboxFollowE2E: `substrat inbox --follow --json` prints a message
// sent after it started; the daemon is killed (-9) and started again, a
// message is sent at once (before the follower is back, or after), then
// another: each of the three is printed once, in order, and nothing else
// but the notifications of the turns. Without --json, text an agent wrote
// reaches the terminal with its control characters shown, not obeyed.
func TestInboxFollowE2E(t *testing.T) {
	bin := lookPath(t, "substrat")
	d := runDaemon(t)
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "r"}, nil)
	follow := func(args ...string) (lines chan string, ready chan struct{}) {
		cmd := exec.Command(bin, append([]string{"inbox", "--follow", "--home", d.home}, args...)...)
		out, _ := cmd.StdoutPipe()
		errs, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		lines, ready = make(chan string, 100), make(chan struct{}, 10)
		go func() {
			sc := bufio.NewScanner(errs)
			for sc.Scan() {
				if strings.Contains(sc.Text(), "following") {
					ready <- struct{}{}
				}
			}
		}()
		go func() {
			sc := bufio.NewScanner(out)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		return lines, ready
	}
	next := func(lines chan string, what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("inbox --follow ended before %s", what)
			}
			return l
		case <-time.After(60 * time.Second):
			t.Fatalf("inbox --follow printed nothing for %s", what)
		}
		return ""
	}
	lines, ready := follow("--json")
	plain, plainReady := follow()
	<-ready
	<-plainReady
	texts := []string{"one", "two \x1b]0;pwned\x07", "three"}
	send := func(i int) {
		b, _ := json.Marshal(map[string]string{"recipient": "USER", "text": texts[i]})
		d.send("r", "!send_message "+string(b))
	}
	expect := func(i int) {
		t.Helper()
		var n wire.Notification
		l := next(lines, fmt.Sprintf("message %d", i))
		if err := json.Unmarshal([]byte(l), &n); err != nil || n.Kind != wire.NotifyMessage || n.Text != texts[i] || n.AgentPath != "r" {
			t.Fatalf("line %q (%v), want message %q", l, err, texts[i])
		}
	}
	send(0)
	expect(0)
	if l := next(plain, "the plain line"); !strings.Contains(l, "message") || !strings.Contains(l, " r") {
		t.Errorf("plain line %q", l)
	}
	if l := next(plain, "the plain text"); strings.TrimSpace(l) != "one" {
		t.Errorf("plain text %q", l)
	}

	d.kill()
	d.start()
	send(1)
	expect(1)
	send(2)
	expect(2)
	next(plain, "message 2")
	if l := next(plain, "message 2's text"); strings.ContainsRune(l, 0x1b) || !strings.Contains(l, `\x1b]0;pwned\x07`) {
		t.Errorf("plain text %q: its escape reached the terminal", l)
	}
	select {
	case l := <-lines:
		t.Errorf("an extra line: %q", l)
	case <-time.After(time.Second): // nothing more is due; a late duplicate would show here
	}
}
