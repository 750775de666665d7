// Package config reads HOME/config.json, the user's settings of the
// daemon, and works out the settings in force and where each came from:
// a flag of `substrat daemon run`, an environment variable, the file, or
// the built-in default, in that order.
//
// The file is JSON, snake_case, version 1, every field optional:
//
//	{
//	  "version": 1,
//	  "default_provider": "claude",
//	  "default_model": "sonnet",
//	  "permission_mode": "acceptEdits",
//	  "sandbox_permission_mode": "bypassPermissions",
//	  "max_slots": 4,
//	  "pools": {"big": 2},
//	  "turn_timeout": "10m",
//	  "retry": {"limit": 5, "window": "1m", "base": "1s"},
//	  "approval_timeout": "10m",
//	  "notify_command": ["notify-send", "substrat"],
//	  "notify_concurrency": 2,
//	  "context_windows": {"openai": {"qwen2.5-coder:14b": 32768, "*": 8192}},
//	  "compact_at": 0.8,
//	  "limits": {"memory": "2G", "pids": 512, "cpu_weight": 100}
//	}
//
// limits are the resource limits of agents that set none of their own
// (agent create --memory/--pids/--cpu-weight, agent limits): memory a
// size (512M, 2G), pids a number of processes, cpu_weight 1 to 10000
// (100 is an ordinary process's share). Absent: no limit. They apply to
// each agent's provider processes and tool commands together, from the
// agent's next session.
//
// context_windows are models' context windows in tokens, by provider and
// model ("*": the provider's other models), over what the model's server
// reports, for the providers that keep their model's conversation
// (openai); compact_at is the share of the window past which they compact
// it (their default: 0.8). A change applies from the next turn.
//
// turn_timeout bounds a turn, not counting the time it waits for an
// approval; approval_timeout bounds that wait (an agent's permissions may
// set their own), and the agent shows as WAITING meanwhile.
//
// notify_command runs for each message to USER (the message is stored
// first): at most notify_concurrency at once (default 2); the messages of
// a burst that finds them all running are coalesced into one run, that of
// the newest message, with SUBSTRAT_COALESCED=N in its environment and a
// first line "(and N more messages)" on its stdin.
//
// A field it does not know, a value of the wrong type, a bad duration or
// mode, or another version is refused, with the line and column and the
// reason; the daemon then keeps the settings it had (at start, the
// defaults) and says so in `substrat config show`. It reads the file
// again when it changes.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor"
	"github.com/substrat/substrat/supervisor/api"
)

// Version is the file version this package reads.
const Version = 1

// File is config.json as written.
type File struct {
	Version               int            `json:"version"`
	DefaultProvider       string         `json:"default_provider,omitempty"`
	DefaultModel          string         `json:"default_model,omitempty"`
	PermissionMode        string         `json:"permission_mode,omitempty"`
	SandboxPermissionMode string         `json:"sandbox_permission_mode,omitempty"`
	MaxSlots              int            `json:"max_slots,omitempty"`
	Pools                 map[string]int `json:"pools,omitempty"`
	TurnTimeout           string         `json:"turn_timeout,omitempty"`
	Retry                 *Retry         `json:"retry,omitempty"`
	ApprovalTimeout       string         `json:"approval_timeout,omitempty"`
	NotifyCommand         []string       `json:"notify_command,omitempty"`
	NotifyConcurrency     int            `json:"notify_concurrency,omitempty"`
	// ContextWindows: provider -> model ("*": any other) -> tokens.
	ContextWindows map[string]map[string]int `json:"context_windows,omitempty"`
	CompactAt      float64                   `json:"compact_at,omitempty"`
	Limits         *Limits                   `json:"limits,omitempty"`
	// PoolLimits: pool -> the limits of its agents that set none.
	PoolLimits map[string]*Limits `json:"pool_limits,omitempty"`
}

// Limits are the default resource limits of agents.
type Limits struct {
	Memory    string `json:"memory,omitempty"`
	Pids      int64  `json:"pids,omitempty"`
	CPUWeight int64  `json:"cpu_weight,omitempty"`
}

// limits returns l as the core takes it.
func (l *Limits) limits() (fsstore.Limits, error) {
	var out fsstore.Limits
	if l == nil {
		return out, nil
	}
	if l.Memory != "" {
		n, err := fsstore.ParseBytes(l.Memory)
		if err != nil {
			return out, err
		}
		out.MemoryBytes = max(n, 0)
	}
	out.Pids, out.CPUWeight = l.Pids, l.CPUWeight
	if err := out.Validate(); err != nil {
		return out, errors.New(fsstore.Reason(err))
	}
	return out, nil
}

