package gemini

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
	"github.com/substrat/substrat/provider/internal/retry"
)

// The tests in this file run the pinned CLI against a loopback API that
// answers 429 with Google's error bodies (see ratelimit.go).

// quotaBody is a 429's body for a quota (PerMinute or PerDay) asking to
// retry after delay.
func quotaBody(quota, delay string) string {
	return fmt.Sprintf(`{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. Please retry in %s.","status":"RESOURCE_EXHAUSTED","details":[`+
		`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequests%sPerProjectPerModel-FreeTier","quotaValue":"2"}]},`+
		`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"%s"}]}}`, delay, quota, delay)
}

// limitedSession is a session of the pinned CLI with policy pol against a
// fake that answers "ok", behind a limiter whose next answer to the model,
// after a first turn that went through, is l. (A session whose first turn
// never got an answer cannot be resumed: the pinned CLI says "No previous
// sessions found for this project", exit 42.)
func limitedSession(t *testing.T, l clitest.Limit, pol retry.Policy) (provider.Session, *clitest.Limiter) {
	t.Helper()
	var lim *clitest.Limiter
	s, _, _, _ := startAt(t, func(r fakeapi.GeminiRequest) fakeapi.GeminiOut { return fakeapi.GeminiOut{Text: "ok"} }, func(url string) string {
		lim = clitest.NewLimiter(t, url, func(r *http.Request) *clitest.Limit { return nil })
		return lim.URL
	}, pol)
	if res, _, err := clitest.Send(t, s, "first", nil); err != nil || res.Text != "ok" {
		t.Fatalf("the first turn: %+v, %v", res, err)
	}
	n := 1
	lim.SetLimit(func(r *http.Request) *clitest.Limit {
		if !strings.Contains(r.URL.Path, "GenerateContent") || n == 0 {
			return nil
		}
		n--
		return &l
	})
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

// TestGeminiQuotaParks: a per-minute quota asking to retry in 40 s ends
// the turn at once as a limit until then (the CLI would have waited it
// out itself, on stderr); the next turn, the quota over, succeeds.
func TestGeminiQuotaParks(t *testing.T) {
	s, lim := limitedSession(t, clitest.Limit{Status: 429, Body: quotaBody("PerMinute", "40s")}, retry.Policy{Tries: 3, Base: time.Millisecond})
	begin := time.Now()
	_, _, err := clitest.Send(t, s, "hello", nil)
	rl := asLimit(t, err)
	if rl.Until.Before(begin.Add(40*time.Second)) || rl.Until.After(time.Now().Add(41*time.Second)) {
		t.Errorf("limited until %s, %s after the turn began; want 40 s", rl.Until, rl.Until.Sub(begin))
	}
	if n := lim.Limited(); n != 1 {
		t.Errorf("%d requests answered 429, want 1", n)
	}
	res, _, err := clitest.Send(t, s, "again", nil)
	if err != nil || res.Text != "ok" {
		t.Fatalf("the turn after the limit: %+v, %v", res, err)
	}
}

// TestGeminiShortQuotaWaits: a quota asking to retry in 1 s is waited out
// by the engine (shorter than retry.DefaultParkAfter), and the retried
// turn succeeds.
func TestGeminiShortQuotaWaits(t *testing.T) {
	s, lim := limitedSession(t, clitest.Limit{Status: 429, Body: quotaBody("PerMinute", "1s")}, retry.Policy{Tries: 2, Base: time.Millisecond})
	res, _, err := clitest.Send(t, s, "hello", nil)
	if err != nil || res.Text != "ok" || lim.Limited() != 1 {
		t.Fatalf("%+v, %v after %d 429s", res, err, lim.Limited())
	}
}

// TestGeminiDailyQuotaParks: a per-day quota (for which the CLI prints no
// reset) parks until midnight Pacific time, when Google's daily quotas
// reset.
func TestGeminiDailyQuotaParks(t *testing.T) {
	loc, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Skip("no time zone data here:", err)
	}
	s, _ := limitedSession(t, clitest.Limit{Status: 429, Body: quotaBody("PerDay", "72181s")}, retry.Policy{Tries: 1})
	_, _, err = clitest.Send(t, s, "hello", nil)
	rl := asLimit(t, err)
	at := rl.Until.In(loc)
	if at.Hour() != 0 || at.Minute() != 0 || !rl.Until.After(time.Now()) || rl.Until.After(time.Now().Add(24*time.Hour)) {
		t.Errorf("limited until %s (%s), want the next midnight in Los Angeles", rl.Until, at)
	}
}

// TestGeminiFirstTurnLimited: a session whose first turn hit a quota (no
// answer kept: the CLI could not resume it) answers its next turn, in a
// session the CLI starts afresh, whose id is learned.
func TestGeminiFirstTurnLimited(t *testing.T) {
	var lim *clitest.Limiter
	n := 1
	s, _, ids, _ := startAt(t, func(r fakeapi.GeminiRequest) fakeapi.GeminiOut { return fakeapi.GeminiOut{Text: "ok"} }, func(url string) string {
		lim = clitest.NewLimiter(t, url, func(r *http.Request) *clitest.Limit {
			if !strings.Contains(r.URL.Path, "GenerateContent") || n == 0 {
				return nil
			}
			n--
			return &clitest.Limit{Status: 429, Body: quotaBody("PerMinute", "40s")}
		})
		return lim.URL
	}, retry.Policy{Tries: 1})
	_, _, err := clitest.Send(t, s, "hello", nil)
	asLimit(t, err)
	res, _, err := clitest.Send(t, s, "again", nil)
	if err != nil || res.Text != "ok" {
		t.Fatalf("the turn after the limit: %+v, %v", res, err)
	}
	if len(*ids) != 2 || (*ids)[0] == (*ids)[1] {
		t.Errorf("session ids learned: %v, want the first and a fresh one", *ids)
	}
}
