package main

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider/fakeapi"
	"github.com/substrat/substrat/supervisor/api"
)

// paste writes text to the program in one write (tmux's paste buffer,
// without bracketed-paste markers): keys that arrive in one read.
func (x *tmux) paste(text string) {
	x.t.Helper()
	if out, err := x.run("set-buffer", "--", text); err != nil {
		x.t.Fatalf("tmux set-buffer: %v: %s", err, out)
	}
	if out, err := x.run("paste-buffer"); err != nil {
		x.t.Fatalf("tmux paste-buffer: %v: %s", err, out)
	}
}

// waitMatch waits until the screen matches re.
func (x *tmux) waitMatch(why string, re *regexp.Regexp) string {
	x.t.Helper()
	return x.poll(why, func(s string) string {
		if re.MatchString(s) {
			return ""
		}
		return "a match of " + re.String()
	})
}

// TestTopApproveInATerminal runs `substrat top` in a real terminal
// against a real daemon: three keys written at once move three rows; an
// agent of the script provider that asks for approval shows WAITING and
// what it asks; v shows the input as typed (&& and > as themselves, an
// escape escaped), a asks y/n, y approves and the turn goes on; an agent
// whose provider answers 429 shows PARKED until when; and the selection
// survives a kill -9 and restart of the daemon.
func TestTopApproveInATerminal(t *testing.T) {
	bin := lookPath(t, "substrat")
	limit := fakeapi.NewOpenAI(func(fakeapi.OpenAIRequest) fakeapi.OpenAIOut {
		h := http.Header{}
		h.Set("Retry-After", "3600")
		return fakeapi.OpenAIOut{Status: http.StatusTooManyRequests, Header: h}
	})
	t.Cleanup(limit.Close)
	d := runDaemon(t, "OPENAI_BASE_URL="+limit.URL, "OPENAI_API_KEY=sk-fake", "OPENAI_MODEL=fake-model")
	var lead api.AgentInfo
	mustCall(d, api.AgentCreate, api.CreateParams{Name: "lead"}, &lead)
	for _, w := range []string{"w1", "w2", "w3"} {
		mustCall(d, api.AgentCreate, api.CreateParams{Name: w, Parent: lead.ID}, nil)
	}
	mustCall(d, api.AgentCreate, api.CreateParams{Name: "solo",
		Permissions: &fsstore.Permissions{Mode: fsstore.ModeDefault, ApprovalTimeout: "10m"}}, nil)
	mustCall(d, api.AgentCreate, api.CreateParams{Name: "limited", Provider: "openai"}, nil)
	mustStream(d, api.AgentSend, api.SendMessageParams{Ref: "limited", Text: "hello", Wait: false}, nil)

	x := startTmux(t, 120, 30, fmt.Sprintf("NO_COLOR=1 %s top --home %s; sleep 30", bin, d.home))
	x.waitFor("the tree", "lead", "w3", "solo", "limited", "? help")

	// Three keys in one write: three rows down, from lead to w3.
	x.paste("jjj")
	x.waitFor("the burst", "── lead/w3 ")

	// An approval request: the row says WAITING and what it asks.
	command := "make install && echo done > log\x1b[2J"
	mustStream(d, api.AgentSend, api.SendMessageParams{Ref: "solo", Wait: false, Text: `!request_approval {"tool_name":"Bash","input":{"command":"` +
		strings.ReplaceAll(command, "\x1b", `\u001b`) + `"},"tool_use_id":"toolu_1"}` + "\n" + `!send_message {"recipient":"USER","text":"installed"}`}, nil)
	req := waitApproval(t, d, 1)[0]
	x.waitMatch("the waiting row", regexp.MustCompile(`solo +WAITING .*approve\? Bash`))
	x.keys("j")
	x.waitFor("the selection", "── solo ", "approval "+req.ID+" waits")
	x.keys("v")
	s := x.waitFor("the request", req.ID+"  solo wants Bash", `{"command":"make install && echo done > log\u001b[2J"}`)
	if strings.Contains(s, `\u0026`) || strings.Contains(s, `\u003e`) {
		t.Errorf("the input is HTML-escaped on screen:\n%s", s)
	}
	x.keys("a")
	x.waitFor("the question", "approve solo's Bash", "y to confirm", `echo done > log`)
	x.keys("y")
	x.waitFor("the answer", "approve: done")
	deadline := time.Now().Add(60 * time.Second)
	for {
		var inbox []api.InboxMessage
		mustCall(d, api.InboxList, api.InboxListParams{All: true}, &inbox)
		if len(inbox) > 0 && inbox[len(inbox)-1].Text == "installed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the turn did not go on after the approval from top; inbox %+v", inbox)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var info api.InspectResult
	mustCall(d, api.AgentInspect, api.RefParams{Ref: "solo"}, &info)
	if ap := info.Session.Approvals; len(ap) != 1 || ap[0].Answer != fsstore.ApprovalAllow {
		t.Errorf("solo's requests after top approved: %+v", ap)
	}
	x.keys("Escape")

	// PARKED, until when.
	deadline = time.Now().Add(30 * time.Second)
	for d.agents()["limited"].Parked == nil {
		if time.Now().After(deadline) {
			t.Fatalf("limited is not parked: %+v", d.agents()["limited"])
		}
		time.Sleep(50 * time.Millisecond)
	}
	until := d.agents()["limited"].Parked.Until.Local().Format("15:04:05")
	x.waitMatch("the parked row", regexp.MustCompile(`limited +PARKED .*until `+until))

	// The selection is kept across a kill -9 and a new daemon.
	x.keys("j")
	x.waitFor("the selection", "── limited ")
	d.kill()
	x.waitFor("the daemon gone", "daemon gone")
	d.start()
	s = x.waitFor("the reconnect", "unclean stop", "── limited ")
	if strings.Contains(s, "daemon gone") {
		t.Errorf("top still says the daemon is gone:\n%s", s)
	}
	x.keys("q")
}