// Retry is the retry policy of failed turns.
type Retry struct {
	Limit  int    `json:"limit,omitempty"`
	Window string `json:"window,omitempty"`
	Base   string `json:"base,omitempty"`
}

// Sources of a value.
const (
	FromDefault = "default"
	FromFile    = "file"
	FromEnv     = "environment"
	FromFlag    = "flag"
)

// Value is one setting in force and where it came from.
type Value = api.ConfigValue

// Effective is the settings in force.
type Effective struct {
	Settings supervisor.Settings `json:"-"`
	// MaxSlots is how many turns run at once (and the default pool's size
	// unless pools names it).
	MaxSlots int `json:"-"`
	// ConfigReport is what config.show gives: the values, where they
	// came from, and the file.
	api.ConfigReport
}

// Env names the environment variables of the settings that have one.
var Env = map[string]string{
	"default_provider":        "SUBSTRAT_PROVIDER",
	"default_model":           "SUBSTRAT_MODEL",
	"permission_mode":         "SUBSTRAT_PERMISSION_MODE",
	"sandbox_permission_mode": "SUBSTRAT_SANDBOX_PERMISSION_MODE",
	"max_slots":               "SUBSTRAT_MAX_SLOTS",
	"turn_timeout":            "SUBSTRAT_TURN_TIMEOUT",
	"approval_timeout":        "SUBSTRAT_APPROVAL_TIMEOUT",
	"notify_concurrency":      "SUBSTRAT_NOTIFY_CONCURRENCY",
}

// Parse reads a config file, strictly.
func Parse(data []byte) (*File, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, located(data, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: more than one JSON value", position(data, dec.InputOffset()))
	}
	if f.Version != Version {
		return nil, fmt.Errorf("%s: version %d is not %d (the version this substrat reads)", fieldPosition(data, "version"), f.Version, Version)
	}
	if err := f.check(data); err != nil {
		return nil, err
	}
	return &f, nil
}

// check validates the values of f; data locates the field at fault.
func (f *File) check(data []byte) error {
	for key, d := range map[string]string{"turn_timeout": f.TurnTimeout, "approval_timeout": f.ApprovalTimeout} {
		if _, err := duration(d); err != nil {
			return fmt.Errorf("%s: %s: %v", fieldPosition(data, key), key, err)
		}
	}
	if r := f.Retry; r != nil {
		for key, d := range map[string]string{"window": r.Window, "base": r.Base} {
			if _, err := duration(d); err != nil {
				return fmt.Errorf("%s: retry.%s: %v", fieldPosition(data, key), key, err)
			}
		}
		if r.Limit < 0 {
			return fmt.Errorf("%s: retry.limit must be positive", fieldPosition(data, "limit"))
		}
	}
	if f.NotifyConcurrency < 0 {
		return fmt.Errorf("%s: notify_concurrency must be positive", fieldPosition(data, "notify_concurrency"))
	}
	if f.MaxSlots < 0 {
		return fmt.Errorf("%s: max_slots must be positive", fieldPosition(data, "max_slots"))
	}
	for name, n := range f.Pools {
		if n <= 0 || name == "" {
			return fmt.Errorf("%s: pool %q needs a name and at least one slot", fieldPosition(data, "pools"), name)
		}
	}
	for prov, models := range f.ContextWindows {
		for model, n := range models {
			if n <= 0 || prov == "" || model == "" {
				return fmt.Errorf("%s: context_windows: %q %q needs a provider, a model (or \"*\") and a positive number of tokens", fieldPosition(data, "context_windows"), prov, model)
			}
		}
	}
	if f.CompactAt != 0 && (f.CompactAt < 0.2 || f.CompactAt > 1) {
		return fmt.Errorf("%s: compact_at must be a share of the window between 0.2 and 1", fieldPosition(data, "compact_at"))
	}
	if _, err := f.Limits.limits(); err != nil {
		return fmt.Errorf("%s: limits: %v", fieldPosition(data, "limits"), err)
	}
	if len(f.NotifyCommand) > 0 && f.NotifyCommand[0] == "" {
		return fmt.Errorf("%s: notify_command: the program is empty", fieldPosition(data, "notify_command"))
	}
	return nil
}

