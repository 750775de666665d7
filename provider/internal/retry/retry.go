// Package retry runs a provider request again after transient failures:
// HTTP 429 and 5xx, "overloaded" answers and connection resets. It waits
// with exponential backoff (base, 2*base, 4*base...), or as long as the
// server's Retry-After asks when it says so, and gives up after a number
// of tries with an error wrapping provider.ErrRetryable that says what
// failed, how often and how.
package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/substrat/substrat/provider"
)

// Policy says how often and how long to retry. The zero value is Default.
type Policy struct {
	// Tries is the number of attempts, the first included; default 3.
	Tries int
	// Base is the wait before the second attempt; each later wait doubles.
	// Default 2 s.
	Base time.Duration
	// MaxWait bounds one wait, Retry-After included; default 1 minute.
	MaxWait time.Duration
	// ParkAfter: a 429 that asks to wait this long or longer is not
	// waited for inline, holding the agent's slot: Do returns a
	// *provider.RateLimited at once, and the daemon parks the agent until
	// the reset. Default 5 s.
	ParkAfter time.Duration
}

// DefaultParkAfter is Policy.ParkAfter's default.
const DefaultParkAfter = 5 * time.Second

// Default is the policy of the spec: 3 tries, 2 s base.
var Default = Policy{Tries: 3, Base: 2 * time.Second, MaxWait: time.Minute}

func (p Policy) withDefaults() Policy {
	if p.Tries <= 0 {
		p.Tries = Default.Tries
	}
	if p.Base <= 0 {
		p.Base = Default.Base
	}
	if p.MaxWait <= 0 {
		p.MaxWait = Default.MaxWait
	}
	if p.ParkAfter <= 0 {
		p.ParkAfter = DefaultParkAfter
	}
	return p
}

// Wait returns how long to wait after failed attempt n (1-based) when the
// server asked for retryAfter (0 if it did not): retryAfter if given,
// Base*2^(n-1) otherwise, bounded by MaxWait.
func (p Policy) Wait(n int, retryAfter time.Duration) time.Duration {
	p = p.withDefaults()
	d := retryAfter
	if d <= 0 {
		d = p.Base
		for i := 1; i < n && d < p.MaxWait; i++ {
			d *= 2
		}
	}
	return min(d, p.MaxWait)
}

// Transient is a failure worth another try. Attempt functions return it
// (possibly wrapped) to ask for a retry.
type Transient struct {
	// Status is the HTTP status, or 0 for a network failure.
	Status int
	// RetryAfter is what the server asked to wait, or 0.
	RetryAfter time.Duration
	// Err describes the failure.
	Err error
}

func (t *Transient) Error() string {
	if t.Status != 0 {
		return fmt.Sprintf("HTTP %d: %v", t.Status, t.Err)
	}
	return t.Err.Error()
}

func (t *Transient) Unwrap() error { return t.Err }

// Do runs attempt until it succeeds, fails with an error that is not
// Transient, ctx ends, or the tries run out. what names the request in
// the final error, e.g. "openai chat completion". The final error wraps
// provider.ErrRetryable and the last failure; a ctx error is returned
// wrapped with what failed before.
func (p Policy) Do(ctx context.Context, what string, attempt func(ctx context.Context) error) error {
	p = p.withDefaults()
	var last error
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			if last != nil {
				return fmt.Errorf("%s: %w (after %d tries, last: %v)", what, err, n-1, last)
			}
			return fmt.Errorf("%s: %w", what, err)
		}
		err := attempt(ctx)
		if err == nil {
			return nil
		}
		var t *Transient
		if !errors.As(err, &t) || ctx.Err() != nil {
			if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
				return fmt.Errorf("%s: %w (%v)", what, ctx.Err(), err)
			}
			return err
		}
		last = err
		if t.Status == http.StatusTooManyRequests {
			switch {
			case t.RetryAfter >= p.ParkAfter:
				return fmt.Errorf("%s: %w", what, &provider.RateLimited{Until: time.Now().Add(t.RetryAfter), Reason: err.Error()})
			case n >= p.Tries:
				return fmt.Errorf("%s: %w", what, &provider.RateLimited{Reason: fmt.Sprintf("failed %d times in a row; last failure: %v", n, err)})
			}
		}
		if n >= p.Tries {
			return fmt.Errorf("%w: %s failed %d times in a row; last failure: %w", provider.ErrRetryable, what, n, err)
		}
		timer := time.NewTimer(p.Wait(n, t.RetryAfter))
		select {
		case <-ctx.Done():
			timer.Stop()
		case <-timer.C:
		}
	}
}

