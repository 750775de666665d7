package supervisor

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/substrat/substrat/fsstore"
)

// Settings are the core's defaults that the user's configuration may
// change while the daemon runs (package supervisor/config reads HOME/
// config.json into them). They apply from the next use: a new agent, the
// next turn, the next failure, the next approval request.
type Settings struct {
	// DefaultProvider and DefaultModel are what an agent created without
	// them gets (the model only with the default provider).
	DefaultProvider string
	DefaultModel    string
	// PermissionMode is the mode of a new agent outside a sandbox, and
	// SandboxPermissionMode inside one (when neither the user nor a parent
	// set one).
	PermissionMode        string
	SandboxPermissionMode string
	// Pools sizes the slot pools (live sessions each); "default" applies
	// to pools not named.
	Pools map[string]int
	// TurnTimeout bounds a turn. The time a turn waits for an approval
	// does not count: ApprovalTimeout bounds that.
	TurnTimeout time.Duration
	// A failed turn is retried after RetryBase, doubling; RetryLimit
	// failures within RetryWindow gate the agent.
	RetryLimit  int
	RetryWindow time.Duration
	RetryBase   time.Duration
	// ApprovalTimeout is how long an approval request waits when the
	// agent's permissions set no timeout (then it is denied, "expired").
	// It runs from the request's first asking, across restarts: a turn
	// run again after a crash waits for the same request, until the same
	// deadline.
	ApprovalTimeout time.Duration
	// Notify, if set, is a command the host runs for each message to USER.
	// At most NotifyConcurrency run at once; the messages of a burst that
	// finds them all running are coalesced into one notification.
	Notify            []string
	NotifyConcurrency int
	// ContextWindows are models' context windows in tokens, by provider
	// and model ("*": the provider's other models), for the providers
	// that manage their model's context (openai); CompactAt is the share
	// of the window that triggers a compaction (0: the provider's
	// default). Each turn is told them (provider.Turn).
	ContextWindows map[string]map[string]int
	CompactAt      float64
	// Limits are the resource limits of agents that set none (zero
	// fields: none).
	Limits fsstore.Limits
	// PoolLimits are the resource limits of the agents of a pool (by
	// name) that set none of their own, over Limits: an agent's own win
	// over its pool's, which win over Limits, field by field.
	PoolLimits map[string]fsstore.Limits
}

// contextWindow is the configured window of an agent's model, or 0.
func (s *Settings) contextWindow(prov, model string) int {
	if n := s.ContextWindows[prov][model]; n > 0 && model != "" {
		return n
	}
	return s.ContextWindows[prov]["*"]
}

// DefaultNotifyConcurrency is how many notify commands run at once
// unless the configuration says otherwise.
const DefaultNotifyConcurrency = 2

// DefaultSettings are the built-in defaults.
func DefaultSettings() Settings {
	return Settings{
		DefaultProvider: "script", PermissionMode: fsstore.ModeDefault, SandboxPermissionMode: fsstore.ModeFull,
		Pools: map[string]int{DefaultPool: 8}, TurnTimeout: 10 * time.Minute,
		RetryLimit: 5, RetryWindow: time.Minute, RetryBase: time.Second, ApprovalTimeout: fsstore.DefaultApprovalTimeout,
		NotifyConcurrency: DefaultNotifyConcurrency,
	}
}

// Check reports what is wrong with s, if anything.
func (s Settings) Check() error {
	switch {
	case s.DefaultProvider == "":
		return fmt.Errorf("default_provider is empty")
	case !slices.Contains(fsstore.PermissionModes, s.PermissionMode):
		return fmt.Errorf("permission_mode %q is not one of %v", s.PermissionMode, fsstore.PermissionModes)
	case s.PermissionMode == fsstore.ModeFull:
		return fmt.Errorf("permission_mode %s outside a sandbox would give every new agent full tool permission on the host; "+
			"give it per agent (agent create --permission-mode) if you mean it", fsstore.ModeFull)
	case !slices.Contains(fsstore.PermissionModes, s.SandboxPermissionMode):
		return fmt.Errorf("sandbox_permission_mode %q is not one of %v", s.SandboxPermissionMode, fsstore.PermissionModes)
	case s.Pools[DefaultPool] <= 0:
		return fmt.Errorf("the default pool needs at least one slot")
	case s.TurnTimeout <= 0 || s.RetryWindow <= 0 || s.RetryBase <= 0 || s.ApprovalTimeout <= 0:
		return fmt.Errorf("durations must be positive")
	case s.RetryLimit < 1:
		return fmt.Errorf("retry limit must be at least 1")
	case s.NotifyConcurrency < 1:
		return fmt.Errorf("notify_concurrency must be at least 1")
	}
	if err := s.Limits.Validate(); err != nil {
		return fmt.Errorf("limits: %s", fsstore.Reason(err))
	}
	for name, l := range s.PoolLimits {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("pool_limits of %q: %s", name, fsstore.Reason(err))
		}
	}
	for name, n := range s.Pools {
		if n <= 0 {
			return fmt.Errorf("pool %q needs at least one slot", name)
		}
	}
	return nil
}

// SetSettings adopts s (after Check); what runs already keeps going.
func (c *Core) SetSettings(s Settings) error {
	if err := s.Check(); err != nil {
		return err
	}
	s.Pools = maps.Clone(s.Pools)
	s.PoolLimits = maps.Clone(s.PoolLimits)
	s.Notify = slices.Clone(s.Notify)
	c.settingsPtr.Store(&s)
	c.signal() // a bigger pool may let a waiting turn run
	return nil
}

// Settings returns the settings in force.
func (c *Core) Settings() Settings {
	s := *c.settingsPtr.Load()
	s.Pools = maps.Clone(s.Pools)
	s.PoolLimits = maps.Clone(s.PoolLimits)
	return s
}

func (c *Core) settings() *Settings { return c.settingsPtr.Load() }

// newPermissions is the permission setting of an agent created without
// one: the configured mode for where it runs (full inside a sandbox and
// the CLI's safe mode outside, by default).
func (c *Core) newPermissions(workspace string) *fsstore.Permissions {
	if workspace != "" {
		return &fsstore.Permissions{Mode: c.settings().SandboxPermissionMode}
	}
	return &fsstore.Permissions{Mode: c.settings().PermissionMode}
}

// approvalTimeout is how long a request of an agent with perm waits.
func (c *Core) approvalTimeout(perm fsstore.Permissions) time.Duration {
	if perm.ApprovalTimeout != "" {
		return perm.Timeout()
	}
	return c.settings().ApprovalTimeout
}
