package codex

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

// Rate and usage limits, as the pinned CLI (0.169.0) prints them in its
// --json output (checked against a loopback Responses API answering 429):
//
//   - A 429 with Retry-After: the CLI waits it out itself, however long
//     (an hour was waited), and retries up to five times, printing
//     {"type":"error","message":"Reconnecting... 1/5 (exceeded retry
//     limit, last status: 429 Too Many Requests)"} before each wait. It
//     does not print how long it waits. The first such line ends the turn
//     as a *retry.Transient with status 429: the engine retries the turn
//     after its own short backoff, and after its tries returns a
//     *provider.RateLimited without a reset, which the daemon parks for
//     with exponential backoff. The agent never holds its slot through
//     the CLI's wait.
//   - A 429 without Retry-After: no retry; "exceeded retry limit, last
//     status: 429 Too Many Requests" in an error and a turn.failed line.
//     The same *retry.Transient.
//   - A ChatGPT plan's usage limit (the body's error type
//     "usage_limit_reached", with resets_at): no retry; the error and
//     turn.failed lines say "You’ve hit your usage limit. … try again at
//     4:52 PM." (a reset within a day) or "… try again at Nov 28th, 2026
//     4:02 PM.", in the CLI's local time zone, to the minute. The turn ends
//     as a *provider.RateLimited until that time plus a minute (the
//     minute the CLI prints is cut short of the seconds).

var (
	reconnect429 = regexp.MustCompile(`^Reconnecting\.\.\. \d+/\d+ \(.*\b429\b`)
	tryAgainAt   = regexp.MustCompile(`hit your usage limit.*try again at (?:([A-Z][a-z]{2}) (\d{1,2})(?:st|nd|rd|th)?, (\d{4}) )?(\d{1,2}:\d{2} [AP]M)`)
)

// rateLimit reads a line that ends the turn for a rate or usage limit, or
// returns nil. now is the time the line was read, in the CLI's zone.
func rateLimit(b []byte, now time.Time) *cli.Final {
	if !bytes.Contains(b, []byte("429")) && !bytes.Contains(b, []byte("usage limit")) {
		return nil
	}
	var l line
	if json.Unmarshal(b, &l) != nil {
		return nil
	}
	msg := l.Message
	switch {
	case l.Type == "turn.failed" && l.Error != nil:
		msg = l.Error.Message
	case l.Type != "error":
		return nil
	}
	if m := tryAgainAt.FindStringSubmatch(msg); m != nil {
		return &cli.Final{Err: &provider.RateLimited{Until: resetAt(m, now), Reason: "codex: " + msg}}
	}
	if reconnect429.MatchString(msg) || strings.Contains(msg, "last status: 429") {
		return &cli.Final{Err: &retry.Transient{Status: 429, Err: fmt.Errorf("codex: %s", msg)}}
	}
	return nil
}

// resetAt reads the time of a tryAgainAt match: a date and a time, or a
// time of day (the next one after now), plus a minute.
func resetAt(m []string, now time.Time) time.Time {
	loc := now.Location()
	if m[1] != "" {
		t, err := time.ParseInLocation("Jan 2 2006 3:04 PM", m[1]+" "+m[2]+" "+m[3]+" "+m[4], loc)
		if err != nil {
			return time.Time{}
		}
		return t.Add(time.Minute)
	}
	clock, err := time.ParseInLocation("3:04 PM", m[4], loc)
	if err != nil {
		return time.Time{}
	}
	t := time.Date(now.Year(), now.Month(), now.Day(), clock.Hour(), clock.Minute(), 0, 0, loc).Add(time.Minute)
	if t.Before(now) {
		t = t.AddDate(0, 0, 1)
	}
	return t
}
