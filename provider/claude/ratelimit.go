package claude

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/internal/cli"
	"github.com/substrat/substrat/provider/internal/retry"
)

// Rate and usage limits, as the pinned CLI (2.1.328) prints them in
// stream-json (checked against a loopback API answering 429):
//
//   - An API key's 429 with Retry-After: the CLI waits it out itself,
//     announcing each wait with {"type":"system","subtype":"api_retry",
//     "error_status":429,"retry_delay_ms":N,...} (N is the Retry-After
//     plus a little jitter). A wait of retry.DefaultParkAfter or more
//     ends the turn there as a *provider.RateLimited until now+N: the
//     agent is parked instead of holding its slot. A Retry-After beyond
//     what the CLI waits for (an hour) is not announced: the CLI gives up
//     at once, as below. The anthropic-ratelimit-*-reset headers are not
//     read by the CLI.
//   - A 429 the CLI gave up on: an assistant line with
//     "is_api_error_message":true, "api_error_status":429, then a result
//     line with "is_error":true, "api_error_status":429 and the text
//     "API Error: Request rejected (429) · …". A *provider.RateLimited
//     without a reset time (the CLI has already retried:
//     CLAUDE_CODE_MAX_RETRIES), which the daemon backs off from.
//   - A subscription's usage limit (OAuth login; the API's
//     anthropic-ratelimit-unified-status: rejected and
//     anthropic-ratelimit-unified-reset: <epoch> headers): at once, with
//     no retry, {"type":"rate_limit_event","rate_limit_info":{"status":
//     "rejected","resetsAt":<epoch>,"rateLimitType":"five_hour",...}},
//     then the assistant line with "api_error":"usage_limit_reached" and
//     "api_error_params":{"rate_limit_info":{"resetsAt":<epoch>,...}},
//     then a result line whose text is "You've hit your 5-hour limit ·
//     resets 4:34pm (UTC)". The turn ends at the assistant line, as a
//     *provider.RateLimited until resetsAt. (Without the
//     anthropic-ratelimit-unified-representative-claim header the CLI
//     calls it "Server is temporarily limiting requests (not your usage
//     limit)", retries, and gives up as for any 429: a limit without a
//     reset.) Older versions ended with the
//     result text "Claude AI usage limit reached|<epoch>", read too.

// limitLine is what a line says about a limit.
type limitLine struct {
	Type              string `json:"type"`
	Subtype           string `json:"subtype"`
	IsError           bool   `json:"is_error"`
	IsAPIErrorMessage bool   `json:"is_api_error_message"`
	APIErrorStatus    int    `json:"api_error_status"`
	APIError          string `json:"api_error"`
	APIErrorParams    struct {
		RateLimitInfo rateLimitInfo `json:"rate_limit_info"`
	} `json:"api_error_params"`
	ErrorStatus  int     `json:"error_status"`
	RetryDelayMS float64 `json:"retry_delay_ms"`
	Result       *string `json:"result"`
	Message      *struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"message"`
}

type rateLimitInfo struct {
	Status        string `json:"status"`
	ResetsAt      int64  `json:"resetsAt"`
	RateLimitType string `json:"rateLimitType"`
}

// legacyLimit is the result text of older CLIs at a usage limit.
var legacyLimit = regexp.MustCompile(`usage limit reached\|(\d{9,11})`)

// rateLimit reads a line that ends the turn for a rate or usage limit, or
// returns nil. now is the time the line was read.
func rateLimit(b []byte, now time.Time) *cli.Final {
	if !bytes.Contains(b, []byte(`"api_error`)) && !bytes.Contains(b, []byte(`"api_retry"`)) &&
		!bytes.Contains(b, []byte("usage limit reached|")) {
		return nil // the common case: not worth decoding twice
	}
	var l limitLine
	if err := json.Unmarshal(b, &l); err != nil {
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) {
			return nil
		}
	}
	switch {
	case l.Type == "system" && l.Subtype == "api_retry":
		delay := time.Duration(l.RetryDelayMS * float64(time.Millisecond))
		if l.ErrorStatus != 429 || delay < retry.DefaultParkAfter {
			return nil // the CLI waits this one out itself
		}
		return &cli.Final{Err: &provider.RateLimited{Until: now.Add(delay),
			Reason: fmt.Sprintf("claude: API rate limit (429), retry after %s", delay.Round(time.Second))}}
	case l.Type == "assistant" && l.IsAPIErrorMessage && (l.APIErrorStatus == 429 || l.APIError == "usage_limit_reached"):
		return &cli.Final{Err: limited(l.APIErrorParams.RateLimitInfo, l.text(), now)}
	case l.Type == "result" && l.IsError:
		if m := legacyLimit.FindStringSubmatch(l.text()); m != nil {
			epoch, _ := strconv.ParseInt(m[1], 10, 64)
			return &cli.Final{Err: limited(rateLimitInfo{ResetsAt: epoch}, "Claude AI usage limit reached", now)}
		}
		if l.APIErrorStatus == 429 || l.APIError == "usage_limit_reached" {
			return &cli.Final{Err: limited(rateLimitInfo{}, l.text(), now)}
		}
	}
	return nil
}

// limited is the limit of info (its reset, if ahead of now), saying why.
func limited(info rateLimitInfo, text string, now time.Time) *provider.RateLimited {
	why := strings.TrimSpace(text)
	if why == "" {
		why = "API rate limit (429)"
	}
	rl := &provider.RateLimited{Reason: "claude: " + why}
	if until := time.Unix(info.ResetsAt, 0); info.ResetsAt > 0 && until.After(now) {
		rl.Until = until
	}
	return rl
}

// text is what an assistant or result line says.
func (l limitLine) text() string {
	if l.Result != nil {
		return *l.Result
	}
	if l.Message == nil {
		return ""
	}
	var parts []string
	for _, c := range l.Message.Content {
		parts = append(parts, c.Text)
	}
	return strings.Join(parts, " ")
}
