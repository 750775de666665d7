package retry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/provider"
)

func TestWait(t *testing.T) {
	p := Policy{Tries: 5, Base: 10 * time.Millisecond, MaxWait: 50 * time.Millisecond}
	for _, c := range []struct {
		n    int
		ra   time.Duration
		want time.Duration
	}{
		{1, 0, 10 * time.Millisecond},
		{2, 0, 20 * time.Millisecond},
		{3, 0, 40 * time.Millisecond},
		{4, 0, 50 * time.Millisecond},
		{1, 30 * time.Millisecond, 30 * time.Millisecond},
		{1, time.Hour, 50 * time.Millisecond},
	} {
		if got := p.Wait(c.n, c.ra); got != c.want {
			t.Errorf("Wait(%d, %v) = %v, want %v", c.n, c.ra, got, c.want)
		}
	}
	if got := (Policy{}).Wait(1, 0); got != 2*time.Second {
		t.Errorf("default first wait %v, want 2s", got)
	}
}

func TestDoRetriesThenSucceeds(t *testing.T) {
	p := Policy{Tries: 3, Base: time.Millisecond}
	n := 0
	err := p.Do(context.Background(), "thing", func(context.Context) error {
		n++
		if n < 3 {
			return &Transient{Status: 503, Err: errors.New("busy")}
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("Do = %v after %d attempts, want nil after 3", err, n)
	}
}

func TestDoGivesUp(t *testing.T) {
	p := Policy{Tries: 3, Base: time.Millisecond}
	n := 0
	err := p.Do(context.Background(), "openai chat completion", func(context.Context) error {
		n++
		return &Transient{Status: 429, Err: fmt.Errorf("rate limited (%d)", n)}
	})
	if n != 3 {
		t.Errorf("%d attempts, want 3", n)
	}
	if !errors.Is(err, provider.ErrRetryable) {
		t.Fatalf("error %v does not wrap ErrRetryable", err)
	}
	for _, want := range []string{"openai chat completion", "3 times", "HTTP 429", "rate limited (3)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	var rl *provider.RateLimited
	if !errors.As(err, &rl) || !rl.Until.IsZero() {
		t.Errorf("a 429 without a reset time that outlasts the tries: %v, want a RateLimited without Until", err)
	}
}

// TestDoParksALongReset: a 429 whose reset is further off than ParkAfter
// is not waited for: Do returns at once with the reset time.
func TestDoParksALongReset(t *testing.T) {
	p := Policy{Tries: 3, Base: time.Millisecond, ParkAfter: 5 * time.Second}
	n := 0
	start := time.Now()
	err := p.Do(context.Background(), "req", func(context.Context) error {
		n++
		return &Transient{Status: 429, RetryAfter: 6 * time.Second, Err: errors.New("slow down")}
	})
	var rl *provider.RateLimited
	if n != 1 || !errors.As(err, &rl) || rl.Until.Before(start.Add(6*time.Second)) || !errors.Is(err, provider.ErrRetryable) {
		t.Fatalf("after %d attempts: %v", n, err)
	}
}

func TestResetHeaders(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	h := http.Header{}
	h.Set("X-Ratelimit-Reset-Requests", "1s")
	h.Set("X-Ratelimit-Reset-Tokens", "6m0s")
	if d := ParseRetryAfter(h, now); d != 6*time.Minute {
		t.Errorf("openai reset headers: %v", d)
	}
	h = http.Header{}
	h.Set("Anthropic-Ratelimit-Tokens-Reset", now.Add(90*time.Second).Format(time.RFC3339))
	if d := ParseRetryAfter(h, now); d != 90*time.Second {
		t.Errorf("anthropic reset header: %v", d)
	}
}

func TestDoPermanentFailure(t *testing.T) {
	bad := errors.New("401 unauthorized")
	n := 0
	err := Policy{Base: time.Millisecond}.Do(context.Background(), "x", func(context.Context) error { n++; return bad })
	if !errors.Is(err, bad) || n != 1 || errors.Is(err, provider.ErrRetryable) {
		t.Fatalf("Do = %v after %d attempts, want the error at once", err, n)
	}
}

func TestDoHonoursRetryAfter(t *testing.T) {
	p := Policy{Tries: 2, Base: time.Millisecond}
	start := time.Now()
	n := 0
	err := p.Do(context.Background(), "x", func(context.Context) error {
		n++
		if n == 1 {
			return &Transient{Status: 429, RetryAfter: 150 * time.Millisecond, Err: errors.New("slow down")}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Errorf("retried after %v, want at least the 150ms Retry-After", took)
	}
}

func TestDoCancelledWhileWaiting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := Policy{Tries: 3, Base: time.Hour}.Do(ctx, "x", func(context.Context) error {
		return &Transient{Err: syscall.ECONNRESET}
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do = %v, want DeadlineExceeded", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("Do took %v after its context ended", time.Since(start))
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		h    http.Header
		want time.Duration
	}{
		{http.Header{}, 0},
		{http.Header{"Retry-After": {"3"}}, 3 * time.Second},
		{http.Header{"Retry-After": {"0.5"}}, 500 * time.Millisecond},
		{http.Header{"Retry-After": {"soon"}}, 0},
		{http.Header{"Retry-After": {now.Add(10 * time.Second).Format(http.TimeFormat)}}, 10 * time.Second},
		{http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"9"}}, 250 * time.Millisecond},
	} {
		if got := ParseRetryAfter(c.h, now); got != c.want {
			t.Errorf("ParseRetryAfter(%v) = %v, want %v", c.h, got, c.want)
		}
	}
}

func TestClassify(t *testing.T) {
	for code, want := range map[int]bool{200: false, 400: false, 401: false, 404: false, 408: true, 429: true, 500: true, 502: true, 503: true, 529: true} {
		if RetryableStatus(code) != want {
			t.Errorf("RetryableStatus(%d) = %v", code, !want)
		}
	}
	if !NetworkTransient(fmt.Errorf("read: %w", syscall.ECONNRESET)) || NetworkTransient(context.Canceled) ||
		NetworkTransient(errors.New("bad request")) {
		t.Error("NetworkTransient misclassifies")
	}
	if !IsOverloaded(`{"type":"overloaded_error"}`) || IsOverloaded("fine") {
		t.Error("IsOverloaded misclassifies")
	}
}
