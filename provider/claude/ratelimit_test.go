package claude

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/fakeapi"
	"github.com/substrat/substrat/provider/internal/clitest"
)

// The tests in this file run the pinned CLI against a loopback API that
// answers 429 as Anthropic's does, and check what the turn then fails
// with (see ratelimit.go).

const rateLimitBody = `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your account's rate limit. Please try again later."}}`

// limitedTurn runs one turn of the pinned CLI against a fake behind a
// limiter answering the first limit requests (and no more) with l; env
// goes to the CLI. It returns how long the turn took, the limiter, the
// session (for a turn after), and the turn's error.
func limitedTurn(t *testing.T, l clitest.Limit, limit int, env ...string) (time.Duration, *clitest.Limiter, provider.Session, error) {
	t.Helper()
	api := fakeapi.NewClaude(func(r fakeapi.ClaudeRequest) fakeapi.ClaudeOut { return fakeapi.ClaudeOut{Text: "ok"} })
	t.Cleanup(api.Close)
	lim := clitest.NewLimiter(t, api.URL, func(r *http.Request) *clitest.Limit {
		if !strings.HasPrefix(r.URL.Path, "/v1/messages") || limit == 0 {
			return nil
		}
		limit--
		return &l
	})
	p, cfg := realProvider(t, api, append([]string{"ANTHROPIC_BASE_URL=" + lim.URL}, env...)...)
	s, err := p.Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	begin := time.Now()
	_, err = s.Send(ctx, provider.Turn{Prompt: "hello"})
	return time.Since(begin), lim, s, err
}

func asLimit(t *testing.T, err error) *provider.RateLimited {
	t.Helper()
	var rl *provider.RateLimited
	if !errors.As(err, &rl) {
		t.Fatalf("the turn failed with %v, not a rate limit", err)
	}
	return rl
}

// TestRealRetryAfterParks: a 429 asking to wait 30 s, which the CLI would
// wait out itself holding the agent's slot, ends the turn at once as a
// limit until about then; the limiter saw one request. The next turn,
// once the API answers, resumes the session and succeeds.
func TestRealRetryAfterParks(t *testing.T) {
	begin := time.Now()
	took, lim, s, err := limitedTurn(t, clitest.Limit{Status: 429, Header: map[string]string{"retry-after": "30"}, Body: rateLimitBody}, 1,
		"CLAUDE_CODE_MAX_RETRIES=2")
	rl := asLimit(t, err)
	if rl.Until.Before(begin.Add(30*time.Second)) || rl.Until.After(time.Now().Add(45*time.Second)) {
		t.Errorf("limited until %s, %s after the turn began; want about 30 s", rl.Until, rl.Until.Sub(begin))
	}
	if took >= 25*time.Second {
		t.Errorf("the turn took %s: the CLI's wait was not cut short", took)
	}
	if n := lim.Limited(); n != 1 {
		t.Errorf("%d requests answered 429, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := s.Send(ctx, provider.Turn{Prompt: "again"})
	if err != nil || res.Text != "ok" {
		t.Fatalf("the turn after the limit: %+v, %v", res, err)
	}
}

// TestRealUsageLimitParks: a subscription's usage limit (an OAuth login;
// the unified rate-limit headers say rejected, and when it resets) ends
// the turn as a limit until exactly that reset, with one request and no
// retry.
func TestRealUsageLimitParks(t *testing.T) {
	reset := time.Now().Add(3 * time.Hour).Truncate(time.Second)
	_, lim, _, err := limitedTurn(t, clitest.Limit{Status: 429, Body: rateLimitBody, Header: map[string]string{
		"anthropic-ratelimit-unified-status":               "rejected",
		"anthropic-ratelimit-unified-reset":                strconv.FormatInt(reset.Unix(), 10),
		"anthropic-ratelimit-unified-representative-claim": "five_hour",
	}}, 1, "ANTHROPIC_API_KEY=", "CLAUDE_CODE_OAUTH_TOKEN=sk-ant-oat01-fake")
	rl := asLimit(t, err)
	if !rl.Until.Equal(reset) {
		t.Errorf("limited until %s, want the reset %s (%s)", rl.Until, reset, rl.Reason)
	}
	if !strings.Contains(rl.Reason, "limit") {
		t.Errorf("reason %q", rl.Reason)
	}
	if n := lim.Limited(); n != 1 {
		t.Errorf("%d requests answered 429, want 1", n)
	}
}

// TestRealRateLimitNoReset: a 429 that says nothing of when to retry, once
// the CLI has given up on it, is a limit without a reset time (the daemon
// backs off), not a plain failure.
func TestRealRateLimitNoReset(t *testing.T) {
	_, lim, _, err := limitedTurn(t, clitest.Limit{Status: 429, Body: rateLimitBody}, 100)
	rl := asLimit(t, err)
	if !rl.Until.IsZero() || !strings.Contains(rl.Reason, "429") {
		t.Errorf("limit %+v, want no reset and the CLI's text", rl)
	}
	if n := lim.Limited(); n != 1 { // CLAUDE_CODE_MAX_RETRIES=0 in realProvider
		t.Errorf("%d requests answered 429, want 1", n)
	}
}