// RetryableStatus reports whether an HTTP status is worth retrying: 408,
// 409 (lock conflicts), 425, 429, 5xx, and 529 (Anthropic's "overloaded").
func RetryableStatus(code int) bool {
	switch {
	case code == http.StatusRequestTimeout, code == http.StatusConflict, code == http.StatusTooEarly,
		code == http.StatusTooManyRequests:
		return true
	case code >= 500:
		return true
	}
	return false
}

// ParseRetryAfter reads a Retry-After header: seconds, or an HTTP date. It
// also honours the "retry-after-ms" header some APIs send. Zero if absent
// or unreadable.
func ParseRetryAfter(h http.Header, now time.Time) time.Duration {
	if ms := h.Get("Retry-After-Ms"); ms != "" {
		if f, err := strconv.ParseFloat(strings.TrimSpace(ms), 64); err == nil && f > 0 {
			return time.Duration(f * float64(time.Millisecond))
		}
	}
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			if f <= 0 {
				return 0
			}
			return time.Duration(f * float64(time.Second))
		}
		if t, err := http.ParseTime(v); err == nil {
			if d := t.Sub(now); d > 0 {
				return d
			}
		}
		return 0
	}
	return resetHeaders(h, now)
}

// resetHeaders reads the rate-limit reset headers APIs send beside (or
// instead of) Retry-After: OpenAI's x-ratelimit-reset-requests and
// -tokens (a duration: "1s", "6m0s"), Anthropic's
// anthropic-ratelimit-*-reset (an RFC 3339 time). The latest wins: it is
// when every limit that was hit has reset.
func resetHeaders(h http.Header, now time.Time) time.Duration {
	var d time.Duration
	for _, k := range []string{"X-Ratelimit-Reset-Requests", "X-Ratelimit-Reset-Tokens"} {
		if v, err := time.ParseDuration(strings.TrimSpace(h.Get(k))); err == nil && v > d {
			d = v
		}
	}
	for _, k := range []string{"Anthropic-Ratelimit-Requests-Reset", "Anthropic-Ratelimit-Tokens-Reset",
		"Anthropic-Ratelimit-Input-Tokens-Reset", "Anthropic-Ratelimit-Output-Tokens-Reset"} {
		if t, err := time.Parse(time.RFC3339, strings.TrimSpace(h.Get(k))); err == nil && t.Sub(now) > d {
			d = t.Sub(now)
		}
	}
	return d
}

// IsOverloaded reports whether a message reads like an "overloaded" or
// rate-limit answer (some servers send it with status 200, in the stream).
func IsOverloaded(msg string) bool {
	m := strings.ToLower(msg)
	for _, s := range []string{"overloaded", "rate limit", "rate_limit", "too many requests", "server_error", "try again later"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// NetworkTransient reports whether err is a network failure worth
// retrying: a connection reset, refused or aborted, a broken pipe, or a
// connection closed mid-response. Context errors are not.
func NetworkTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	for _, e := range []error{syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.ECONNABORTED, syscall.EPIPE,
		io.ErrUnexpectedEOF, io.EOF} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "connection reset") || strings.Contains(s, "server closed idle connection") ||
		strings.Contains(s, "unexpected EOF")
}