// duration parses a Go duration ("90s", "10m"); "" is none.
func duration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration such as 90s or 10m", s)
	}
	return d, nil
}

// Load reads the file at path: (nil, nil) if there is none. It must be a
// regular file (not a FIFO, a device, a directory or a symlink) of at most
// fsstore.MaxJSONSize bytes; anything else is refused with an error that
// names it, and never blocks (fsstore.ReadRegular).
func Load(path string) (*File, error) {
	data, err := fsstore.ReadRegular(path, fsstore.MaxJSONSize)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Resolve works out the settings in force from the built-in defaults, the
// file f (nil: none), the environment (getenv) and the flags given (by
// key, as text). A value that does not parse, from the environment or a
// flag, is an error.
func Resolve(f *File, getenv func(string) string, flags map[string]string) (Effective, error) {
	if f == nil {
		f = &File{Version: Version}
	}
	set := supervisor.DefaultSettings()
	r := &resolver{flags: flags, getenv: getenv, eff: Effective{MaxSlots: 4}}
	r.pick("default_provider", f.DefaultProvider, setString(&set.DefaultProvider), func() any { return set.DefaultProvider })
	r.pick("default_model", f.DefaultModel, setString(&set.DefaultModel), func() any { return set.DefaultModel })
	r.pick("permission_mode", f.PermissionMode, setString(&set.PermissionMode), func() any { return set.PermissionMode })
	r.pick("sandbox_permission_mode", f.SandboxPermissionMode, setString(&set.SandboxPermissionMode), func() any { return set.SandboxPermissionMode })
	r.pick("max_slots", positiveText(f.MaxSlots), setPositive(&r.eff.MaxSlots), func() any { return r.eff.MaxSlots })
	set.Pools = map[string]int{supervisor.DefaultPool: r.eff.MaxSlots}
	maps.Copy(set.Pools, f.Pools)
	r.fileOnly("pools", len(f.Pools) > 0, maps.Clone(set.Pools))
	r.pick("turn_timeout", f.TurnTimeout, setDuration(&set.TurnTimeout), func() any { return set.TurnTimeout.String() })
	r.fileOnly("retry", f.Retry != nil, f.Retry.apply(&set))
	r.pick("approval_timeout", f.ApprovalTimeout, setDuration(&set.ApprovalTimeout), func() any { return set.ApprovalTimeout.String() })
	if len(f.NotifyCommand) > 0 {
		set.Notify = slices.Clone(f.NotifyCommand)
	}
	r.fileOnly("notify_command", len(f.NotifyCommand) > 0, set.Notify)
	r.pick("notify_concurrency", positiveText(f.NotifyConcurrency), setPositive(&set.NotifyConcurrency), func() any { return set.NotifyConcurrency })
	if len(f.ContextWindows) > 0 {
		set.ContextWindows = map[string]map[string]int{}
		for prov, models := range f.ContextWindows {
			set.ContextWindows[prov] = maps.Clone(models)
		}
	}
	r.fileOnly("context_windows", len(f.ContextWindows) > 0, set.ContextWindows)
	if f.CompactAt > 0 {
		set.CompactAt = f.CompactAt
	}
	r.fileOnly("compact_at", f.CompactAt > 0, set.CompactAt)
	r.limits(&set, f)
	if err := set.Check(); err != nil {
		r.errs = append(r.errs, err)
	}
	r.eff.Settings = set
	return r.eff, errors.Join(r.errs...)
}

// resolver gathers, for Resolve, each value in force with where it came
// from, and the errors of the values that do not parse.
type resolver struct {
	flags  map[string]string
	getenv func(string) string
	eff    Effective
	errs   []error
}

// pick sets one value: the flag, else the environment, else the file
// (its text, "" for none), else the default. apply parses and sets it;
// shown is the value in force, as Effective lists it.
func (r *resolver) pick(key, file string, apply func(string) error, shown func() any) {
	src, raw := FromDefault, ""
	switch {
	case r.flags[key] != "":
		src, raw = FromFlag, r.flags[key]
	case Env[key] != "" && r.getenv(Env[key]) != "":
		src, raw = FromEnv, r.getenv(Env[key])
	case file != "":
		src, raw = FromFile, file
	}
	if src != FromDefault {
		if err := apply(raw); err != nil {
			r.errs = append(r.errs, fmt.Errorf("%s (from the %s): %v", key, src, err))
			src = FromDefault
		}
	}
	r.eff.Values = append(r.eff.Values, Value{Key: key, Value: shown(), Source: src, Env: Env[key]})
}

// fileOnly lists a value that only the file sets, shown as it is in force.
func (r *resolver) fileOnly(key string, fromFile bool, shown any) {
	src := FromDefault
	if fromFile {
		src = FromFile
	}
	r.eff.Values = append(r.eff.Values, Value{Key: key, Value: shown, Source: src})
}

// limits sets the sandbox's resource limits, for all agents and per pool,
// from the file.
func (r *resolver) limits(set *supervisor.Settings, f *File) {
	fromFile := false
	if f.Limits != nil {
		l, err := f.Limits.limits()
		if err != nil {
			r.errs = append(r.errs, fmt.Errorf("limits (from the file): %v", err))
		} else {
			set.Limits, fromFile = l, true
		}
	}
	shown := map[string]any{"memory": "none", "pids": "none", "cpu_weight": "none"}
	if m := set.Limits.MemoryBytes; m > 0 {
		shown["memory"] = fsstore.FormatBytes(m)
	}
	if n := set.Limits.Pids; n > 0 {
		shown["pids"] = n
	}
	if w := set.Limits.CPUWeight; w > 0 {
		shown["cpu_weight"] = w
	}
	r.fileOnly("limits", fromFile, shown)
	if len(f.PoolLimits) == 0 {
		return
	}
	set.PoolLimits = map[string]fsstore.Limits{}
	for pool, pl := range f.PoolLimits {
		l, err := pl.limits()
		if err != nil {
			r.errs = append(r.errs, fmt.Errorf("pool_limits of %q (from the file): %v", pool, err))
			continue
		}
		set.PoolLimits[pool] = l
	}
	r.fileOnly("pool_limits", true, f.PoolLimits)
}

// apply sets the retry policy of set from r (nil: the defaults stay) and
// returns it as Effective lists it.
func (r *Retry) apply(set *supervisor.Settings) map[string]any {
	if r != nil {
		if r.Limit > 0 {
			set.RetryLimit = r.Limit
		}
		if d, _ := duration(r.Window); d > 0 {
			set.RetryWindow = d
		}
		if d, _ := duration(r.Base); d > 0 {
			set.RetryBase = d
		}
	}
	return map[string]any{"limit": set.RetryLimit, "window": set.RetryWindow.String(), "base": set.RetryBase.String()}
}

func setString(p *string) func(string) error { return func(v string) error { *p = v; return nil } }

func setDuration(p *time.Duration) func(string) error {
	return func(v string) error {
		d, err := duration(v)
		if err == nil {
			*p = d
		}
		return err
	}
}

func setPositive(p *int) func(string) error {
	return func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("%q is not a positive number", v)
		}
		*p = n
		return nil
	}
}

