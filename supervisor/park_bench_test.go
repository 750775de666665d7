package supervisor

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script"
	"github.com/substrat/substrat/supervisor/api"
)

// BenchmarkResumeParked: 1,000 agents of one provider park at one reset
// time (each parking turn a parked event, fsynced, on a real temporary
// directory). At the reset the daemon's ticker runs Tick (closing the
// 1,000 parks, an fsynced event each) while a scheduler loop runs what is
// runnable, and an agent of another provider takes turns throughout.
// Reported: the time to park them (park_ms), to close the parks
// (unpark_ms), from the reset to the first and to the last resumed turn
// (first_resume_ms, resume_all_ms), and the other agent's turn times
// before and during the resumption (other_turn_ms_before, _during_max).
// Run it with -benchtime=1x: its setup makes 1,000 agents.
func BenchmarkResumeParked(b *testing.B) {
	const parked = 1000
	for range b.N {
		b.StopTimer()
		clock := &fakeClock{t: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}
		reset := clock.t.Add(time.Hour)
		var done atomic.Int64
		lim := limitedProvider{Provider: script.New(), until: reset, clock: clock, name: "limited", done: &done}
		c := newCoreWith(b, b.TempDir(), false, Config{Clock: clock, Providers: provider.NewRegistry(script.New(), lim)})
		set := c.Settings()
		set.Pools[DefaultPool] = 64
		if err := c.SetSettings(set); err != nil {
			b.Fatal(err)
		}
		other := mustCreate(b, c, api.CreateParams{Name: "other"})
		ids := make([]string, parked)
		for i := range ids {
			ids[i] = mustCreate(b, c, api.CreateParams{Name: fmt.Sprintf("p%d", i), Provider: "limited"}).ID
		}
		otherTurn := func() time.Duration {
			start := time.Now()
			send(b, c, "other", "hello")
			if err := c.RunTurn(context.Background(), other.ID); err != nil {
				b.Fatal(err)
			}
			return time.Since(start)
		}
		var before []time.Duration
		for range 5 {
			before = append(before, otherTurn())
		}
		start := time.Now()
		for i, id := range ids {
			send(b, c, fmt.Sprintf("p%d", i), "work")
			if err := c.RunTurn(context.Background(), id); err != nil {
				b.Fatal(err)
			}
		}
		parkTime := time.Since(start)
		if n := len(c.Runnable()); n != 0 {
			b.Fatalf("%d agents runnable while parked", n)
		}

		b.StartTimer()
		clock.Add(time.Hour) // the reset
		begin := time.Now()
		var wg sync.WaitGroup
		var unpark time.Duration
		wg.Add(1)
		go func() { // the daemon's ticker
			defer wg.Done()
			t0 := time.Now()
			c.Tick(clock.Now())
			unpark = time.Since(t0)
		}()
		stop := make(chan struct{})
		var during []time.Duration
		wg.Add(1)
		go func() { // an agent of another provider, meanwhile
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					during = append(during, otherTurn())
				}
			}
		}()
		var first time.Duration
		for done.Load() < parked { // the scheduler
			for _, id := range c.Runnable() {
				if id == other.ID {
					continue
				}
				if err := c.RunTurn(context.Background(), id); err != nil {
					b.Fatal(err)
				}
				if first == 0 && done.Load() > 0 {
					first = time.Since(begin)
				}
			}
		}
		all := time.Since(begin)
		close(stop)
		wg.Wait()
		b.StopTimer()
		b.ReportMetric(float64(parkTime.Milliseconds()), "park_ms")
		b.ReportMetric(float64(unpark.Milliseconds()), "unpark_ms")
		b.ReportMetric(float64(first.Microseconds())/1000, "first_resume_ms")
		b.ReportMetric(float64(all.Milliseconds()), "resume_all_ms")
		b.ReportMetric(float64(slices.Max(before).Microseconds())/1000, "other_turn_ms_before_max")
		b.ReportMetric(float64(slices.Max(during).Microseconds())/1000, "other_turn_ms_during_max")
		b.ReportMetric(float64(len(during)), "other_turns_during")
	}
}
