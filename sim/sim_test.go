package sim

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
)

var (
	flagSeed  = flag.Uint64("sim.seed", 1, "first seed")
	flagSeeds = flag.Int("sim.seeds", 0, "number of seeds (0: a default bounded for go test)")
	flagSteps = flag.Int("sim.steps", 0, "actions per seed (0: default)")
	flagCrash = flag.Int64("sim.crash", -1, "crash only at this persist point (-1: at every one)")
	flagCont  = flag.Int("sim.continue", 0, "run the rest of the actions after every n-th crash (0: default)")
	flagBug   = flag.String("sim.bug", "", "plant this bug (see fsstore.Bugs) while running")
)

func bugNamed(t *testing.T, name string) fsstore.Bug {
	if name == "" {
		return fsstore.BugNone
	}
	for _, b := range fsstore.Bugs {
		if b.String() == name {
			return b
		}
	}
	t.Fatalf("no bug named %q", name)
	return fsstore.BugNone
}

// TestSim runs seeds, crashing each at every persist point (see the
// package doc). It goes on after a failure, up to five, so that a long run
// reports several.
func TestSim(t *testing.T) {
	seeds, steps, cont := *flagSeeds, *flagSteps, *flagCont
	if seeds == 0 {
		seeds = 16
		if raceEnabled {
			seeds = 4 // about 2000 crash points in 30 s
		}
		if testing.Short() {
			seeds = 2
		}
	}
	if steps == 0 {
		steps = 30
	}
	if cont == 0 {
		cont = 4
	}
	bug := bugNamed(t, *flagBug)
	defer fsstore.PlantBug(bug)()
	start := time.Now()
	var (
		ops            int64
		points, conts  int
		failures, done int
		stats          Stats
	)
	for s := *flagSeed; s < *flagSeed+uint64(seeds) && failures < 5; s++ {
		o := Options{Seed: s, Steps: steps, Crash: *flagCrash, ContinueEvery: cont, Bug: bug}
		if *flagCrash >= 0 && testing.Verbose() {
			o.Log = t.Logf
		}
		res := Run(o)
		done++
		ops += res.Ops
		points += res.Points
		conts += res.Continued
		stats.Add(res.Stats)
		if f := res.Failure; f != nil {
			failures++
			t.Errorf("%v\nkept as a regression test, it is a scenario (see testdata/scenarios):\n%s", f, f.Scenario())
		}
	}
	d := time.Since(start)
	t.Logf("%d seeds of %d actions in %.1fs (%.2f seeds/s): %d persist points; %d crashes recovered and checked (%.0f/s), "+
		"%d with something acknowledged before them, %d run to the end and compared with the run without a crash",
		done, steps, d.Seconds(), float64(done)/d.Seconds(), ops, points, float64(points)/d.Seconds(), stats.Acked, conts)
	t.Logf("actions: %s", countList(stats.Actions))
	rec := map[string]int{}
	for k, v := range stats.Recovery {
		rec[string(k)] = v
	}
	t.Logf("recoveries: %d crashes kept part of an unsynced write; %d found an ACTIVE session, %d undelivered messages; "+
		"%d were crashed themselves and recovered again; findings: %s",
		stats.Torn, stats.Suspended, stats.Redelivered, stats.DoubleCrashes, countList(rec))
}

func countList(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// TestSimCatchesPlantedBugs proves that the simulation can fail: each
// known durability bug, planted in fsstore in turn, must be caught within
// a few seeds.
func TestSimCatchesPlantedBugs(t *testing.T) {
	const maxSeeds = 10
	for _, bug := range fsstore.Bugs {
		t.Run(bug.String(), func(t *testing.T) {
			defer fsstore.PlantBug(bug)()
			for s := uint64(1); s <= maxSeeds; s++ {
				res := Run(Options{Seed: s, Steps: 30, Crash: -1, ContinueEvery: 4, Bug: bug})
				if f := res.Failure; f != nil {
					t.Logf("caught at seed %d, persist point %d (%d points checked):\n%v", s, f.Crash, res.Points, f)
					return
				}
			}
			t.Errorf("bug %s planted, and %d seeds found nothing", bug, maxSeeds)
		})
	}
}
