package main

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/substrat/substrat/provider/fakeapi"
	wire "github.com/substrat/substrat/supervisor/api"
)

// TestClaudeUsageLimitParkE2E: the pinned Claude Code CLI, logged in to a
// subscription (an OAuth token), meets its usage limit: the API answers
// 429 with the unified rate-limit headers saying rejected, resetting 8 s
// ahead. The daemon's agent is PARKED until exactly that reset, the API
// is asked no more than twice in the window, and the agent answers by
// itself after the reset.
func TestClaudeUsageLimitParkE2E(t *testing.T) {
	cli := claudeCLI(t)
	api := fakeapi.NewClaude(func(r fakeapi.ClaudeRequest) fakeapi.ClaudeOut {
		return fakeapi.ClaudeOut{Text: "answered after the reset"}
	})
	t.Cleanup(api.Close)
	reset := time.Now().Add(8 * time.Second).Truncate(time.Second).Add(time.Second)
	var limited atomic.Int32
	target, _ := url.Parse(api.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/messages") && time.Now().Before(reset) {
			limited.Add(1)
			w.Header().Set("anthropic-ratelimit-unified-status", "rejected")
			w.Header().Set("anthropic-ratelimit-unified-reset", strconv.FormatInt(reset.Unix(), 10))
			w.Header().Set("anthropic-ratelimit-unified-representative-claim", "five_hour")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"type":"error","error":{"type":"rate_limit_error","message":"limited"}}`))
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	d := runDaemon(t, append(claudeEnv(cli, front.URL), "ANTHROPIC_API_KEY=", "CLAUDE_CODE_OAUTH_TOKEN=sk-ant-oat01-fake")...)
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "c", Provider: "claude"}, nil)
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "c", Text: "hello", Wait: false}, nil)
	var parked wire.AgentInfo
	waitFor(t, "c parked", func() bool { parked = d.agents()["c"]; return parked.Parked != nil })
	if !parked.Parked.Until.Equal(reset) {
		t.Errorf("parked until %s, want the reset %s (%s)", parked.Parked.Until, reset, parked.Parked.Reason)
	}
	waitFor(t, "c's answer after the reset", func() bool { a := d.agents()["c"]; return a.Counters.Turns == 1 && a.Parked == nil })
	if n := limited.Load(); n > 2 {
		t.Errorf("the API was asked %d times while limited", n)
	}
	if a := d.agents()["c"]; a.Failing != 0 {
		t.Errorf("the park counted as a failure: %+v", a)
	}
}
