package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/internal/proc"
	"github.com/substrat/substrat/provider/internal/retry"
)

// scriptedCLI is a Spec whose "CLI" runs, at its nth attempt, the shell
// script attempts[n-1] (the last one again after that), and reads these
// lines: "OK <text>" ends the turn with text; "FAIL <text>" fails it as a
// result the CLI reported failed (see FailureText); "RATE <seconds>"
// fails it as an HTTP 429 asking to wait that long. Anything else is
// unreadable. *tries counts the attempts.
func scriptedCLI(t *testing.T, attempts []string) (*Provider, provider.Config, *int) {
	dir := t.TempDir()
	tries := 0
	p := New(Spec{
		Name:     "scripted",
		StateDir: func(provider.Config) (string, error) { return dir, nil },
		NewID:    func() string { return "sess-1" },
		Command: func(cfg provider.Config, id, prompt string) (Command, error) {
			tries++
			script := attempts[min(tries, len(attempts))-1]
			return Command{Command: proc.Command{Path: "/bin/sh", Args: []string{"-c", script}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: dir}}, nil
		},
		Parse: func(b []byte) (Line, error) {
			word, rest, _ := strings.Cut(string(b), " ")
			switch word {
			case "OK":
				return Line{Final: &Final{Text: rest}}, nil
			case "FAIL":
				return Line{Final: &Final{Err: FailureText("scripted reported an error", rest)}}, nil
			case "RATE":
				var secs int
				fmt.Sscan(rest, &secs)
				return Line{Final: &Final{Err: &retry.Transient{Status: 429, RetryAfter: time.Duration(secs) * time.Second, Err: errors.New("rate limited")}}}, nil
			}
			return Line{}, errors.New("not a scripted line")
		},
		Retry:     retry.Policy{Tries: 3, Base: time.Millisecond, MaxWait: time.Millisecond},
		ExitGrace: time.Second,
	})
	return p, provider.Config{AgentID: "agent-1", WorkDir: dir}, &tries
}

// TestRetryLoop: which failures of a turn the session runs the CLI again
// for, how often, and what it returns when it gives up.
func TestRetryLoop(t *testing.T) {
	var rateLimited *provider.RateLimited
	for _, c := range []struct {
		name     string
		attempts []string
		tries    int
		text     string // the turn's text, when it succeeds
		want     error  // errors.Is target of the failure, when it fails
		wantAs   any    // errors.As target of the failure
		says     string // what the error says
	}{
		{name: "success at once", attempts: []string{"echo 'OK hi'"}, tries: 1, text: "hi"},
		{name: "overloaded result retried", attempts: []string{"echo 'FAIL Overloaded'", "echo 'OK hi'"}, tries: 2, text: "hi"},
		{name: "5xx and resets retried", attempts: []string{"echo 'FAIL API Error: 529'", "echo 'FAIL socket hang up'", "echo 'OK third'"}, tries: 3, text: "third"},
		{name: "gives up after the tries", attempts: []string{"echo 'FAIL status 503'"}, tries: 3, want: provider.ErrRetryable, says: "failed 3 times in a row"},
		{name: "a failure that is not transient is final", attempts: []string{"echo 'FAIL invalid model'"}, tries: 1, says: "invalid model"},
		{name: "no result, overloaded on stderr retried", attempts: []string{"echo 'Overloaded, try again later' >&2; exit 1", "echo 'OK hi'"}, tries: 2, text: "hi"},
		{name: "no result, another failure is final", attempts: []string{"echo boom >&2; exit 3"}, tries: 1, says: "without a result"},
		{name: "unreadable output is final", attempts: []string{"echo garbage"}, tries: 1, want: provider.ErrProtocol, says: "garbage"},
		{name: "a long Retry-After parks at once", attempts: []string{"echo 'RATE 60'"}, tries: 1, wantAs: &rateLimited},
		{name: "short 429s run out the tries", attempts: []string{"echo 'RATE 0'"}, tries: 3, wantAs: &rateLimited, says: "failed 3 times"},
		{name: "a short 429 then success", attempts: []string{"echo 'RATE 0'", "echo 'OK hi'"}, tries: 2, text: "hi"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, cfg, tries := scriptedCLI(t, c.attempts)
			s, err := p.Create(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Stop()
			res, err := s.Send(context.Background(), provider.Turn{Prompt: "go"})
			if *tries != c.tries {
				t.Errorf("the CLI ran %d times, want %d", *tries, c.tries)
			}
			failing := c.want != nil || c.wantAs != nil || c.says != ""
			switch {
			case !failing && err != nil:
				t.Fatalf("Send: %v", err)
			case !failing:
				if res.Text != c.text {
					t.Errorf("text %q, want %q", res.Text, c.text)
				}
				return
			case err == nil:
				t.Fatalf("Send succeeded with %q; want a failure", res.Text)
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("Send: %v; want an error wrapping %v", err, c.want)
			}
			if c.want == nil && c.wantAs == nil && errors.Is(err, provider.ErrRetryable) {
				t.Errorf("Send: %v; a final failure should not read as retryable", err)
			}
			if c.wantAs != nil && !errors.As(err, c.wantAs) {
				t.Errorf("Send: %v; want a %T", err, c.wantAs)
			}
			if !strings.Contains(err.Error(), c.says) {
				t.Errorf("Send: %v; want it to say %q", err, c.says)
			}
		})
	}
}

// TestRetryLoopCancelled: a turn whose context has ended runs nothing.
func TestRetryLoopCancelled(t *testing.T) {
	p, cfg, tries := scriptedCLI(t, []string{"echo 'OK hi'"})
	s, err := p.Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Send(ctx, provider.Turn{Prompt: "go"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Send: %v, want context.Canceled", err)
	}
	if *tries != 0 {
		t.Errorf("the CLI ran %d times", *tries)
	}
}
