package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/substrat/substrat/provider/fakeapi"
	"github.com/substrat/substrat/supervisor/api"
)

// benchParking is what the parking phase measured: agents of one provider
// (openai, against a loopback fake) parked at one reset time by a 429
// whose Retry-After is that time, then resumed by the daemon itself.
type benchParking struct {
	Agents int `json:"agents"`
	// ParkMS: from the first send to every agent parked.
	ParkMS float64 `json:"park_ms"`
	// FirstMS and ResumeMS: from the reset to the first and the last
	// agent's answered turn.
	FirstMS  float64 `json:"first_resume_ms"`
	ResumeMS float64 `json:"resume_ms"`
	// Requests is how often the API was asked while the limit held.
	Requests int `json:"requests_limited"`
	// Other is the turn time of an agent of another provider (script,
	// in a pool of its own), sent turns while the parked agents resumed.
	Other benchLatency `json:"other_turn"`
}

// parking parks many agents at one reset time and measures how long the
// daemon takes to resume them all, and whether another agent's turns are
// held up meanwhile.
func (b *benchRun) parking() error {
	n := b.cfg.ParkAgents
	if n <= 0 {
		return nil
	}
	var mu sync.Mutex
	var reset time.Time // zero: not limited yet
	limited := 0
	fake := fakeapi.NewOpenAI(func(r fakeapi.OpenAIRequest) fakeapi.OpenAIOut {
		mu.Lock()
		defer mu.Unlock()
		if time.Now().Before(reset) {
			limited++
			h := http.Header{}
			h.Set("Retry-After", reset.UTC().Format(http.TimeFormat))
			return fakeapi.OpenAIOut{Status: http.StatusTooManyRequests, Header: h}
		}
		return fakeapi.OpenAIOut{Text: "answered after the reset"}
	})
	defer fake.Close()
	home := filepath.Join(b.dir, "parking")
	// The other provider's agent has a pool of its own.
	if err := os.MkdirAll(home, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(home, "config.json"), []byte(`{"version": 1, "pools": {"other": 2}}`), 0o600); err != nil {
		return err
	}
	d, err := startBenchDaemon(b.ctx, b.cfg.Exe, home, time.Minute,
		"OPENAI_BASE_URL="+fake.URL, "OPENAI_API_KEY=sk-bench", "OPENAI_MODEL=bench-model", "SUBSTRAT_MAX_SLOTS=8")
	if err != nil {
		return err
	}
	defer d.stop()
	ctx := b.ctx
	if _, err := daemonCall(ctx, d, api.AgentCreate, api.CreateParams{Name: "other", Provider: "script", Pool: "other"}); err != nil {
		return err
	}
	b.progress("parking: creating %d agents", n)
	for i := range n {
		if _, err := daemonCall(ctx, d, api.AgentCreate, api.CreateParams{Name: fmt.Sprintf("p%d", i), Provider: "openai"}); err != nil {
			return err
		}
	}
	// The reset leaves time to park them all (1,000 took 2 s on the
	// 2-core test machine: after the first, the others park without
	// asking the API), and is further off than the 5 s a provider waits
	// out inline (retry.DefaultParkAfter) for the last of them.
	window := 8*time.Second + time.Duration(n)*15*time.Millisecond
	mu.Lock()
	reset = time.Now().Add(window).Truncate(time.Second)
	mu.Unlock()
	start := time.Now()
	for i := range n {
		if _, err := daemonStream(ctx, d, api.AgentSend, api.SendMessageParams{Ref: fmt.Sprintf("p%d", i), Text: "work", Wait: false}); err != nil {
			return err
		}
	}
	res := &benchParking{Agents: n}
	count := func(pred func(api.AgentInfo) bool) (int, error) {
		list, err := daemonCall(ctx, d, api.AgentList, api.ListParams{})
		if err != nil {
			return 0, err
		}
		k := 0
		for _, a := range list {
			if a.Name != "other" && pred(a) {
				k++
			}
		}
		return k, nil
	}
	for {
		k, err := count(func(a api.AgentInfo) bool { return a.Parked != nil })
		if err != nil {
			return err
		}
		if k == n {
			break
		}
		if time.Now().After(reset) {
			b.progress("parking: only %d of %d agents parked before the reset; not measured", k, n)
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	res.ParkMS = float64(time.Since(start).Milliseconds())
	b.progress("parking: %d agents parked in %.1f s; the reset is in %.0f s", n, res.ParkMS/1000, time.Until(reset).Seconds())
	time.Sleep(time.Until(reset))
	stop := make(chan struct{})
	var others []time.Duration
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // an agent of another provider, meanwhile
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			if _, err := daemonStream(ctx, d, api.AgentSend, api.SendMessageParams{Ref: "other", Text: "hi", Wait: true}); err == nil {
				others = append(others, time.Since(t0))
			}
		}
	}()
	for {
		k, err := count(func(a api.AgentInfo) bool { return a.Counters.Turns >= 1 })
		if err != nil {
			close(stop)
			wg.Wait()
			return err
		}
		if k > 0 && res.FirstMS == 0 {
			res.FirstMS = float64(time.Since(reset).Milliseconds())
		}
		if k == n {
			break
		}
		if time.Since(reset) > 10*time.Minute {
			close(stop)
			wg.Wait()
			return fmt.Errorf("only %d of %d parked agents answered within 10 minutes of the reset", k, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	res.ResumeMS = float64(time.Since(reset).Milliseconds())
	close(stop)
	wg.Wait()
	res.Other = benchLatency{NA: "no turn ended"}
	if len(others) > 0 {
		res.Other = latencies(others)
	}
	mu.Lock()
	res.Requests = limited
	mu.Unlock()
	b.res.Parking = res
	b.progress("parking: all %d resumed %.1f s after the reset (the first after %.0f ms)", n, res.ResumeMS/1000, res.FirstMS)
	return nil
}

// writeParking writes the parking phase's lines of the report.
func writeParking(w io.Writer, p *benchParking) {
	if p == nil {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "PARKING: %s agents of one provider parked at one reset time (a 429 whose Retry-After is that time), in %.1f s; the API asked %d times while limited\n",
		thousands(float64(p.Agents)), p.ParkMS/1000, p.Requests)
	fmt.Fprintf(w, "  from the reset: the first answered turn after %.0f ms, all %s after %.1f s\n", p.FirstMS, thousands(float64(p.Agents)), p.ResumeMS/1000)
	fmt.Fprintf(w, "  another provider's agent meanwhile: %s turns, p50 %.0f ms, max %.0f ms\n", strconv.Itoa(p.Other.N), p.Other.P50MS, p.Other.MaxMS)
}
