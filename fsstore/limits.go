package fsstore

import (
	"fmt"
	"strconv"
	"strings"
)

// Limits are the resources an agent's provider processes and tool
// commands may use together: memory, processes and a CPU weight. A zero
// field is "the daemon's default" (config.json's limits), NoLimit (-1)
// is "none, whatever the default". Children inherit their parent's.
type Limits struct {
	// MemoryBytes caps the memory of the agent's processes together.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// Pids caps how many processes (and threads) they may be at once.
	Pids int64 `json:"pids,omitempty"`
	// CPUWeight is their share of the CPU against other agents', 1 to
	// 10000 as cgroup v2's cpu.weight (100 is an ordinary process's).
	CPUWeight int64 `json:"cpu_weight,omitempty"`
}

func (Limits) EventType() string { return EvLimits }

// applyTo sets the limits; zero ones remove them.
func (d Limits) applyTo(n *Session) error {
	n.Limits = &d
	if d.IsZero() {
		n.Limits = nil
	}
	return nil
}

// NoLimit in a field of Limits says the agent has none of that limit, not
// even the daemon's default.
const NoLimit = -1

// IsZero reports whether l sets nothing (every field the default).
func (l Limits) IsZero() bool { return l == Limits{} }

// Over returns l with each zero field taken from d (the defaults).
func (l Limits) Over(d Limits) Limits {
	if l.MemoryBytes == 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.Pids == 0 {
		l.Pids = d.Pids
	}
	if l.CPUWeight == 0 {
		l.CPUWeight = d.CPUWeight
	}
	return l
}

// Enforced returns l with NoLimit fields made zero: what a host has to
// enforce, zero for nothing.
func (l Limits) Enforced() Limits {
	if l.MemoryBytes < 0 {
		l.MemoryBytes = 0
	}
	if l.Pids < 0 {
		l.Pids = 0
	}
	if l.CPUWeight < 0 {
		l.CPUWeight = 0
	}
	return l
}

// Validate reports a field out of range.
func (l Limits) Validate() error {
	switch {
	case l.MemoryBytes < NoLimit || (l.MemoryBytes > 0 && l.MemoryBytes < MinMemoryLimit):
		return invalidf("memory limit %s is below %s", FormatBytes(l.MemoryBytes), FormatBytes(MinMemoryLimit))
	case l.Pids < NoLimit || (l.Pids > 0 && l.Pids < MinPidsLimit):
		return invalidf("process limit %d is below %d", l.Pids, MinPidsLimit)
	case l.CPUWeight < NoLimit || l.CPUWeight > 10000:
		return invalidf("cpu weight %d is not between 1 and 10000", l.CPUWeight)
	}
	return nil
}

// The smallest limits that still let a provider start.
const (
	MinMemoryLimit = 16 << 20
	MinPidsLimit   = 8
)

// String is l as the CLI takes it: "memory 512M, pids 256, cpu weight
// 100", "default" for a zero field and "none" for NoLimit.
func (l Limits) String() string {
	f := func(v int64, s string) string {
		switch v {
		case 0:
			return "default"
		case NoLimit:
			return "none"
		}
		return s
	}
	return fmt.Sprintf("memory %s, pids %s, cpu weight %s", f(l.MemoryBytes, FormatBytes(l.MemoryBytes)),
		f(l.Pids, strconv.FormatInt(l.Pids, 10)), f(l.CPUWeight, strconv.FormatInt(l.CPUWeight, 10)))
}

// ParseBytes reads a size: a number of bytes with an optional suffix K,
// M, G or T (powers of 1024, an optional "i" and "B" after it: 512M,
// 1GiB), or "none" (NoLimit).
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if strings.EqualFold(t, "none") || strings.EqualFold(t, "max") {
		return NoLimit, nil
	}
	u := strings.ToUpper(t)
	u = strings.TrimSuffix(u, "B")
	u = strings.TrimSuffix(u, "I")
	shift := 0
	if n := len(u); n > 0 {
		switch u[n-1] {
		case 'K':
			shift = 10
		case 'M':
			shift = 20
		case 'G':
			shift = 30
		case 'T':
			shift = 40
		}
		if shift > 0 {
			u = u[:n-1]
		}
	}
	v, err := strconv.ParseInt(u, 10, 64)
	if err != nil || v <= 0 || v > (1<<62)>>shift {
		return 0, fmt.Errorf("%q is not a size such as 512M or 2G (or none)", s)
	}
	return v << shift, nil
}

// FormatBytes writes n as ParseBytes reads it, in the largest unit that
// divides it: 512M, 1G, 1536K.
func FormatBytes(n int64) string {
	if n == NoLimit {
		return "none"
	}
	for _, u := range []struct {
		shift  uint
		suffix string
	}{{40, "T"}, {30, "G"}, {20, "M"}, {10, "K"}} {
		if n > 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