// positiveText is n as the file's text for pick: "" (none) unless positive.
func positiveText(n int) string {
	if n > 0 {
		return strconv.Itoa(n)
	}
	return ""
}

// located adds the line and column of a decoding error.
func located(data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("%s: %v", position(data, syn.Offset-1), err) // the offending byte
	case errors.As(err, &typ):
		return fmt.Errorf("%s: %s: want %s, not %s", position(data, typ.Offset), typ.Field, typ.Type, typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return fmt.Errorf("%s: unknown field %q (a typo? see substrat config show)", fieldPosition(data, field), field)
	case errors.Is(err, errors.New("EOF")) || err.Error() == "EOF" || err.Error() == "unexpected EOF":
		return fmt.Errorf("%s: the file ends before its JSON does", position(data, int64(len(data))))
	}
	return err
}

// position is "line L, column C" of offset in data (both from 1).
func position(data []byte, offset int64) string {
	offset = min(max(offset, 0), int64(len(data)))
	before := data[:offset]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(offset) - bytes.LastIndexByte(before, '\n')
	return fmt.Sprintf("line %d, column %d", line, col)
}

// fieldPosition is the position of the first "key": in data, or of the
// start of the file.
func fieldPosition(data []byte, key string) string {
	if i := bytes.Index(data, []byte(`"`+key+`"`)); i >= 0 {
		return position(data, int64(i))
	}
	return position(data, 0)
}
