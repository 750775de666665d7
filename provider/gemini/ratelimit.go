package gemini

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/internal/cli"
	"github.com/substrat/substrat/provider/internal/retry"
)

// Rate and usage limits, as the pinned CLI (0.61.0) prints them in
// stream-json (checked against a loopback Gemini API answering 429 with
// Google's error bodies).
//
// The CLI retries a 429 itself, up to ten times, waiting what the body's
// RetryInfo asks (up to 300 s) or backing off, and prints those attempts
// on stderr only: an agent would hold its slot through every wait, and
// Substrat could not tell. settings.json therefore sets general.maxAttempts
// to 1 (see prepare), and the first 429 ends the CLI's run with a result
// line {"type":"result","status":"error","error":{"type":"unknown",
// "message":"[API Error: …]\nPlease wait and try again later. …"}}. The
// CLI ignores the Retry-After header; what it says comes from the body:
//
//   - A per-minute quota, whose body says "Please retry in 20s" (and a
//     RetryInfo of 20s): the message carries "Please retry in 20s." and
//     "Suggested retry after 20s.". A *retry.Transient with status 429
//     and that wait: the engine waits a short one out and parks for a
//     longer one (retry.Policy.ParkAfter) until then.
//   - A per-day quota (a QuotaFailure whose quotaId says PerDay): "You
//     have exhausted your daily quota on this model." Google's daily
//     quotas reset at midnight Pacific time: a *provider.RateLimited until
//     the next one (without a reset time if the time zone is unknown here).
//   - A 429 that says neither ("Resource has been exhausted (e.g. check
//     quota)."): a *retry.Transient with status 429, which the engine
//     retries and then parks for without a reset time (backing off). The
//     CLI adds "Please wait and try again later. To increase your limits,
//     request a quota increase…" to the message of every 429, and only
//     to a 429's: that text marks one.

var retryIn = regexp.MustCompile(`(?:Please retry in|Suggested retry after) ([0-9][0-9hms.]*s)\b`)

// resultError is a result line's error.
type resultError struct {
	Type   string `json:"type"`
	Status string `json:"status"`
	Error  struct {
		Message string `json:"message"`
	} `json:"error"`
}

// rateLimit reads a line that ends the turn for a rate or usage limit, or
// returns nil. now is the time the line was read.
func rateLimit(b []byte, now time.Time) *cli.Final {
	if !bytes.Contains(b, []byte(`"result"`)) || !bytes.Contains(b, []byte("quota")) {
		return nil
	}
	var l resultError
	if json.Unmarshal(b, &l) != nil || l.Type != "result" || l.Status == "success" {
		return nil
	}
	msg := strings.TrimSpace(l.Error.Message)
	why := fmt.Errorf("gemini: %s", msg)
	switch {
	case strings.Contains(msg, "exhausted your daily quota"):
		return &cli.Final{Err: &provider.RateLimited{Until: nextPacificMidnight(now), Reason: why.Error()}}
	case retryIn.MatchString(msg):
		d, err := time.ParseDuration(retryIn.FindStringSubmatch(msg)[1])
		if err != nil || d <= 0 {
			d = 0
		}
		return &cli.Final{Err: &retry.Transient{Status: 429, RetryAfter: d, Err: why}}
	case strings.Contains(msg, "request a quota increase"), strings.Contains(msg, "Possible quota limitations in place"),
		strings.Contains(msg, "Resource has been exhausted"), strings.Contains(msg, "exceeded your current quota"):
		return &cli.Final{Err: &retry.Transient{Status: 429, Err: why}}
	}
	return nil
}

// nextPacificMidnight is the next midnight in America/Los_Angeles after
// now, or zero if that zone is unknown here.
func nextPacificMidnight(now time.Time) time.Time {
	loc, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		return time.Time{}
	}
	t := now.In(loc)
	return time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, loc)
}
