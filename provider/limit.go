package provider

import (
	"fmt"
	"time"
)

// RateLimited is the failure of a turn that a provider's usage or rate
// limit stopped: the API answered 429 with a reset time further off than
// is worth waiting for inline, or a CLI said its usage limit is reached.
// The daemon parks the agent (and every agent on the same provider and
// credentials) until Until, instead of retrying: a park is not a failed
// turn. It wraps ErrRetryable.
type RateLimited struct {
	// Until is when the limit resets; zero when the provider did not say
	// (the daemon then backs off exponentially, up to a cap).
	Until time.Time
	// Reason is what the provider said.
	Reason string
}

func (e *RateLimited) Error() string {
	if e.Until.IsZero() {
		return "rate limited: " + e.Reason
	}
	return fmt.Sprintf("rate limited until %s: %s", e.Until.UTC().Format(time.RFC3339), e.Reason)
}

// Unwrap makes a RateLimited an ErrRetryable.
func (e *RateLimited) Unwrap() error { return ErrRetryable }
