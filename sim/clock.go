package sim

import (
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Epoch is the abstract time at which every simulated run starts.
var Epoch = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// Clock is an abstract clock: it moves only when told to. It satisfies
// supervisor.Clock.
type Clock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

// NewClock returns a clock set to t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// IDs makes canonical UUIDv7 strings from an abstract clock and a seeded
// random source, so that a run can be replayed. Ids never repeat and sort
// in the order they were made, as long as the clock does not go back: the
// bits after the timestamp start with a counter.
type IDs struct {
	mu    sync.Mutex // guards the fields below
	clock func() time.Time
	rng   *rand.Rand
	n     uint64
	force string
}

// NewIDs returns a generator whose counter starts after first.
func NewIDs(clock func() time.Time, seed uint64, first uint64) *IDs {
	return &IDs{clock: clock, rng: rand.New(rand.NewPCG(seed, 0x1d5)), n: first}
}

// New returns the next id (or the one ForceNext asked for).
func (g *IDs) New() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if id := g.force; id != "" {
		g.force = ""
		return id
	}
	g.n++
	var u uuid.UUID
	ms := uint64(g.clock().UnixMilli())
	binary.BigEndian.PutUint64(u[0:8], ms<<16) // 48-bit timestamp
	randA := (g.n >> 30) & 0xfff
	u[6] = 0x70 | byte(randA>>8) // version 7
	u[7] = byte(randA)
	randB := (g.n&(1<<30-1))<<32 | uint64(g.rng.Uint32())
	binary.BigEndian.PutUint64(u[8:16], randB)
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	return u.String()
}

// Count returns how many ids the generator has made (plus its start).
func (g *IDs) Count() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// ForceNext makes the next New return id: the simulation's way to make two
// messages collide, as a broken id source or a file copied in by hand
// would.
func (g *IDs) ForceNext(id string) {
	g.mu.Lock()
	g.force = id
	g.mu.Unlock()
}
