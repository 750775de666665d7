package codex

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/fakeapi"
	"github.com/substrat/substrat/provider/internal/clitest"
)

// The tests in this file run the pinned CLI against a loopback API that
// answers 429 as OpenAI's does (see ratelimit.go).

// limitedSession is a session of the pinned CLI (with its own retries as
// by default) against a fake that answers "ok", behind a limiter whose
// first n answers to the model are l.
func limitedSession(t *testing.T, l clitest.Limit, n int) (provider.Session, *clitest.Limiter) {
	t.Helper()
	var lim *clitest.Limiter
	s, _, _, _ := startAt(t, func(r fakeapi.CodexRequest) fakeapi.CodexOut { return fakeapi.CodexOut{Text: "ok"} }, func(url string) string {
		lim = clitest.NewLimiter(t, url, func(r *http.Request) *clitest.Limit {
			if !strings.HasSuffix(r.URL.Path, "/responses") || n == 0 {
				return nil
			}
			n--
			return &l
		})
		return lim.URL
	}, "-c", "model_providers.substrat.stream_max_retries=5", "-c", "model_providers.substrat.request_max_retries=4")
	return s, lim
}

func asLimit(t *testing.T, err error) *provider.RateLimited {
	t.Helper()
	var rl *provider.RateLimited
	if !errors.As(err, &rl) {
		t.Fatalf("the turn failed with %v, not a rate limit", err)
	}
	return rl
}

// TestCodexRetryAfterParks: a 429 asking to wait an hour, which the CLI
// would wait out itself (it prints no reset time), ends the turn at the
// CLI's first reconnect notice as a limit (without a reset: the daemon
// backs off), after one request. The next turn resumes and succeeds.
func TestCodexRetryAfterParks(t *testing.T) {
	s, lim := limitedSession(t, clitest.Limit{Status: 429, Header: map[string]string{"retry-after": "3600"},
		Body: `{"error":{"type":"rate_limit_error","code":"rate_limit_exceeded","message":"Rate limit reached for requests"}}`}, 1)
	begin := time.Now()
	_, _, err := clitest.Send(t, s, "hello", nil)
	rl := asLimit(t, err)
	if !rl.Until.IsZero() || !strings.Contains(rl.Reason, "429") {
		t.Errorf("limit %+v", rl)
	}
	if took := time.Since(begin); took > 60*time.Second {
		t.Errorf("the turn took %s", took)
	}
	if n := lim.Limited(); n != 1 {
		t.Errorf("%d requests answered 429, want 1", n)
	}
	res, _, err := clitest.Send(t, s, "again", nil)
	if err != nil || res.Text != "ok" {
		t.Fatalf("the turn after the limit: %+v, %v", res, err)
	}
}

// TestCodexUsageLimitParks: a plan's usage limit ends the turn as a limit
// until the reset the CLI prints (to the minute, in local time): within a
// day as a time of day, further off with its date.
func TestCodexUsageLimitParks(t *testing.T) {
	for _, ahead := range []time.Duration{2 * time.Hour, 3*24*time.Hour + 10*time.Minute} {
		t.Run(ahead.String(), func(t *testing.T) {
			reset := time.Now().Add(ahead).Truncate(time.Second)
			s, lim := limitedSession(t, clitest.Limit{Status: 429, Body: fmt.Sprintf(
				`{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached","plan_type":"plus","resets_at":%d,"resets_in_seconds":%d}}`,
				reset.Unix(), int(ahead.Seconds()))}, 1)
			_, _, err := clitest.Send(t, s, "hello", nil)
			rl := asLimit(t, err)
			if rl.Until.Before(reset) || rl.Until.After(reset.Add(2*time.Minute)) {
				t.Errorf("limited until %s, want the reset %s (%s)", rl.Until, reset, rl.Reason)
			}
			if n := lim.Limited(); n != 1 {
				t.Errorf("%d requests answered 429, want 1", n)
			}
		})
	}
}
